"""Compile, verify and profile one submission against one problem, everything inside the sandbox.

    verifier = KernelVerifier(VerifyConfig())
    result = await verifier.verify(problem, text)       # KernelResult: status, timings, rewards

Steps: parse and static-check the answer (no code runs on the host): its Python against the policy
of harness/policy.py, a `c` kernel's source for headers and inline assembly; compile in a sandbox job
through the content-addressed `BuildCache` (gcc for `c`, `load_inline` for `torch_ext`, nvcc to a
cubin for `cuda`); check what a compiled `c` kernel calls (elf.py); then run the judge
(`harness/verify.py`) in a fresh sandboxed process tree: forked from a warm worker
(`harness/worker.py`, torch imported once per worker), or a sandbox job of its own. The judge forks
the candidate's process before it knows any secret, computes the reference and compares in its own
process, and times the candidate with its own clock (docs/kernels.md). Its result line must carry a
nonce given on stdin. torch.compile baselines are measured once per problem and machine and kept on
disk.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Literal

from tempering.envs.kernels import rewards
from tempering.envs.kernels.elf import check_c_library, check_extension
from tempering.envs.kernels.problems import Problem
from tempering.envs.kernels.submission import Submission, c_source_check, parse_submission, static_check
from tempering.envs.kernels.workers import workers_for
from tempering.errors import UserError
from tempering.sandbox.image import PYTHON_DISTRIBUTIONS, SYSTEM_PACKAGES, Spec


def _kernel_image() -> Spec:
    """The default RAM image, torch, and ninja (torch builds C++ extensions with it) from Debian or PyPI."""
    debian = ("ninja-build",) if os.path.exists("/usr/bin/ninja") and os.path.exists(_NINJA_DPKG) else ()
    pypi = ("ninja",) if importlib.util.find_spec("ninja") else ()
    return Spec((*SYSTEM_PACKAGES, *debian), (*PYTHON_DISTRIBUTIONS, "torch", *pypi))


_NINJA_DPKG = "/var/lib/dpkg/info/ninja-build.list"
KERNEL_IMAGE = _kernel_image()
"""The sandbox image kernel jobs see: the default RAM image (with its C/C++ toolchain and the interpreter's
headers), torch and ninja; a CUDA toolkit a job binds is copied onto the RAM disk (docs/sandbox.md,
"The image")."""

HARNESS_FILES = (
    "verify.py",
    "runner.py",
    "policy.py",
    "wire.py",
    "ckernel.py",
    "worker.py",
    "cleanup.py",
    "syscalls.py",
    "ipsample.py",
)
HARNESS_VERSION = 3
"""Part of a cached baseline's key: timings of another harness are not comparable."""
C_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-nostartfiles", "-std=c11")
"""-nostartfiles: gcc's start files add load-time code (_init, a frame_dummy in .init_array); a kernel
needs none, and elf.load_time_code refuses any the source adds."""
CUDA_ARCH = "sm_90"
EXTENSION_BACKENDS = ("torch_ext", "cuda")
"""Backends built as a torch extension and run in the candidate's process (under the dispatch guard)."""
RESULT_BYTES = 1 << 20
"""Most bytes of the judge's result line read back."""


@dataclass
class VerifyConfig:
    """How submissions are compiled, checked and timed."""

    seeds: int = 3
    """Correctness trials with fresh `get_inputs()`, each under a seed drawn in secret by the judge for
    this evaluation, after the submission is loaded (nothing the submission can read holds it)."""
    signed_trials: int = 2
    """Extra trials with signed (randn) inputs: `torch.rand` inputs in [0, 1) let identity pass ReLU."""
    large_trials: int = 1
    """Extra trials with large inputs (randn x 50: logits past exp's float32 range, where a softmax or
    log-softmax that skips subtracting the maximum overflows); skipped where the reference overflows."""
    outlier_trials: int = 1
    """Extra trials with `get_inputs()` plus outliers (one element in a thousand set to a thousand times
    the input's spread): a reduction that skips elements misses them."""
    special_trials: int = 1
    """Extra trials with special values placed among `get_inputs()`'s (infinities, a row of -inf, -0.0,
    denormals; NaN where the problem names it): the problem's `special_values`, else those on which the
    reference is reproducible. Non-finite outputs must match the reference's in place, kind and sign."""
    extra_shapes: int = 1
    """Extra trials on a smaller batch (a secret size below the problem's), where every input shares
    its leading size and the reference accepts it: a kernel must not be keyed on the one shape."""
    precision_rms: float = 1e-4
    """float32 outputs, of any size: an RMS error (against the reference run in float64) up to this share
    of the output's RMS always passes. float32 arithmetic stays orders of magnitude below; float16 gives
    ~3e-4, bfloat16 ~2e-3 (precision downgrades that atol = rtol = 1e-2 would let through)."""
    precision_factor: float = 32.0
    """float32 outputs: an RMS error up to this multiple of float32's own error on the same inputs (the
    float32 reference's error against float64, with the effect of rounding the inputs) also passes:
    sparse or cancelling outputs, whose float32 error is large beside their RMS, are not rejected."""
    atol: float = 1e-2
    """Absolute tolerance of the comparison, in units of the reference output's RMS (KernelBench's
    absolute 1e-2 for outputs of unit size; the same verdict whatever the outputs' scale)."""
    rtol: float = 1e-2
    """Relative tolerance of the comparison."""
    warmup: int = 3
    """Untimed runs of each model before timing."""
    timed_runs: int = 20
    """Timed runs of each model, interleaved candidate / eager / compile / null; medians are reported.
    Raised (up to `max_run_factor` x) when a model's calls are short, so that `min_timed_s` is timed."""
    min_timed_s: float = 0.05
    """Seconds of net eager time to time at least (small problems get more runs)."""
    max_run_factor: int = 5
    """At most this many times `timed_runs`."""
    threads: int = 1
    """Fixed CPU thread count for torch and OpenMP (candidate and baselines alike)."""
    clock: str = "auto"
    """What a timed call costs: `cpu` (the CPU time the kernel counted for the answering process, all
    its threads: a loaded machine's scheduling delays do not inflate it), `wall` (the judge's clock
    from request to answer), or `auto`: cpu on a CPU with one thread, else wall (several threads'
    CPU time adds up, and GPU work is not CPU time). Both are always in `timing`."""
    compile_baseline: Literal["cached", "every", "once", "off"] = "cached"
    """torch.compile baseline behind reward 3: `cached` (measured: one baseline job per problem, sizes,
    torch version, machine and thread count times eager and torch.compile interleaved; its compile
    median is kept on disk under `cache_dir` and used as is), `once` (estimated from the same cached
    job: t_compile = t_eager(this job) * its compile/eager ratio; `compile_estimated` is set), `every`
    (timed in each job beside the candidate; a cold compile is ~20 s on a CPU) or `off`."""
    device: str = "cpu"
    """`cpu`, or `cuda` on a GPU machine."""
    backend: str | None = None
    """Force a backend (`c`, `torch_ext`, `cuda`, `triton`); None infers it from the code."""
    static_checks: bool = True
    """Reject try/except fallbacks, threads, timer patching, tensor subclasses, ... before compiling."""
    allow_ops: tuple[str, ...] = ()
    """Extra aten ops allowed in the candidate's forward (e.g. `mm` for vendor GEMM), besides
    allocation, views and copies."""
    ip_sampling: Literal["require", "off"] = "require"
    """Sample where the candidate's CPU time goes (perf events the judge opens on every thread of the
    candidate's process and of a `c` kernel's host, user space only), so that library code reached at
    run time (MKL's GEMM found through libtorch's symbol table) is seen whatever route led to it.
    `require`: where perf events cannot be opened (gVisor, `kernel.perf_event_paranoid` above 2) the
    evaluation is `harness_error` saying so; `off`: not sampled (`result.ip_samples` is None). Only `c` and
    `torch_ext` kernels on a CPU are sampled (a GPU's work is not the host's code; Triton on a CPU runs
    in its interpreter)."""
    library_share: float = 0.2
    """The most of the kernel's sampled time in its calls after the first (which may hold one-time set-up),
    the harness's own share left out, that may lie in code outside the kernel's own object, the C
    and C++ runtimes, libm and OpenMP (MKL, oneDNN, ATen's kernels, ...): above it the evaluation is
    `library_compute`, naming the functions. Honest kernels measure 0-5% (docs/kernels.md)."""
    flag_speedup: float = 10.0
    """Speedups above this are flagged for review (not rejected), as KernelBench does."""
    margin: float = 0.05
    """CUDA Agent's 'faster by more than' margin."""
    flush_mb: int = 32
    """Bytes written between timed runs to flush the CPU caches."""
    wall_s: float = 180.0
    """Wall-clock limit of one verification job (compile baseline included)."""
    memory_mb: int = 8192
    """Address-space limit of one verification job (torch reserves a lot of virtual memory; keep
    concurrency x memory_mb below the machine's memory)."""
    warm_workers: bool = True
    """Verify in warm workers: sandbox jobs that import torch once and run each candidate in a fresh
    process forked from them, cleaned up after (see harness/worker.py), as many as the sandbox pool
    has slots. False: one sandbox job per candidate (each pays the sandbox start and the import)."""
    build_wall_s: float = 300.0
    """Wall-clock limit of one compile job (torch_ext builds take tens of seconds)."""
    use_pch: bool = False
    """torch_ext: build with torch's precompiled header (needs it prebuilt, see docs/kernels.md)."""
    cache_dir: str | None = None
    """Build cache folder (default: ~/.cache/tempering/kernels)."""
    c_flags: tuple[str, ...] = C_FLAGS
    """gcc flags of `c` submissions (add -ffast-math to get glibc's vectorised expf/tanhf; it changes
    NaN/inf semantics, so it is not the default)."""


@dataclass
class KernelResult:
    """Everything known about one verified submission."""

    problem: str
    """Problem name."""
    backend: str
    """Backend the submission was run with."""
    status: str
    """`correct`, `incorrect`, `compile_error`, `build_timeout`, `bad_submission`, `static_check`, `forbidden_op`,
    `kernel_not_called`, `mutated_inputs`, `bad_output`, `runtime_error`, `timeout`,
    `memory_exceeded`, `crashed`, `early_exit`, `tampering`, `compiled_only`, `sandbox_error`."""
    message: str = ""
    """Why, in words (compiler errors trimmed, the mismatch report, ...)."""
    compiled: bool = False
    """The kernel compiled (or needed no compile)."""
    correct: bool = False
    """All correctness trials passed."""
    t_ms: float | None = None
    """Median candidate time, the harness's fixed overhead (`timing_overhead_ms`) subtracted."""
    t_eager_ms: float | None = None
    """Median eager PyTorch time, interleaved with the candidate's, overhead subtracted."""
    t_compile_ms: float | None = None
    """Median torch.compile time (measured, or estimated from the per-problem ratio, see config),
    overhead subtracted; None when the baseline is refused (slower than eager, see `baseline_note`)."""
    timing_overhead_ms: float | None = None
    """The fixed cost of one timed call (a null model that returns a ready output, timed the same way)."""
    baseline_note: str = ""
    """Why the torch.compile baseline was not used (it was slower than eager), if it was not."""
    kernel_source: bool = False
    """The submission had something to compile (a C source, an extension or a Triton kernel)."""
    error_rms_rel: float | None = None
    """Largest RMS error of a float32 output relative to its RMS, over the correctness trials."""
    secret_seed: int | None = None
    """The seed the judge drew for this evaluation (told after it, to reproduce it)."""
    ip_samples: dict | None = None
    """Where the candidate's sampled CPU time went (`ip_sampling`): samples per object, the harness's
    own share, the share outside the allowed objects, the sampling period."""
    speedup_eager: float | None = None
    """t_eager / t."""
    speedup_compile: float | None = None
    """t_compile / t."""
    compile_estimated: bool = False
    """t_compile_ms comes from the once-per-problem ratio, not from this job."""
    cuda_agent_reward: int = -1
    """CUDA Agent's {-1, 1, 2, 3}."""
    log_speedup: float = -1.0
    """log2(speedup over eager) if correct, else -1."""
    score: float = 0.0
    """[0, 1] refinement score (rewards.score)."""
    flagged: bool = False
    """Speedup above `flag_speedup`: review by hand."""
    interpreted: bool = False
    """Ran through an interpreter (Triton on a CPU): correctness only, no speed reward."""
    timing: dict = field(default_factory=dict)
    """Per-model timing (median, quartiles, runs)."""
    mismatch: dict | None = None
    """The first correctness mismatch (max abs/rel error and where)."""
    violations: list = field(default_factory=list)
    """Static-check findings."""
    compile_log: str = ""
    """Trimmed compiler output (errors, or ptxas register/spill lines)."""
    ptxas: dict | None = None
    """CUDA compile-only: registers and spill bytes per kernel."""
    build_cached: bool = False
    """The build came from the cache."""
    build_s: float = 0.0
    """Seconds spent compiling (0 on a cache hit)."""
    run_s: float = 0.0
    """Seconds of the verification job (in a warm worker: of the candidate's own process)."""
    run_cpu_s: float = 0.0
    """CPU seconds of the same (a job of its own includes its start and torch import; a worker's
    candidate does not, the worker pays those once)."""

    def reward(self, kind: str) -> float:
        """The reward named `kind` (`cuda_agent`, `log_speedup`, `correct`)."""
        if self.interpreted and kind != "correct":
            return rewards.reward("correct", self.correct, None, None, None)
        return rewards.reward(kind, self.correct, self.t_ms, self.t_eager_ms, self.t_compile_ms)

    def to_dict(self) -> dict:
        return asdict(self)


def trim_compiler_output(text: str, max_errors: int = 5, max_chars: int = 2000) -> str:
    """The first `max_errors` error blocks of a compiler's output (what a model needs to fix it)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out, errors = [], 0
    for ln in lines:
        if re.search(r"\berror\b", ln):
            errors += 1
            if errors > max_errors:
                out.append(f"... ({sum('error' in x for x in lines) - max_errors} more errors)")
                break
        if errors:
            out.append(ln)
    text = "\n".join(out or lines[:20])
    return text[:max_chars]


def parse_ptxas(text: str) -> dict:
    """{kernel: {registers, spill_stores, spill_loads}} from `nvcc -Xptxas -v` output."""
    info: dict[str, dict] = {}
    current = None
    for ln in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", ln) or re.search(r"Function properties for (\S+)", ln)
        if m:
            current = m.group(1)
            info.setdefault(current, {})
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ln)
        if m and current:
            info[current].update(spill_stores=int(m.group(1)), spill_loads=int(m.group(2)))
        m = re.search(r"Used (\d+) registers", ln)
        if m and current:
            info[current]["registers"] = int(m.group(1))
    return info


def _harness_files() -> dict[str, str]:
    pkg = resources.files("tempering.envs.kernels.harness")
    return {name: pkg.joinpath(name).read_text() for name in HARNESS_FILES}


def available_backends() -> dict[str, str]:
    """{backend: "" if it can run here, else why not} (detected, not assumed)."""
    out = {"c": "" if shutil.which("gcc") else "no gcc on PATH"}
    try:
        import torch.utils.cpp_extension

        out["torch_ext"] = "" if shutil.which("g++") else "no g++ on PATH"
    except Exception as e:  # pragma: no cover
        out["torch_ext"] = f"torch.utils.cpp_extension unavailable: {e}"
    import torch

    gpu = torch.cuda.is_available()
    nvcc = shutil.which("nvcc")
    if gpu and nvcc:
        out["cuda"] = ""
    elif nvcc:
        out["cuda"] = "compile-only: no GPU (nvcc checks the kernel and reports registers/spills)"
    else:
        out["cuda"] = "no nvcc on PATH and no GPU"
    try:
        import triton  # noqa: F401

        out["triton"] = "" if gpu else "interpreter only (TRITON_INTERPRET=1): correctness, no timing"
    except Exception:
        out["triton"] = "triton is not installed (pip install 'tempering[triton]')"
    return out


_TORCH_EXT_ARGS_BUILD = '''"""Build a load_inline extension from its literal arguments (runs in a sandboxed build job)."""
import json, os, shutil
import torch.utils.cpp_extension as ce
args = json.load(open("ext_args.json"))
os.makedirs("build", exist_ok=True)
module = ce.load_inline(**args, build_directory=os.path.abspath("build"), verbose=False, use_pch=USE_PCH)
shutil.copy(module.__file__, "ext.so")
'''

_TORCH_EXT_BUILD = '''"""Build the submission's load_inline extension (runs in a sandboxed build job)."""
import importlib.util, os, shutil, sys
import torch.utils.cpp_extension as ce
real, built = ce.load_inline, []
def load_inline(name, *args, **kwargs):
    os.makedirs("build", exist_ok=True)
    kwargs.update(build_directory=os.path.abspath("build"), verbose=False, use_pch=USE_PCH)
    module = real(name, *args, **kwargs)
    built.append(module.__file__)
    return module
ce.load_inline = load_inline
spec = importlib.util.spec_from_file_location("candidate_submission", "model_new.py")
spec.loader.exec_module(importlib.util.module_from_spec(spec))
if not built:
    sys.exit("the submission never called load_inline")
shutil.copy(built[0], "ext.so")
'''


class KernelVerifier:
    """Verifies submissions on one sandbox pool with one build cache; async and concurrent."""

    def __init__(self, config: VerifyConfig | None = None, sandbox=None, cache=None):
        from tempering.sandbox import BuildCache, Sandbox

        self.config = config or VerifyConfig()
        # kernel jobs see a RAM image with torch (and a CUDA toolkit they bind, copied), whatever others see
        self.sandbox = (sandbox or Sandbox(image=KERNEL_IMAGE)).showing(KERNEL_IMAGE)
        root = self.config.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "tempering", "kernels")
        self._cache_root = root
        self.cache = cache or BuildCache(root=os.path.join(root, "builds"))
        self._baselines: dict[str, dict] = {}
        self._baseline_locks: dict[str, asyncio.Lock] = {}
        self._harness_files_for_job = _harness_files()
        self._kernel_host: str | None = None
        self._dispatch_guard: str | None = None

    # -- public ------------------------------------------------------------------------------------
    async def verify(self, problem: Problem, text: str, mode: str = "profile") -> KernelResult:
        """Compile only (`mode="compile"`), verify (`"verify"`) or verify and time (`"profile"`) one answer.

        Never raises for a bad answer: its status and message say what went wrong.
        """
        cfg = self.config
        sub = parse_submission(text, backend=cfg.backend)
        res = KernelResult(problem=problem.name, backend=sub.backend, status="bad_submission")
        if sub.errors:
            res.message = "; ".join(sub.errors)
            return res
        res.kernel_source = True
        if cfg.static_checks:
            found = static_check(sub.code)
            if sub.backend == "c" and sub.c_source:
                found += [replace(v, message="C_SOURCE " + v.message) for v in c_source_check(sub.c_source)]
            res.violations = [asdict(v) for v in found]
            if res.violations:
                res.status = "static_check"
                res.message = "; ".join(f"line {v['line']}: {v['message']}" for v in res.violations[:5])
                return res
        artifact = await self._compile(sub, res)
        if not res.compiled:
            return res
        if sub.symbol_refusals and cfg.static_checks:  # what the built library calls (elf.py)
            res.status, res.message = "forbidden_op", "; ".join(sub.symbol_refusals[:5])
            res.violations = [{"rule": "symbol", "line": 0, "message": m} for m in sub.symbol_refusals]
            return res
        if mode == "compile":
            res.status, res.message = "compiled", res.compile_log or "compiled"
            return res
        if sub.backend == "cuda" and cfg.device != "cuda":
            res.status = "compiled_only"
            res.message = "compiled with nvcc (no GPU here to verify or time it)"
            return res
        await self._run(problem, sub, artifact, res, mode)
        return res

    async def baseline(self, problem: Problem) -> dict:
        """Eager and torch.compile medians of the reference, timed interleaved in one job of their own.

        Kept on disk (`<cache_dir>/baselines/`), keyed by the problem's source (sizes included), the
        torch version, the machine, the device and the timing settings: measured once per machine,
        not once per run. A failed baseline is not kept."""
        key = self._baseline_key(problem)
        lock = self._baseline_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self._baselines:
                return self._baselines[key]
            path = self.baseline_dir / f"{key}.json"
            try:
                self._baselines[key] = json.loads(path.read_text())
                return self._baselines[key]
            except (OSError, ValueError):
                pass
            out = await self._job(problem, None, None, "baseline", time_compile=True, backend="reference")
            timing = out.get("timing", {})
            base = {
                "problem": problem.name,
                "eager_ms": timing.get("eager", {}).get("net_ms"),
                "compile_ms": timing.get("compile", {}).get("net_ms"),
                "timing_overhead_ms": out.get("timing_overhead_ms"),
                "status": out.get("status"),
                "message": out.get("message", "") or out.get("compile_error", ""),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "load_average": os.getloadavg(),
                "machine": _machine(),
            }
            if base["status"] == "baseline" and base["eager_ms"] and base["compile_ms"]:
                _atomic_write(path, json.dumps(base, indent=1))
            self._baselines[key] = base
            return base

    @property
    def baseline_dir(self) -> Path:
        return Path(self._cache_root) / "baselines"

    def _baseline_key(self, problem: Problem) -> str:
        cfg = self.config
        what = [problem.source, _machine(), cfg.device, cfg.threads, cfg.warmup, cfg.timed_runs, cfg.flush_mb]
        what += [HARNESS_VERSION, self._clock()]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]

    def remember_baseline(self, problem: Problem, eager_ms: float, compile_ms: float) -> None:
        """Use baseline medians measured elsewhere (a previous run's results) instead of a baseline job."""
        self._baselines[self._baseline_key(problem)] = {
            "problem": problem.name,
            "eager_ms": eager_ms,
            "compile_ms": compile_ms,
            "status": "baseline",
            "message": "remembered",
        }

    # -- compile -----------------------------------------------------------------------------------
    async def _compile(self, sub: Submission, res: KernelResult) -> str | None:
        from tempering.sandbox import Limits

        cfg = self.config
        limits = Limits(wall_s=cfg.build_wall_s, cpu_s=cfg.build_wall_s, memory_mb=8192, fsize_mb=512)
        started = time.monotonic()
        try:
            return await self._build(sub, res, limits)
        except RuntimeError as e:
            # a build killed at its wall-clock limit on a loaded machine can take longer to wind down than
            # the sandbox waits for (its cgroup "stays busy"): that is the limit, not the sandbox
            if time.monotonic() - started < cfg.build_wall_s:
                raise
            res.status = "build_timeout"
            res.message = f"the build ran past build_wall_s={cfg.build_wall_s:g} s (then: {e})"
            return None

    async def _build(self, sub: Submission, res: KernelResult, limits) -> str | None:
        cfg = self.config
        if sub.backend == "c":
            assert sub.c_source is not None  # parse_submission refuses a c answer without one
            built = await self.cache.build(
                self.sandbox,
                files={"kernel.c": sub.c_source},
                cmd=["gcc", *cfg.c_flags, "kernel.c", "-o", "kernel.so", "-lm"],
                artifact="kernel.so",
                limits=limits,
            )
        elif sub.backend == "torch_ext" or (sub.backend == "cuda" and cfg.device == "cuda"):
            files: dict[str, str | bytes]
            if sub.ext_args is not None:  # keyed by the extension's sources alone
                script = _TORCH_EXT_ARGS_BUILD.replace("USE_PCH", repr(bool(cfg.use_pch)))
                files = {"ext_args.json": json.dumps(sub.ext_args, sort_keys=True), "build_ext.py": script}
            else:
                script = _TORCH_EXT_BUILD.replace("USE_PCH", repr(bool(cfg.use_pch)))
                files = {"model_new.py": sub.code, "build_ext.py": script}
            built = await self.cache.build(
                self.sandbox,
                files=files,
                cmd=[sys.executable, "build_ext.py"],
                artifact="ext.so",
                limits=limits,
                env={"MAX_JOBS": str(max(1, cfg.threads))},
            )
        elif sub.backend == "cuda":
            built = await self._nvcc(sub, limits)
        else:  # triton compiles when it first runs
            res.compiled = True
            return None
        res.build_cached = built.cached
        res.build_s = 0.0 if built.cached else built.result.wall_s
        log = built.result.stderr + built.result.stdout
        if built.path is None and built.result.status == "timeout":
            res.status = "build_timeout"
            res.message = f"the build ran past build_wall_s={cfg.build_wall_s:g} s ({built.result.message})"
            res.compile_log = trim_compiler_output(log)
            return None
        if built.path is None:
            res.status = "compile_error"
            res.message = trim_compiler_output(log) or built.result.message
            res.compile_log = res.message
            return None
        res.compiled = True
        if sub.backend == "c":  # what the library calls, and the functions load_c() may call
            sub.symbol_refusals, sub.functions = check_c_library(Path(built.path).read_bytes())
        elif sub.backend == "torch_ext" or (sub.backend == "cuda" and cfg.device == "cuda"):
            # what it calls of torch, and the module name it was built under (its PyInit_ function): the
            # candidate's process opens it before the submission runs
            sub.symbol_refusals, exported = check_extension(
                Path(built.path).read_bytes(), cfg.allow_ops, cuda=sub.backend == "cuda"
            )
            sub.functions = [f[len("PyInit_") :] for f in exported if f.startswith("PyInit_")][:1]
        if sub.backend == "cuda" and cfg.device != "cuda":
            res.ptxas = parse_ptxas(log)
            res.compile_log = "\n".join(ln for ln in log.splitlines() if "ptxas" in ln)[:2000]
        return str(built.path)

    async def kernel_host(self) -> str:
        """The kernel host binary (harness/kernel_host.c), built once per verifier and cached: the process a
        `c` kernel runs in, which holds neither Python nor torch."""
        if self._kernel_host is None:
            cmd = ["gcc", "-O2", "-fopenmp", "kernel_host.c", "-o", "kernel_host", "-ldl"]
            self._kernel_host = await self._harness_build("kernel_host.c", cmd, "kernel_host", "the kernel host")
        return self._kernel_host

    async def dispatch_guard(self) -> str:
        """The dispatcher-level ban on torch ops inside an extension call (harness/dispatch_guard.cpp): a
        small library against libtorch, built once per verifier and cached."""
        if self._dispatch_guard is None:
            self._dispatch_guard = await self._harness_build(
                "dispatch_guard.cpp", dispatch_guard_cmd(), "dispatch_guard.so", "the dispatch guard"
            )
        return self._dispatch_guard

    async def _harness_build(self, source: str, cmd: list[str], artifact: str, what: str) -> str:
        """A program of the harness's own (its source in harness/), built in a sandbox job and cached."""
        from tempering.sandbox import Limits

        text = resources.files("tempering.envs.kernels.harness").joinpath(source).read_text()
        built = await self.cache.build(
            self.sandbox,
            files={source: text},
            cmd=cmd,
            artifact=artifact,
            limits=Limits(wall_s=self.config.build_wall_s, cpu_s=self.config.build_wall_s, memory_mb=2048),
        )
        if built.path is None:
            log = trim_compiler_output(built.result.stderr + built.result.stdout) or built.result.message
            raise RuntimeError(f"{what} did not build: {log}")
        return str(built.path)

    async def _nvcc(self, sub: Submission, limits):
        """CUDA without a GPU: the kernel source alone to a cubin, with ptxas register/spill counts.

        Not through BuildCache: its `build` takes no `ro_binds`, and the CUDA toolkit lives outside the
        system paths a job sees. nvcc takes ~0.5 s, so this runs uncached.
        """
        import torch.utils.cpp_extension as ce

        from tempering.sandbox import BuildResult, Job

        nvcc = os.path.realpath(shutil.which("nvcc") or "nvcc")
        cuda_home = os.path.dirname(os.path.dirname(nvcc))
        includes = [f"-I{p}" for p in ce.include_paths()]
        cmd = [
            nvcc,
            "-cubin",
            f"-arch={CUDA_ARCH}",
            "-O3",
            "-Xptxas",
            "-v",
            *includes,
            "kernel.cu",
            "-o",
            "kernel.cubin",
        ]
        assert sub.cuda_source is not None  # what this path compiles
        ran = await self.sandbox.run(
            Job(
                cmd=cmd,
                files={"kernel.cu": sub.cuda_source},
                limits=limits,
                outputs=["kernel.cubin"],
                ro_binds=[cuda_home] if os.path.isdir(cuda_home) else [],
            )
        )
        path = None
        if ran.ok and "kernel.cubin" in ran.outputs:
            path = Path("kernel.cubin")  # a mark that it compiled: only str(path) is read
        return BuildResult(path=path, result=ran, cached=False)

    # -- run ---------------------------------------------------------------------------------------
    async def _run(self, problem: Problem, sub: Submission, artifact: str | None, res: KernelResult, mode: str) -> None:
        cfg = self.config
        every = cfg.compile_baseline == "every"
        out = await self._harness(problem, sub, artifact, mode, time_compile=every, backend=sub.backend)
        res.run_s = out.pop("_wall_s", 0.0)
        res.run_cpu_s = out.pop("_cpu_s", 0.0)
        res.status = out.get("status", "sandbox_error")
        res.message = out.get("message", "")
        res.mismatch = out.get("mismatch")
        res.timing = out.get("timing", {})
        res.timing_overhead_ms = out.get("timing_overhead_ms")
        res.error_rms_rel = out.get("error_rms_rel")
        res.secret_seed = out.get("secret_seed")
        res.ip_samples = out.get("ip_samples")
        res.interpreted = sub.backend == "triton" and cfg.device != "cuda"
        res.correct = res.status == "correct"
        if out.get("traceback"):
            res.message += "\n" + out["traceback"][-1500:]
        if not res.correct or mode != "profile" or res.interpreted:
            res.score = rewards.score(res.correct, None) if res.correct else 0.0
            res.cuda_agent_reward = -1 if not res.correct else 1
            res.log_speedup = rewards.log_speedup_reward(res.correct, None if not res.correct else 1.0)
            return
        res.t_ms = res.timing.get("candidate", {}).get("net_ms")
        res.t_eager_ms = res.timing.get("eager", {}).get("net_ms")
        base_eager = res.t_eager_ms
        if every:
            res.t_compile_ms = res.timing.get("compile", {}).get("net_ms")
        elif cfg.compile_baseline in ("cached", "once"):
            base = await self.baseline(problem)
            base_eager = base.get("eager_ms")
            if cfg.compile_baseline == "cached":
                res.t_compile_ms = base.get("compile_ms")
            elif base.get("eager_ms") and base.get("compile_ms") and res.t_eager_ms:
                res.t_compile_ms = res.t_eager_ms * base["compile_ms"] / base["eager_ms"]
                res.compile_estimated = True
        if res.t_compile_ms and base_eager and res.t_compile_ms > base_eager * (1 + cfg.margin):
            # a torch.compile baseline slower than eager would credit "faster than compile" to anything
            # faster than eager: it is refused, and reward 3 is out of reach for this problem
            res.baseline_note = (
                f"torch.compile baseline refused: {res.t_compile_ms:.3g} ms, slower than eager ({base_eager:.3g} ms) "
                "in the same measurement"
            )
            res.t_compile_ms = None
        if res.t_ms:
            res.speedup_eager = res.t_eager_ms / res.t_ms if res.t_eager_ms else None
            res.speedup_compile = res.t_compile_ms / res.t_ms if res.t_compile_ms else None
        res.cuda_agent_reward = rewards.cuda_agent_reward(True, res.t_ms, res.t_eager_ms, res.t_compile_ms, cfg.margin)
        res.log_speedup = rewards.log_speedup_reward(True, res.speedup_eager)
        res.score = rewards.score(True, res.speedup_eager)
        res.flagged = bool(res.speedup_eager and res.speedup_eager > cfg.flag_speedup)

    def _request(
        self,
        problem: Problem,
        sub: Submission | None,
        artifact: str | None,
        mode: str,
        time_compile: bool,
        backend: str,
    ) -> _Request:
        cfg = self.config
        config = {
            "mode": mode,
            "problem": "model.py",
            "submission": "model_new.py" if sub else None,
            "backend": backend,
            "seeds": cfg.seeds,
            "signed_trials": cfg.signed_trials,
            "large_trials": cfg.large_trials,
            "outlier_trials": cfg.outlier_trials,
            "special_trials": cfg.special_trials,
            "extra_shapes": cfg.extra_shapes,
            "precision_rms": cfg.precision_rms,
            "precision_factor": cfg.precision_factor,
            "min_timed_s": cfg.min_timed_s,
            "max_run_factor": cfg.max_run_factor,
            "clock": self._clock(),
            "functions": list(sub.functions) if sub is not None else [],
            "atol": cfg.atol,
            "rtol": cfg.rtol,
            "warmup": cfg.warmup,
            "timed_runs": cfg.timed_runs,
            "threads": cfg.threads,
            "device": cfg.device,
            "time_compile": time_compile,
            "allow_ops": list(cfg.allow_ops),
            "flush_mb": cfg.flush_mb,
            "ip_sampling": cfg.ip_sampling,
            "library_share": cfg.library_share,
        }
        env = {}
        if sub is not None and backend == "triton" and cfg.device != "cuda":
            env["TRITON_INTERPRET"] = "1"
        return _Request(
            problem=problem,
            config=config,
            nonce=secrets.token_hex(16),
            submission=sub.code if sub else None,
            artifact=artifact if sub is not None else None,
            backend=backend,
            env=env,
            kernel_host=self._kernel_host if sub is not None and backend == "c" else None,
            dispatch_guard=self._dispatch_guard if sub is not None and backend in EXTENSION_BACKENDS else None,
        )

    def _clock(self) -> str:
        cfg = self.config
        if cfg.clock == "auto":
            return "cpu" if cfg.device == "cpu" and cfg.threads == 1 else "wall"
        if cfg.clock not in ("cpu", "wall"):
            raise UserError(f"VerifyConfig.clock must be auto, cpu or wall, got {cfg.clock!r}")
        return cfg.clock

    def _job_env(self) -> dict[str, str]:
        threads = str(self.config.threads)
        return {
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",  # idle OpenMP threads must not spin against the other model
            "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
            "TRITON_CACHE_DIR": "/tmp/triton",
        }

    async def _harness(
        self,
        problem: Problem,
        sub: Submission | None,
        artifact: str | None,
        mode: str,
        time_compile: bool,
        backend: str,
    ) -> dict:
        """Run the harness for one candidate: in a warm worker, or in a sandbox job of its own."""
        from tempering.sandbox import Sandbox

        try:
            if sub is not None and backend == "c":
                await self.kernel_host()
            if sub is not None and backend in EXTENSION_BACKENDS:
                await self.dispatch_guard()
        except RuntimeError as e:
            return {"status": "harness_error", "message": str(e)}
        req = self._request(problem, sub, artifact, mode, time_compile, backend)
        if not self.config.warm_workers or sub is None or not isinstance(self.sandbox, Sandbox):
            return await self._one(req)
        pool = workers_for(self.sandbox, self.config.memory_mb, self._job_env(), self._harness_files_for_job)
        answer = await pool.submit(self._worker_request(req), self.config.wall_s)
        if answer.reply is not None:
            out = _read_result(answer.reply["result"], req.nonce, _candidate_exit(answer.reply))
            if answer.reply.get("dirty"):  # what its worker could not remove after it (that worker ended)
                out["_left_behind"] = answer.reply["dirty"]
            return out
        if answer.worker is None:
            return {"status": "timeout", "message": "the candidate ran past its time limit (its worker was killed)"}
        ran = answer.worker
        out = {"status": _failure_status(ran), "message": _failure_message(ran), "_wall_s": ran.wall_s}
        if ran.status in ("ok", "nonzero_exit", "killed"):
            out["status"] = "crashed"
            out["message"] = (
                "the verification worker died while this candidate ran (the candidate killed it or broke "
                f"its process tree): {_failure_message(ran)}"
            )
        return out

    async def _job(
        self,
        problem: Problem,
        sub: Submission | None,
        artifact: str | None,
        mode: str,
        time_compile: bool,
        backend: str,
    ) -> dict:
        """Run the harness once in a fresh sandboxed process; its result dict (or a failure status)."""
        if sub is not None and backend == "c":
            await self.kernel_host()
        if sub is not None and backend in EXTENSION_BACKENDS:
            await self.dispatch_guard()
        return await self._one(self._request(problem, sub, artifact, mode, time_compile, backend))

    async def _one(self, req: _Request) -> dict:
        from tempering.sandbox import Job, Limits

        cfg = self.config
        config = dict(req.config)
        ro: dict[str, str | bytes] = dict(self._harness_files_for_job)
        ro["model.py"] = req.problem.source
        env = {**self._job_env(), **req.env}
        binds = []
        if req.submission is not None:
            ro["model_new.py"] = req.submission
            if req.artifact and req.backend == "c":
                assert req.kernel_host is not None  # built before any c candidate runs
                config["library"] = req.artifact
                config["host"] = req.kernel_host
                binds += [req.artifact, req.kernel_host]
            elif req.artifact:
                config["extension"] = req.artifact
                binds.append(req.artifact)
                if req.dispatch_guard is not None:
                    config["guard"] = req.dispatch_guard
                    binds.append(req.dispatch_guard)
        job = Job(
            cmd=[sys.executable, "verify.py"],
            files={"config.json": json.dumps(config)},
            readonly_files=ro,
            env=env,
            stdin=req.nonce + "\n",
            ro_binds=binds,
            limits=Limits(
                wall_s=cfg.wall_s,
                cpu_s=cfg.wall_s * max(1, cfg.threads) * 2,
                memory_mb=cfg.memory_mb,
                nproc=256,
                fsize_mb=256,
                nofile=512,
                output_bytes=RESULT_BYTES,
            ),
        )
        ran = await self.sandbox.run(job)
        lines = (ran.stdout or "").strip().splitlines()  # the judge's one line (only the judge holds stdout)
        return _read_result(lines[-1] if lines else None, req.nonce, ran)

    # -- warm workers --------------------------------------------------------------------------------
    def _worker_request(self, req: _Request) -> str:
        """The candidate's line for harness/worker.py: its files (problem, code, kernel), config, nonce."""
        assert req.submission is not None  # warm workers take only answers with a submission
        files = {"model.py": req.problem.source.encode(), "model_new.py": req.submission.encode()}
        env = dict(req.env)
        config = dict(req.config, problem="model.py")
        if req.artifact and req.backend == "c":
            files["kernel.so"] = Path(req.artifact).read_bytes()
            config["library"] = "kernel.so"
            assert req.kernel_host is not None  # built before any c candidate runs
            files["kernel_host"] = Path(req.kernel_host).read_bytes()
            config["host"] = "kernel_host"
        elif req.artifact:
            files["ext.so"] = Path(req.artifact).read_bytes()
            config["extension"] = "ext.so"
            if req.dispatch_guard is not None:
                files["dispatch_guard.so"] = Path(req.dispatch_guard).read_bytes()
                config["guard"] = "dispatch_guard.so"
        cfg = self.config
        return json.dumps(
            {
                "nonce": req.nonce,
                "config": config,
                "files": {name: base64.b64encode(data).decode() for name, data in files.items()},
                "env": env,
                "wall_s": cfg.wall_s,
                "cpu_s": cfg.wall_s * max(1, cfg.threads) * 2,
            }
        )


def dispatch_guard_cmd() -> list[str]:
    """How harness/dispatch_guard.cpp is built (in its folder): a small library against this torch."""
    import torch.utils.cpp_extension as ce

    libdir = ce.library_paths()[0]
    includes = [f"-I{p}" for p in ce.include_paths()]
    out = ["-o", "dispatch_guard.so", f"-L{libdir}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{libdir}"]
    return ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-w", *includes, "dispatch_guard.cpp", *out]


@dataclass
class _Request:
    """One run of the harness: what it checks, against what, with which nonce."""

    problem: Problem
    config: dict
    nonce: str
    submission: str | None
    artifact: str | None
    backend: str
    env: dict
    kernel_host: str | None = None
    """`c`: the kernel host binary the kernel runs in."""
    dispatch_guard: str | None = None
    """`torch_ext`, `cuda`: the library that bans torch ops at the dispatcher inside an extension call."""


def _candidate_exit(entry: dict):
    """A worker's report on one candidate's process, as the sandbox `Result` of a job of its own."""
    from tempering.sandbox import Result

    sig, stderr = entry.get("signal"), entry.get("stderr") or ""
    if entry.get("timeout") or sig == signal.SIGXCPU:
        status, message = "timeout", "the candidate ran past its time limit"
    elif (sig or entry.get("exit_code")) and any(m in stderr for m in ("MemoryError", "Cannot allocate memory")):
        status, message = "memory_exceeded", "an allocation failed under memory_mb"
    elif sig:
        status, message = "killed", f"ended by signal {signal.Signals(sig).name}"
    elif entry.get("exit_code"):
        status, message = "nonzero_exit", f"exit code {entry['exit_code']}"
    else:
        status, message = "ok", ""
    return Result(
        status=status,
        exit_code=entry.get("exit_code"),
        signal=sig,
        stderr=stderr,
        wall_s=float(entry.get("wall_s") or 0.0),
        cpu_s=float(entry.get("cpu_s") or 0.0),
        message=message,
    )


def _read_result(raw: str | None, nonce: str, ran) -> dict:
    """The harness's result, checked for its nonce; or a failure status from how the process ended."""
    if raw is None:
        return {"status": _failure_status(ran), "message": _failure_message(ran), "_wall_s": ran.wall_s}
    try:
        out = json.loads(raw)
    except ValueError:
        return {"status": "tampering", "message": "the result is not the judge's JSON", "_wall_s": ran.wall_s}
    if not isinstance(out, dict) or out.get("nonce") != nonce:
        return {
            "status": "tampering",
            "message": "the result was not written by the judge (nonce mismatch)",
            "_wall_s": ran.wall_s,
        }
    if not ran.ok and out.get("status") == "correct":
        out.update(status=_failure_status(ran), message=_failure_message(ran))
    out["_wall_s"], out["_cpu_s"] = ran.wall_s, ran.cpu_s
    return out


def _failure_status(ran) -> str:
    if ran.status in ("timeout", "memory_exceeded", "sandbox_error", "output_limit"):
        return ran.status
    if ran.status == "ok":
        return "early_exit"  # exited 0 without the harness's result
    return "crashed"


def _failure_message(ran) -> str:
    tail = (ran.stderr or "")[-1200:]
    if ran.status == "ok":
        return "the process exited with code 0 before the harness wrote its result (early exit)"
    if ran.status == "timeout":
        return f"the job ran past its time limit ({ran.message})"
    if ran.status == "memory_exceeded":
        return f"the job ran out of memory ({ran.message})"
    sig = f" (signal {ran.signal})" if ran.signal else ""
    return f"the process died{sig}, exit code {ran.exit_code}: {ran.message}\n{tail}".strip()


@functools.cache
def _machine() -> dict:
    """What a timing depends on besides the problem: CPU (or GPU), cores, torch and Python versions."""
    import torch

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_sync(verifier: KernelVerifier, problem: Problem, text: str, mode: str = "profile") -> KernelResult:
    """`verify` for callers without an event loop."""
    return asyncio.run(verifier.verify(problem, text, mode))
