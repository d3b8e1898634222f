"""2 CPU ranks (gloo, launched by torchrun) make the same update as 1 rank on the same batch.

The ranks hold uneven shares (5 and 3 rows, different token counts) and accumulate over micro-batches;
the loss normaliser is counted over both ranks. A control run that normalises per rank must differ,
so the comparison can fail. One torchrun launch runs every case (start-up dominates).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tempering.models import tiny_model

sys.path.insert(0, str(Path(__file__).parent))
import dp_worker

pytestmark = pytest.mark.slow
WORKER = Path(__file__).parent / "dp_worker.py"
MATCHING_STATS = ("grad_norm", "entropy", "approx_kl", "clip_frac_high", "clip_frac_low", "mismatch_kl", "policy_loss")


def torchrun(*args, nproc=2, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp") / "rank0.pt"
    res = torchrun(WORKER, out)
    assert res.returncode == 0, res.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize("strategy,agg,clip", dp_worker.CASES)
def test_two_ranks_make_the_one_rank_update(two_ranks, strategy, agg, clip):
    model = tiny_model("tiny-xs", seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = dp_worker.update(model, dp_worker.full_batch(), dp_worker.settings(agg, clip))
    want = model.state_dict()
    got = two_ranks[(strategy, agg, clip, "global")]
    control = two_ranks[(strategy, agg, clip, "local")]

    assert max(float((want[k] - before[k]).abs().max()) for k in want) > 1e-3  # the update moved the weights
    for k in want:
        torch.testing.assert_close(got["weights"][k], want[k], atol=1e-6, rtol=1e-5)
    for k in MATCHING_STATS:
        assert got["stats"][k] == pytest.approx(stats[k], rel=1e-4, abs=1e-7), k
    # per-rank normalisation (the classic bug) gives another update: the comparison is sensitive
    assert max(float((control["weights"][k] - want[k]).abs().max()) for k in want) > 1e-4
