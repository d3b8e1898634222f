"""The kernel environment end to end, every compile and run in the real sandbox."""

import asyncio
import json
import re
import shutil
from dataclasses import replace

import pytest

from tempering.envs.kernels import KernelVerifier, SketchFamily
from tempering.envs.kernels.hacks import BAD_INPUTS, HACKS, RELU_PROBLEM, credited, run_hack
from tempering.envs.kernels.problems import Problem, builtin_problems, find_problem

pytestmark = pytest.mark.slow


def test_every_reference_submission_passes(kernel_verifier):
    problems = builtin_problems(scale=0.25)  # the size override keeps this quick; the benchmark runs full size

    async def go():
        return await asyncio.gather(*(kernel_verifier.verify(p, p.solution, mode="verify") for p in problems))

    results = asyncio.run(go())
    failed = {r.problem: f"{r.status}: {r.message[:200]}" for r in results if not r.correct}
    assert failed == {}
    assert all(r.compiled and r.backend == "c" for r in results)


def test_every_known_hack_and_bad_input_is_caught(kernel_verifier):
    cases = HACKS + BAD_INPUTS

    async def go():
        return await asyncio.gather(*(run_hack(kernel_verifier, h) for h in cases))  # profiled, if they got so far

    outcomes = asyncio.run(go())
    missed = {h.name: f"{r.status}: {r.message[:200]}" for h, (r, caught) in zip(cases, outcomes) if not caught}
    assert missed == {}
    assert not any(credited(r)[0] or credited(r)[1] for r, _ in outcomes)


def test_every_hack_class_has_a_variant_written_differently():
    """A new case of a class must be caught without a new rule: each class has two or more cases whose code
    differs (not only in whether the static checks are on), so one rule per case would not do."""
    from collections import defaultdict

    by_kind = defaultdict(set)
    for h in HACKS:
        by_kind[h.kind].add(h.submission)
    issue = {
        "answers keyed on the inputs",
        "reading the reference",
        "patching the comparison",
        "leaving the torch-call ban",
        "work in a helper process or thread",
        "import-time code",
    }
    kernelbench = {
        "try/except fallback",
        "inheritance bypass",
        "stream/thread injection",
        "lazy evaluation",
        "timing patching",
        "precision downgrade",
        "input contamination",
    }
    issue_48 = {
        "torch compute from C++",
        "switching torch's checks off from C++",
        "telling trials from timed calls",
        "work outside the timed window",
        "work carried across calls",
        "loose checks on the op's outputs",
        "special methods",
    }
    outside_round_1 = {
        "integer outputs judged loosely",
        "float64 outputs without a precision check",
        "torch computing in __init__",
        "load-time code in the library",
        "text that is not UTF-8",
    }
    outside_round_2 = {"trials whose reference holds inf or NaN", "C read otherwise than the compiler reads it"}
    outside_round_4 = {
        "weights assumed or kept",
        "outputs left to the harness's fill",
        "elements far below the output's RMS",
    }
    assert issue | kernelbench | issue_48 | outside_round_1 | outside_round_2 | outside_round_4 <= set(by_kind)
    assert {kind: len(subs) for kind, subs in by_kind.items() if len(subs) < 2} == {}


def test_secret_seeds_extra_shape_and_overhead_are_reported(kernel_verifier):
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    relu = next(h for h in HACKS if h.name == "keyed_on_known_seeds").submission  # any C source with relu()
    relu = relu.split("class ModelNew")[0] + (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lib = load_c()\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        self.lib.relu(x, y, x.numel())\n        return y\n"
    )

    async def go():
        return await asyncio.gather(*(kernel_verifier.verify(problem, relu) for _ in range(2)))

    first, second = asyncio.run(go())
    assert first.correct and second.correct, (first.message, second.message)
    assert first.secret_seed != second.secret_seed  # drawn per evaluation, by the judge
    assert first.timing_overhead_ms > 0 and first.t_ms > 0 and first.t_eager_ms > 0
    assert {"cpu_median_ms", "wall_median_ms", "net_ms"} <= set(first.timing["candidate"])
    assert first.error_rms_rel is not None and first.error_rms_rel < kernel_verifier.config.precision_rms


def test_a_compile_baseline_slower_than_eager_is_refused(kernel_verifier):
    v = KernelVerifier(
        replace(kernel_verifier.config, compile_baseline="cached"),
        sandbox=kernel_verifier.sandbox,
        cache=kernel_verifier.cache,
    )
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    v.remember_baseline(problem, eager_ms=1.0, compile_ms=3.0)  # torch.compile 3x slower than eager
    sub = next(h for h in HACKS if h.name == "identity_passes_rand_inputs").submission.replace(
        "self.lib.copy(x, y, x.numel())", "self.lib.relu(x, y, x.numel())"
    )
    res = asyncio.run(v.verify(problem, sub))
    assert res.correct and res.t_compile_ms is None and "slower than eager" in res.baseline_note
    assert res.cuda_agent_reward in (1, 2)  # never 3 against a refused baseline


def test_pure_torch_submission_is_told_where_the_kernel_goes(kernel_verifier):
    from tempering.envs.kernels.evaluate import format_table, summarize

    pure = next(h for h in BAD_INPUTS if h.name == "pure_torch")
    res = asyncio.run(kernel_verifier.verify(Problem(name="rand_relu", source=RELU_PROBLEM), pure.submission))
    assert res.status == "bad_submission" and not res.kernel_source
    assert "torch operators are not allowed in the kernel" in res.message and "C_SOURCE" in res.message
    table = format_table(summarize([res]))
    assert "no submission had a kernel source" in table and "0.0%" not in table.splitlines()[1]


def test_profile_gives_timings_speedups_and_rewards(kernel_verifier):
    p = find_problem(builtin_problems(), "relu")
    res = asyncio.run(kernel_verifier.verify(p, p.solution))
    assert res.correct and res.t_ms > 0 and res.t_eager_ms > 0
    assert res.speedup_eager == pytest.approx(res.t_eager_ms / res.t_ms)
    cfg = kernel_verifier.config
    assert cfg.timed_runs <= res.timing["candidate"]["runs"] <= cfg.timed_runs * cfg.max_run_factor  # more if short
    assert res.cuda_agent_reward in (1, 2) and res.t_compile_ms is None  # compile baseline off here
    assert 0.2 <= res.score <= 1.0


def test_compile_baseline_once_scales_eager_time_by_the_per_problem_ratio(kernel_verifier):
    # The baseline job itself (torch.compile, ~20-70 s cold on a CPU) runs in the benchmark, not here.
    v = KernelVerifier(
        replace(kernel_verifier.config, compile_baseline="once"),
        sandbox=kernel_verifier.sandbox,
        cache=kernel_verifier.cache,
    )
    sub = next(h for h in HACKS if h.name == "identity_passes_rand_inputs").submission.replace(
        "self.lib.copy(x, y, x.numel())", "self.lib.relu(x, y, x.numel())"
    )
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    v.remember_baseline(problem, eager_ms=2.0, compile_ms=0.5)
    res = asyncio.run(v.verify(problem, sub))
    assert res.correct and res.compile_estimated
    assert res.t_compile_ms == pytest.approx(res.t_eager_ms * 0.25)
    assert res.speedup_compile == pytest.approx(res.t_compile_ms / res.t_ms)
    measured = KernelVerifier(
        replace(kernel_verifier.config, compile_baseline="cached"),
        sandbox=kernel_verifier.sandbox,
        cache=kernel_verifier.cache,
    )
    measured.remember_baseline(problem, eager_ms=2.0, compile_ms=0.5)
    res = asyncio.run(measured.verify(problem, sub))
    assert res.correct and not res.compile_estimated  # the cached baseline's measured median, as is
    assert res.t_compile_ms == 0.5 and res.speedup_compile == pytest.approx(0.5 / res.t_ms)


def test_sketch_env_scores_correct_sketches_and_rejects_bad_ones(kernel_verifier):
    fam = SketchFamily(verify=replace(kernel_verifier.config, threads=2))
    fam._verifier = KernelVerifier(fam.verify, sandbox=kernel_verifier.sandbox, cache=kernel_verifier.cache)
    task = next(t for t in fam.tasks("train", 40) + fam.tasks("heldout", 40) if t.meta["problem"].name == "26_matmul")
    assert task.prompt.startswith("sketch matmul matmul loops=")

    async def go():
        env = fam.make_env(task)
        return [await env.step(a) for a in ("order=jki", "order=ikj vec=1", "nonsense")]

    # which sketch is faster, and whether a data race (order=kij threads=2) shows, depend on the machine's
    # load: timings and races are measured in benchmarks/kernel_eval_throughput.py, not asserted here
    slow, fast, bad = asyncio.run(go())
    assert slow.status == fast.status == "correct"
    for r in (slow, fast):
        assert r.info["t_ms"] > 0 and 0.2 <= r.score <= 1.0  # correct: at least the correctness floor
        assert set(r.info["rewards"]) == {"cuda_agent", "log_speedup", "correct", "score"}
    assert bad.status == "parse_error" and "bad token" in bad.feedback
    tail = next(
        t for t in fam.tasks("train", 40) + fam.tasks("heldout", 40) if t.meta["problem"].name == "37_scale_tanh_clamp"
    )
    miss = asyncio.run(fam.make_env(tail).step("unroll=4 tail=0"))
    # 1023 * 4093 is odd: the tail is never written, and an output's memory starts wrong at every element
    assert miss.status == "incorrect" and "3/4187139 elements outside tolerance" in miss.feedback


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_torch_ext_load_inline_submission(kernel_verifier):
    sub = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = """
#include <torch/extension.h>
torch::Tensor relu_out(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); i++) py[i] = px[i] > 0 ? px[i] : 0;
    return y;
}
"""
ext = load_inline(name="relu_ext", cpp_sources=cpp, functions=["relu_out"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_out(x)
'''
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    first = asyncio.run(kernel_verifier.verify(problem, sub, mode="verify"))
    assert first.backend == "torch_ext" and first.correct, first.message
    again = asyncio.run(kernel_verifier.verify(problem, sub, mode="verify"))
    assert again.correct and again.build_cached and again.build_s == 0.0
    cheat = sub.replace("return ext.relu_out(x)", "ext.relu_out(x)\n        return torch.relu(x)")
    caught = asyncio.run(kernel_verifier.verify(problem, cheat, mode="verify"))
    assert caught.status == "forbidden_op" and caught.build_cached  # same extension sources: no rebuild


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_without_gpu_is_compile_only_with_register_counts(kernel_verifier):
    sub = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
"""
ext = load_inline(name="relu_cuda", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=CUDA,
                  functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''
    res = asyncio.run(kernel_verifier.verify(Problem(name="rand_relu", source=RELU_PROBLEM), sub))
    assert res.backend == "cuda" and res.status == "compiled_only" and not res.correct
    (kernel,) = res.ptxas.values()
    assert kernel["registers"] > 0 and kernel["spill_stores"] == 0
    broken = asyncio.run(
        kernel_verifier.verify(
            Problem(name="rand_relu", source=RELU_PROBLEM), sub.replace("y[i] =", "y[i] = undefined_name +")
        )
    )
    assert broken.status == "compile_error" and "undefined_name" in broken.message


def test_triton_interpreter_checks_correctness_only(kernel_verifier):
    pytest.importorskip("triton")
    sub = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
"""
    res = asyncio.run(kernel_verifier.verify(Problem(name="rand_relu", source=RELU_PROBLEM), sub))
    assert res.backend == "triton" and res.correct and res.interpreted, res.message
    assert res.reward("cuda_agent") == 1.0  # correctness only: no speed reward from interpreted timings


def test_cli_eval_table_jsonl_and_bad_input(tmp_path, capsys, kernel_verifier):
    from tempering.cli import main

    problems, subs = tmp_path / "problems", tmp_path / "subs"
    problems.mkdir()
    subs.mkdir()
    for name in ("01_relu", "26_matmul"):
        p = find_problem(builtin_problems(scale=0.25), name)
        (problems / f"{name}.py").write_text(p.source)
    (subs / "01_relu.py").write_text(find_problem(builtin_problems(scale=0.25), "relu").solution)
    rows = tmp_path / "rows.jsonl"
    code = main(
        [
            "kernels",
            "eval",
            "--problems",
            str(problems),
            "--submissions",
            str(subs),
            "--jsonl",
            str(rows),
            "compile_baseline=off",
            "timed_runs=3",
            "seeds=1",
            "--no-progress",
            f"cache_dir={kernel_verifier.config.cache_dir}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "correctness rate     50.0%" in out and "fast_1" in out
    # not a terminal: one plain line per problem as it finishes (the missing one at once), before the table
    progress = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert progress[0] == "[1/2] 26_matmul: missing (no submission file) (0.0 s)"
    assert re.fullmatch(r"\[2/2\] 01_relu: correct, \d+\.\d\dx eager \(\d+\.\d s\)", progress[1]), progress
    assert out.index(progress[1]) < out.index("correctness rate")
    lines = [json.loads(x) for x in rows.read_text().splitlines()]
    assert {r["problem"]: r["status"] for r in lines} == {"01_relu": "correct", "26_matmul": "missing"}
    assert main(["kernels", "eval", "--problems", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_agent_mode_tools_and_submit(kernel_verifier):
    from tempering.envs.kernels.agent import KernelAgentFamily

    fam = KernelAgentFamily(verify=kernel_verifier.config)
    fam._verifier = kernel_verifier
    task = next(t for t in fam.tasks("train", 40) + fam.tasks("heldout", 40) if t.meta["problem"].name == "01_relu")
    assert "## Rules" in task.prompt and "class Model" in task.prompt
    env = fam.make_env(task)
    solution = find_problem(builtin_problems(), "relu").solution

    async def go():
        out = [
            await env.step('{"tool": "verify", "args": {}}'),
            await env.step('{"tool": "write_file", "args": {"path": "model.py", "content": "x"}}'),
            await env.step("not json"),
            await env.step(json.dumps({"tool": "write_file", "args": {"path": "model_new.py", "content": solution}})),
            await env.step('{"tool": "compile", "args": {}}'),
            await env.step('{"tool": "submit", "args": {}}'),
        ]
        return out

    empty, readonly, garbage, wrote, compiled, submitted = asyncio.run(go())
    assert "empty" in empty.feedback and not empty.done
    assert "read-only" in readonly.feedback
    assert garbage.status == "tool_error" and "JSON" in garbage.feedback
    assert wrote.status == "tool:write_file" and compiled.status == "compiled"
    assert submitted.done and submitted.status == "correct" and submitted.info["tool"] == "submit"
    assert submitted.score == submitted.info["rewards"]["score"] > 0


TRANSPOSE_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(48, 40)]


def get_init_inputs():
    return []
"""

CUDA_TRANSPOSE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = """
__global__ void transpose_kernel(const float* x, float* y, int rows, int cols) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows && j < cols) y[j * rows + i] = x[i * cols + j];
}
"""
ext = load_inline(name="transpose_cuda", cpp_sources="torch::Tensor transpose(torch::Tensor x);",
                  cuda_sources=CUDA, functions=["transpose"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.transpose(x)
'''

# What the build job's extension looks like to the harness: a module whose function does its work
# out of sight of the torch modes, as compiled code does.
FAKE_EXTENSION = """import torch
from torch.utils._python_dispatch import _disable_current_modes


def transpose(x):
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        return x.t().contiguous()
"""


def test_cuda_extension_is_swapped_and_counted_so_a_decoy_is_caught(kernel_verifier, tmp_path):
    """The GPU path's harness logic on a CPU: a `cuda` submission's load_inline returns the prebuilt
    extension and its calls are counted; a forward that computes the answer with views alone and
    never launches the kernel is `kernel_not_called`."""
    from tempering.envs.kernels.submission import parse_submission

    ext = tmp_path / "transpose_ext.py"
    ext.write_text(FAKE_EXTENSION)
    ext.chmod(0o644)
    problem = Problem(name="transpose", source=TRANSPOSE_PROBLEM)

    def job(text):
        sub = parse_submission(text)
        assert sub.backend == "cuda" and not sub.errors
        return asyncio.run(kernel_verifier._job(problem, sub, str(ext), "verify", time_compile=False, backend="cuda"))

    honest = job(CUDA_TRANSPOSE)
    assert honest["status"] == "correct" and honest["kernel_calls"] > 0, honest.get("message")
    decoy = job(CUDA_TRANSPOSE.replace("return ext.transpose(x)", "return x.t().contiguous()"))
    assert decoy["status"] == "kernel_not_called", decoy.get("message")


SCALE_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.scale


rows = 16
dim = 64


def get_inputs():
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return [dim]
"""

SCALE_RENAMED = '''import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
void scale(const float* x, const float* s, float* y, long rows, long dim) {
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < dim; j++) y[i * dim + j] = x[i * dim + j] * s[j];
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(dim))
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.scale(x, self.gain, y, x.shape[0], x.shape[1])
        return y
'''


def test_parameters_under_other_names_rely_on_the_seeded_initialisation(kernel_verifier):
    problem = Problem(name="scale", source=SCALE_PROBLEM)
    renamed = asyncio.run(kernel_verifier.verify(problem, SCALE_RENAMED, mode="verify"))
    assert renamed.correct, renamed.message  # same seed, same creation: the same values, as in KernelBench
    other_init = SCALE_RENAMED.replace("nn.Parameter(torch.randn(dim))", "nn.Parameter(torch.rand(dim))")
    wrong = asyncio.run(kernel_verifier.verify(problem, other_init, mode="verify"))
    assert wrong.status == "incorrect"
    assert "ModelNew's gain matched no tensor of Model by name and shape (Model has scale)" in wrong.message
    same_name = SCALE_RENAMED.replace("gain", "scale").replace("torch.randn(dim)", "torch.rand(dim)")
    loaded = asyncio.run(kernel_verifier.verify(problem, same_name, mode="verify"))
    assert loaded.correct, loaded.message  # a shared name takes the reference's values, whatever the init


def test_cli_hacks_prints_each_case_and_the_counts(tmp_path, capsys, kernel_verifier):
    from tempering.cli import main

    out_json = tmp_path / "hacks.json"
    argv = ["kernels", "hacks", "--only", "keyed,pure_torch", "seeds=1", "timed_runs=3"]
    code = main(argv + [f"cache_dir={kernel_verifier.config.cache_dir}", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0 and "keyed_on_known_seeds" in out and "hacks_credited_correct 0" in out
    data = json.loads(out_json.read_text())
    assert data["summary"]["hacks_total"] == 2 and data["summary"]["bad_inputs_handled"] == 1
    assert main(["kernels", "hacks", "--only", "no_such_hack"]) == 2


LINSUM_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x):
        return torch.sum(self.fc(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [64, 32]
"""

LINSUM_CACHED = '''import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
static float cs[64], bs;
static int ready;
void linsum(const float* x, const float* w, const float* b, float* y, long rows, long k, long n) {
    if (!ready) {  /* W's column sums, kept in the kernel host from the first (untimed) call */
        for (long j = 0; j < k; j++) { cs[j] = 0.f; for (long i = 0; i < n; i++) cs[j] += w[i * k + j]; }
        bs = 0.f; for (long i = 0; i < n; i++) bs += b[i];
        ready = FIRST;
    }
    for (long r = 0; r < rows; r++) { float s = bs; for (long j = 0; j < k; j++) s += x[r * k + j] * cs[j]; y[r] = s; }
}
"""


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)  # another name: matched by its seeded values
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty(x.shape[0], 1)
        self.lib.linsum(x, self.lin.weight, self.lin.bias, y, x.shape[0], x.shape[1], self.lin.weight.shape[0])
        return y
'''


def test_weights_are_fresh_in_every_timed_round(kernel_verifier):
    """A kernel that keeps W's column sums from its first call is wrong once the weights change; the same
    kernel recomputing them in every call (the twin) is right, under another parameter name too."""
    problem = Problem(name="linsum", source=LINSUM_PROBLEM)
    cached = asyncio.run(kernel_verifier.verify(problem, LINSUM_CACHED.replace("FIRST", "1")))
    assert cached.status == "incorrect" and "timed call" in cached.message, cached.message
    twin = asyncio.run(kernel_verifier.verify(problem, LINSUM_CACHED.replace("FIRST", "0")))
    assert twin.status == "correct", twin.message
