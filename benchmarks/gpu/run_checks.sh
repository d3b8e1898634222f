#!/usr/bin/env bash
# Every GPU check of tempering in one go: vLLM (colocated engine: log-prob agreement, weight sync, the
# recipe through it) and NCCL data-parallel training (DDP, FSDP2). Needs a CUDA GPU; the vLLM checks also
# need the extra (pip install 'tempering[vllm]') and are reported as skipped without it.
#   bash benchmarks/gpu/run_checks.sh            # from the repository root, in the project's environment
# Writes the pytest log and a JUnit report to $OUT (or ./gpu-checks) for the record.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-gpu-checks}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
"$PY" -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null | tee -a "$OUT/gpu.txt" || echo "vllm not installed: vLLM checks will be skipped" | tee -a "$OUT/gpu.txt"
PYTHONUNBUFFERED=1 "$PY" -m pytest -m gpu -p no:cacheprovider -rs -s \
  tests/rollout/test_vllm_gpu.py tests/distributed/test_nccl_gpu.py \
  --junitxml="$OUT/gpu-checks.xml" 2>&1 | tee "$OUT/gpu-checks.log"
exit "${PIPESTATUS[0]}"
