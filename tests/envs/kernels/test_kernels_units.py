"""Pure parts of the kernel environment: loader, parsing, static checks, rewards, sketch, metrics."""

import math
import shutil
import subprocess

import pytest

from tempering.envs.kernels import rewards
from tempering.envs.kernels.evaluate import geomean, summarize
from tempering.envs.kernels.feedback import feedback
from tempering.envs.kernels.problems import (
    builtin_problems,
    load_problems,
    module_constants,
    problem_errors,
    scale_sizes,
)
from tempering.envs.kernels.sketch import SPECS, canonical, lower, parse_sketch, spec_for
from tempering.envs.kernels.submission import parse_submission, static_check
from tempering.envs.kernels.synth import ast_similarity, compose
from tempering.envs.kernels.verifier import KernelResult, parse_ptxas, trim_compiler_output
from tempering.errors import UserError


def test_builtin_suite_has_30_problems_each_with_a_clean_reference():
    problems = builtin_problems()
    assert len(problems) >= 30
    assert len({p.name for p in problems}) == len(problems)
    for p in problems:
        assert problem_errors(p.source) == [], p.name
        sub = parse_submission(p.solution)
        assert sub.errors == [] and sub.backend == "c" and "void" in sub.c_source, p.name
        assert static_check(sub.code) == [], p.name


def test_problem_file_without_model_is_reported(tmp_path):
    (tmp_path / "good.py").write_text(builtin_problems()[0].source)
    (tmp_path / "bad.py").write_text("def get_inputs():\n    return []\n")
    problems, skipped = load_problems(tmp_path)
    assert [p.name for p in problems] == ["good"]
    assert "defines no Model" in skipped[str(tmp_path / "bad.py")]
    with pytest.raises(UserError, match="get_init_inputs"):
        load_problems(tmp_path, strict=True)
    with pytest.raises(UserError, match="does not exist"):
        load_problems(tmp_path / "missing")


def test_scale_sizes_changes_only_module_level_int_constants():
    src = "batch_size = 16\ndim = 16384\neps = 1e-5\nflag = 1\n\ndef get_inputs():\n    n = 100\n    return [n]\n"
    out = scale_sizes(src, 0.25)
    assert "batch_size = 4\ndim = 4096\neps = 1e-5\nflag = 1\n" in out
    assert "n = 100" in out
    assert module_constants(out) == "batch_size = 4\ndim = 4096\neps = 1e-05\nflag = 1"


def test_backend_detection_and_fenced_answers():
    assert parse_submission('C_SOURCE = "void k(){}"\nclass ModelNew: pass\n').backend == "c"
    ext = "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='m', cpp_sources='x')\nclass ModelNew: pass\n"
    assert parse_submission(ext).backend == "torch_ext"
    cu = "src = '__global__ void k() {}'\n" + ext.replace("cpp_sources='x'", "cpp_sources='x', cuda_sources=src")
    sub = parse_submission(cu)
    assert sub.backend == "cuda" and sub.cuda_source == "__global__ void k() {}"
    assert parse_submission("import triton\nclass ModelNew: pass\n").backend == "triton"
    answer = "Here:\n```c\nvoid k(float* y) {}\n```\n```python\nclass ModelNew:\n    pass\n```\n"
    sub = parse_submission(answer)
    assert sub.backend == "c" and sub.c_source.strip() == "void k(float* y) {}" and "C_SOURCE" in sub.code
    assert "no class ModelNew" in parse_submission("x = 1\n").errors[0]
    assert "C_SOURCE" in parse_submission("class ModelNew: pass\n").errors[0]
    assert "syntax error" in parse_submission("class ModelNew(:\n").errors[0]


@pytest.mark.parametrize(
    "code, rule",
    [
        ("import os\n", "import"),
        ("import numpy as np\n", "import"),
        ("try:\n    pass\nexcept Exception:\n    pass\n", "try_except"),
        ("x = eval('1')\n", "forbidden_name"),
        ("import torch\nclass T(torch.Tensor):\n    pass\n", "base_class"),
        ("import torch\ntorch.relu = abs\n", "monkeypatch"),
        ("import torch\nt = torch.cuda.Event()\n", "forbidden_attr"),
        ("import torch\nx = torch._C\n", "private_attr"),
        ("def f():\n    global g\n", "global_state"),
        ("def f():\n    yield 1\n", "lazy"),
    ],
)
def test_static_check_rules(code, rule):
    assert rule in [v.rule for v in static_check(code)]


def test_cuda_agent_reward_by_hand():
    # b(t, t0) = (t0 - t) / t0 > 5%
    assert rewards.cuda_agent_reward(False, 1.0, 2.0, 2.0) == -1
    assert rewards.cuda_agent_reward(True, 1.0, 2.0, 2.0) == 3
    assert rewards.cuda_agent_reward(True, 1.0, 2.0, 1.0) == 2
    assert rewards.cuda_agent_reward(True, 0.96, 1.0, 0.5) == 1  # 4% faster: not > 5%
    assert rewards.cuda_agent_reward(True, 0.94, 1.0, 0.5) == 2  # 6% faster
    assert rewards.cuda_agent_reward(True, 1.0, 2.0, None) == 2  # no compile baseline: not faster than it


def test_log_speedup_and_score_by_hand():
    assert rewards.log_speedup_reward(True, 4.0) == pytest.approx(2.0)
    assert rewards.log_speedup_reward(False, 4.0) == -1.0
    assert rewards.score(False, 10.0) == 0.0
    assert rewards.score(True, 0.25) == pytest.approx(0.2)
    assert rewards.score(True, 1.0) == pytest.approx(0.6)
    assert rewards.score(True, 4.0) == pytest.approx(1.0)
    assert rewards.score(True, 2.0) == pytest.approx(0.2 + 0.8 * 0.75)
    assert rewards.reward("correct", True, 1.0, 2.0, 2.0) == 1.0
    assert rewards.reward("log_speedup", True, 1.0, 2.0, 2.0) == pytest.approx(1.0)


def test_summary_metrics_by_hand():
    def r(status, sp_e=None, sp_c=None):
        return KernelResult(
            problem="p",
            backend="c",
            status=status,
            compiled=status != "compile_error",
            kernel_source=True,
            correct=status == "correct",
            speedup_eager=sp_e,
            speedup_compile=sp_c,
        )

    s = summarize([r("correct", 2.0, 0.5), r("correct", 0.5, 0.25), r("incorrect"), r("compile_error")])
    assert s["compile_rate"] == 0.75 and s["correct_rate"] == 0.5
    assert s["fast_0_eager"] == 0.5 and s["fast_1_eager"] == 0.25 and s["fast_1.2_eager"] == 0.25
    assert s["fast_1_compile"] == 0.0
    assert s["geomean_eager_correct"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert s["geomean_eager_all"] == pytest.approx(1.0)  # (2 * 0.5 * 1 * 1) ** 0.25
    assert s["geomean_compile_correct"] == pytest.approx(math.sqrt(0.125))
    assert geomean([]) is None


def test_sketch_parse_errors_and_canonical_form():
    s = parse_sketch("unroll=4 order=ikj", "matmul")
    assert canonical(s) == "order=ikj tile=0 unroll=4 tail=1 vec=0 threads=1 fuse=1"
    for bad, msg in [
        ("", "empty"),
        ("order=ijj", "loop order"),
        ("tile=7", "not allowed"),
        ("speed=9", "bad token"),
        ("vec=1 vec=0", "twice"),
        ("order=rc", "loop order"),
    ]:
        with pytest.raises(UserError, match=msg):
            parse_sketch(bad, "matmul")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_every_sketch_kind_lowers_to_c_that_compiles(tmp_path):
    cases = [
        ("matmul", "order=kij tile=32 unroll=4 tail=0 vec=1 threads=2 fuse=0"),
        ("linear_gelu", "order=ikj unroll=8 vec=1 fuse=1"),
        ("linear_relu", "order=ijk vec=1"),
        ("row_max", "order=cr tile=16 unroll=2 threads=2"),
        ("relu_row_sum", "order=rc vec=1 fuse=0"),
        ("scale_tanh_clamp", "tile=8 unroll=4 fuse=0 threads=2"),
        ("swiglu", "vec=1 unroll=2 tail=0"),
    ]
    for name, text in cases:
        spec = SPECS[name]
        src = lower(spec, parse_sketch(text, spec.kind))
        assert src == lower(spec, parse_sketch(text, spec.kind))  # deterministic: the build cache hits
        (tmp_path / "k.c").write_text(src)
        out = subprocess.run(
            ["gcc", "-O1", "-fopenmp", "-fPIC", "-shared", "-std=c11", "k.c", "-o", "k.so", "-lm"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, (name, text, out.stderr)
    assert spec_for("26_matmul") is SPECS["matmul"] and spec_for("20_softmax") is None


def test_compiler_output_trimmed_to_first_errors():
    log = "\n".join(["k.c: In function 'f':"] + [f"k.c:{i}:1: error: bad {i}" for i in range(10)])
    out = trim_compiler_output(log, max_errors=3)
    assert "bad 0" in out and "bad 2" in out and "bad 3" not in out and "7 more errors" in out


def test_ptxas_output_parsed():
    log = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 12 registers, used 0 barriers\n"
    )
    assert parse_ptxas(log) == {"_Z1kPf": {"spill_stores": 4, "spill_loads": 4, "registers": 12}}


def test_feedback_texts():
    ok = KernelResult(
        problem="p",
        backend="c",
        status="correct",
        compiled=True,
        correct=True,
        t_ms=1.0,
        t_eager_ms=2.0,
        speedup_eager=2.0,
        cuda_agent_reward=2,
    )
    text = feedback(ok)
    assert "Correct" in text and "2.00x" in text and "Reward (CUDA Agent): 2" in text
    bad = KernelResult(problem="p", backend="c", status="compile_error", message="k.c:1: error: x")
    assert feedback(bad).startswith("Compile error") and "k.c:1: error: x" in feedback(bad)


def test_ast_similarity_and_compositions():
    a = builtin_problems()[0].source
    assert ast_similarity(a, a) == 1.0
    assert ast_similarity(a, a.replace("4093", "77")) == 1.0  # numbers do not count
    assert ast_similarity(a, builtin_problems()[25].source) < 0.9
    import random

    ops, src = compose(random.Random(0), 5)
    assert 1 <= len(ops) <= 5 and problem_errors(src) == []


def test_sketch_tasks_carry_a_valid_warm_start_sketch_and_splits_are_disjoint():
    from tempering.envs.kernels import SketchFamily

    fam = SketchFamily()
    train, held = fam.tasks("train", 60, seed=3), fam.tasks("heldout", 20, seed=3)
    assert {t.meta["problem"].name for t in train}.isdisjoint({t.meta["problem"].name for t in held})
    for t in train + held:
        spec = spec_for(t.meta["problem"].name)
        settings = parse_sketch(t.answer, spec.kind)  # parses: the grammar a warm start teaches
        assert settings["tail"] == 1 and settings["threads"] == 1
        assert t.prompt.startswith("sketch ") and len(t.prompt) <= 80
    assert [t.answer for t in fam.tasks("train", 10, seed=3)] == [t.answer for t in train[:10]]


@pytest.mark.parametrize(
    "code, rule",
    [
        ("from torch.utils.cpp_extension import os, sys\n", "import"),  # X.Y is checked, not only X
        ("import torch.utils.cpp_extension as ce\nx = ce.os.getcwd()\n", "module_attr"),
        ("import torch\nx = torch.multiprocessing\n", "module_attr"),
        ("from torch import multiprocessing\n", "import"),
        ("from torch import _C\n", "import"),
        ("import torch\n_T = torch.Tensor\n_T.add = print\n", "monkeypatch"),  # through an alias
        ("import torch.nn as nn\nnn.Module.forward = print\n", "monkeypatch"),
        ("import torch\nf = torch.compile\n", "module_attr"),
        ("from ckernel import CALLS\n", "import"),
        ("x = open('model.py')\n", "forbidden_name"),
        ("x = type('T', (), {})\n", "forbidden_name"),
        ("def f(g):\n    return g.__globals__\n", "private_attr"),
        ("class S:\n    def __exit__(self, *a):\n        return True\n", "special_method"),
        ("import torch.nn as nn\nclass ModelNew(nn.ReLU):\n    pass\n", "base_class"),
        ("import torch\nx = torch.cuda.Stream()\n", "module_attr"),
    ],
)
def test_static_allow_list(code, rule):
    assert rule in [v.rule for v in static_check(code)]


def test_static_allow_list_lets_a_plain_kernel_through():
    code = (
        "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom ckernel import load_c\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.w = nn.Parameter(torch.randn(dim))\n        self._scale = math.sqrt(dim)\n        self.lib = load_c()\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        self.lib.k(x.contiguous(), self.w, y, x.numel())\n"
        "        return y.view(x.shape)\n"
    )
    assert static_check(code) == []


def test_c_source_rules():
    from tempering.envs.kernels.submission import c_source_check

    found = c_source_check('#include <unistd.h>\n#include <math.h>\nvoid f(void) { __asm__("syscall"); }\n')
    assert [v.rule for v in found] == ["c_include", "c_source", "c_source"]
    assert c_source_check("#include <math.h>\n#include <omp.h>\nvoid f(float* y) { y[0] = expf(1.0f); }\n") == []


def test_c_source_is_checked_as_the_compiler_reads_it():
    """Digraphs, trigraphs, spliced lines and comments inside a directive or a keyword are what the
    compiler reads; pragmas and attributes that re-enable fast-math are refused; honest C passes."""
    from tempering.envs.kernels.hacks import _C_READ_AS_COMPILED
    from tempering.envs.kernels.submission import c_logical_lines, c_source_check

    for name, c in _C_READ_AS_COMPILED.items():
        assert c_source_check(c), name
    honest = (
        "#include <math.h>\n#pragma omp parallel for\n#pragma GCC unroll 4\n// asm, ## and %:include in a comment\n"
        'static const char* fmt = "%:d <% %>";\nvoid f(float* y) { y[0] = expf(1.0f); /* __asm__ */ }\n'
    )
    assert c_source_check(honest) == []
    assert c_logical_lines("a \\\nb\nc ??/\nd\n%:/* x\ny */include 'q'\ne<:0:>") == [
        (1, "a b"),
        (3, "c d"),
        (5, "# include 'q'"),
        (7, "e[0]"),
    ]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_c_spellings_refused_are_the_compilers_own(tmp_path):
    """gcc itself (with the judge's -std) reads each spelling as the directive or token the check sees."""
    import subprocess

    from tempering.envs.kernels.submission import c_logical_lines

    for text in ("%:define X 1\nX\n", "??=define X 1\nX\n", "#def\\\nine X 1\nX\n", "#/*\n*/define X 1\nX\n"):
        f = tmp_path / "t.c"
        f.write_text(text)
        out = subprocess.run(["gcc", "-std=c11", "-E", "-P", str(f)], capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["1"], text
        assert c_logical_lines(text)[0][1].replace(" ", "") == "#defineX1", text


def test_a_reference_with_inf_or_nan_is_judged_on_every_element():
    """Non-finite reference values must be matched in place and sign; the finite ones are compared as usual."""
    import sys
    from pathlib import Path

    import torch

    from tempering.envs.kernels import harness

    sys.path.insert(0, str(Path(harness.__file__).parent))
    try:
        from verify import _split_finite
    finally:
        sys.path.remove(str(Path(harness.__file__).parent))

    inf, nan = float("inf"), float("nan")
    want = torch.tensor([1.0, inf, -inf, nan, 5e8])
    got, w, keep = _split_finite(torch.tensor([1.0, inf, -inf, nan, 0.0]), want)
    assert keep.tolist() == [True, False, False, False, True] and w.tolist() == [1.0, 0, 0, 0, 5e8]
    assert got.tolist() == [1.0, 0, 0, 0, 0.0]  # the wrong finite element is left for the comparison
    for wrong in ([1.0, -inf, -inf, nan, 5e8], [1.0, inf, -inf, 0.0, 5e8], [1.0, nan, -inf, nan, 5e8]):
        assert _split_finite(torch.tensor(wrong), want)[0] is None, wrong
    finite = torch.tensor([1.0, 2.0])
    assert _split_finite(finite, finite)[2] is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_compiled_kernel_symbols_are_checked(tmp_path):
    from tempering.envs.kernels.elf import check_c_library
    from tempering.envs.kernels.verifier import C_FLAGS

    def build(src):
        (tmp_path / "k.c").write_text(src)
        subprocess.run(["gcc", *C_FLAGS, "k.c", "-o", "k.so", "-lm"], cwd=tmp_path, check=True)
        return check_c_library((tmp_path / "k.so").read_bytes())

    refusals, functions = build(
        "#include <math.h>\n#include <string.h>\nvoid k(const float* x, float* y, long n) {\n"
        "    #pragma omp parallel for\n    for (long i = 0; i < n; i++) y[i] = expf(x[i]);\n"
        "    memcpy(y, y, 0);\n}\nstatic void helper(void) {}\n"
    )
    assert refusals == [] and functions == ["k"]
    refusals, _ = build(
        "extern int fork(void);\nextern int open(const char*, int);\nvoid k(void) { fork(); open(0, 0); }\n"
    )
    assert any("fork()" in r for r in refusals) and any("open()" in r for r in refusals)
    # code the loader runs by itself, before any guard: a pointer in .init_array, an ifunc resolver
    relu = "void relu(const float* x, float* y, long n) { for (long i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; }\n"
    refusals, _ = build(
        "static int on;\nstatic void up(void) { on = 1; }\n"
        'static void (*const p)(void) __attribute__((section(".init_array"), used)) = up;\n' + relu
    )
    assert any("DT_INIT_ARRAY" in r for r in refusals)
    refusals, _ = build(
        "typedef void f(void);\nstatic void impl(void) {}\nstatic f* pick(void) { return impl; }\n"
        'void k(void) __attribute__((ifunc("pick")));\n'
    )
    assert any("ifunc" in r for r in refusals)
    (tmp_path / "k.c").write_text(relu)  # gcc's own start files add an _init and a frame_dummy in .init_array
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "k.c", "-o", "k.so"], cwd=tmp_path, check=True)
    assert any("DT_INIT" in r for r in check_c_library((tmp_path / "k.so").read_bytes())[0])


def test_text_that_is_not_utf8_is_a_bad_submission():
    from tempering.envs.kernels.submission import parse_submission

    ok = 'import torch\nC_SOURCE = "void f(void) {}"\nclass ModelNew:\n    pass\n'
    assert parse_submission(ok).errors == []
    lone = parse_submission("# \ud800\n" + ok)
    assert lone.errors and "lone surrogate" in lone.errors[0] and "line 1" in lone.errors[0]
    raw = b"import torch\n# caf\xe9\n" + ok.encode()
    byte = parse_submission(raw.decode("utf-8", "surrogateescape"))  # as `tempering kernels eval` reads a file
    assert byte.errors and "byte 0xE9 is not UTF-8" in byte.errors[0] and "line 2" in byte.errors[0]


def test_tensors_cross_processes_in_memfds_and_outputs_must_be_sealed():
    import torch

    from tempering.envs.kernels.harness import wire

    a, b = wire.pair()
    sender, receiver = wire.Channel(a), wire.Channel(b)
    x = torch.randn(3, 5)
    views = sender.send({"op": "call"}, {"inputs": [x, 2.5, None]}, shared=True)
    got = receiver.recv(("inputs",), writable=True)["inputs"]
    assert torch.equal(got[0], x) and got[1:] == [2.5, None]
    got[0][0, 0] = 7.0  # shared: the sender sees a write into its inputs at once
    assert float(views[0][0, 0]) == 7.0 and float(x[0, 0]) != 7.0
    sender.send({"op": "out"}, {"outputs": [x]})  # sealed copies
    out = receiver.recv(("outputs",), sealed=True)["outputs"][0]
    assert torch.equal(out, x)
    sender.send({"op": "out"}, {"outputs": [x]}, shared=True)  # not sealed: refused as an output
    with pytest.raises(ValueError, match="not sealed"):
        receiver.recv(("outputs",), sealed=True)
    spares = wire.Spares([x.numel() * 4])  # made ahead: the answer only copies into it
    sender.send({"op": "out"}, {"outputs": [x + 1]}, spares=spares)
    assert torch.equal(receiver.recv(("outputs",), sealed=True)["outputs"][0], x + 1) and not spares.free[x.numel() * 4]


def test_every_output_memfd_starts_as_all_ones_bytes_not_zeros_or_an_earlier_output():
    """A kernel that skips writing part of its output (zeros it counts on being there) is wrong: a memfd
    reserved for an expected size, a new one of a size nobody expected, and one freed and taken again
    within a call all come to the forward as all-ones bytes (NaN in a float)."""
    from tempering.envs.kernels.harness import wire

    def all_ones(t):
        return bool((t == 255).all())

    wire.reserve([1000, 1000])  # under 64 KiB too: every expected output size is pooled
    wire.scribble_pool()
    assert wire.pooled(1000) and not wire.pooled(1001)
    first = wire.shared_empty(1000)
    assert all_ones(first)
    first.zero_()
    del first  # back in the pool, zeros in it, within the same call
    again = wire.shared_empty(1000)
    assert all_ones(again)
    assert all_ones(wire.shared_empty(3 << 16))  # a size no call expected: a new memfd, not zero pages
    del again
    wire.scribble_pool({1000: bytes(range(200)) * 5})  # the judge's fill for this call's size
    assert wire.shared_empty(1000)[:200].tolist() == list(range(200))
    wire.scribble_pool()


def test_torch_calls_from_trusted_library_code_pass_the_ban_and_the_submissions_do_not(tmp_path, monkeypatch):
    """Triton's interpreter copies tensors with torch while a kernel runs: those calls come from Triton's
    files and pass; the kernel's own body (the submission's file) stays under the ban."""
    import sys
    from pathlib import Path

    import torch

    from tempering.envs.kernels import harness

    monkeypatch.syspath_prepend(str(Path(harness.__file__).parent))  # the harness's modules import each other
    import runner

    lib = tmp_path / "fake_triton"
    lib.mkdir()
    (lib / "interp.py").write_text("import torch\ndef copy(x):\n    return torch.relu(x)\n")
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "kernel.py").write_text("import torch\ndef body(x):\n    return torch.relu(x)\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(sub))
    import interp
    import kernel

    guard = runner.Guard(frozenset(), [False])
    guard.trusted = (str(lib) + "/",)
    x = torch.ones(2)
    with runner._BanCalls(guard):
        interp.copy(x)
        assert guard.violations == []
        with pytest.raises(RuntimeError, match="not allowed"):
            kernel.body(x)
    assert guard.violations == ["torch call relu"]
    sys.modules.pop("interp", None)
    sys.modules.pop("kernel", None)


def _bpf(program: bytes, nr: int, args=(), arch=0xC000003E) -> int:
    """Run a classic-BPF seccomp program on one call (the few opcodes the filter uses)."""
    import struct

    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    pc = acc = 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc, pc = struct.unpack_from("=I", data, k)[0], pc + 1
        elif code in (0x15, 0x45):
            hit = acc == k if code == 0x15 else bool(acc & k)
            pc += 1 + (jt if hit else jf)
        elif code == 0x05:
            pc += 1 + k
        else:
            assert code == 0x06
            return k


def test_syscall_filter_denies_what_a_kernel_does_not_need():
    from tempering.envs.kernels.harness import syscalls

    prog = syscalls._program("x86_64", 1234, syscalls._RET_USER_NOTIF)
    allow, deny = syscalls._RET_ALLOW, syscalls._RET_USER_NOTIF
    verdicts = {
        "read": (0, ()),
        "mmap read-write": (9, (0, 4096, 3, 0x22)),
        "mprotect read-write": (10, (0, 4096, 3)),
        "openat for reading": (257, (0, 0, 0)),
        "rt_sigaction query": (13, (11, 0)),
        "fcntl add seals": (72, (3, 1033)),
        "kill itself": (62, (1234, 6)),
        "prlimit64 read": (302, (0, 7, 0)),
    }
    assert {k: _bpf(prog, *v) for k, v in verdicts.items()} == dict.fromkeys(verdicts, allow)
    denied = {
        "mmap executable": (9, (0, 4096, 5, 0x22)),
        "mmap over pages": (9, (0, 4096, 3, 0x32)),
        "mprotect none": (10, (0, 4096, 0)),
        "mprotect executable": (10, (0, 4096, 7)),
        "openat for writing": (257, (0, 0, 0o101)),
        "rt_sigaction set": (13, (11, 0x7FFF0000)),
        "fcntl lock": (72, (3, 6)),
        "kill another": (62, (1, 9)),
        "clone": (56, ()),
        "userfaultfd": (323, ()),
        "io_uring_setup": (425, ()),
        "x32 read": (0x40000000, ()),
    }
    assert {k: _bpf(prog, *v) for k, v in denied.items()} == dict.fromkeys(denied, deny)
    assert _bpf(prog, 0, (), arch=0x40000003) == deny  # i386 calls
    assert "mprotect with PROT_NONE" in syscalls.describe(10, [0, 4096, 0, 0, 0, 0])
    with_host = syscalls._program("x86_64", 1234, syscalls._RET_USER_NOTIF, child=99)  # may end its kernel host
    assert _bpf(with_host, 62, (99, 9)) == allow and _bpf(with_host, 62, (98, 9)) == deny


def test_extension_symbols_read_from_the_built_library():
    from tempering.envs.kernels.elf import _extension_refusal, qualified_name
    from tempering.envs.kernels.harness.policy import ALLOWED_CALLS, ALLOWED_OPS

    ops = frozenset(ALLOWED_OPS | ALLOWED_CALLS | {"empty_memory_format"})
    assert qualified_name("_ZN2at4_ops4relu4callERKNS_6TensorE") == "at::_ops::relu::call"
    assert qualified_name("_ZNK2at10TensorBase8data_ptrIfEEPT_v") == "at::TensorBase::data_ptr"
    assert qualified_name("_ZNSt6vectorIlSaIlEE9push_backERKl") == "std::vector"
    allowed = [
        "_ZN2at4_ops10empty_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEE",
        "_ZNK2at10TensorBase8data_ptrIfEEPT_v",
        "_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
        "_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE",
        "_ZN8pybind116detail11type_casterIN2at6TensorEvE4castERKS3_NS_19return_value_policyENS_6handleE",
        "_Znwm",
        "_ZTIPKc",
        "PyObject_GetAttrString",
        "__cxa_throw",
        "memcpy",
    ]
    assert {s: _extension_refusal(s, ops, False) for s in allowed} == dict.fromkeys(allowed, "")
    refused = {
        "_ZN2at4_ops4relu4callERKNS_6TensorE": "ATen's relu",
        "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE": "at::cpu::clamp_min",
        "_ZN2at4_ops2mm4callERKNS_6TensorES4_": "ATen's mm",
        "_ZN3c104impl29tls_set_dispatch_key_excludedENS_11DispatchKeyEb": "tls_set_dispatch_key_excluded",
        "_ZN3c1010Dispatcher9singletonEv": "c10::Dispatcher",
        "PyRun_SimpleString": "runs Python code",
        "mprotect": "mprotect()",
    }
    for symbol, words in refused.items():
        assert words in _extension_refusal(symbol, ops, False), symbol
    assert _extension_refusal("_ZN2at4_ops2mm4callERKNS_6TensorES4_", ops | {"mm"}, False) == ""  # allow_ops


def test_precision_is_judged_against_float32s_own_error():
    """A sparse output whose few values are tiny beside the inputs passes in float32 (its error is large
    beside its RMS) and fails in bfloat16; a 0-d mean over part of the input fails."""
    from pathlib import Path

    import torch

    from tempering.envs.kernels import harness

    sys_path = str(Path(harness.__file__).parent)
    import sys

    sys.path.insert(0, sys_path)
    try:
        import verify
    finally:
        sys.path.remove(sys_path)

    class Shift(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 3.0 - 2.9999)

    judge = verify.Judge({"precision_rms": 1e-4, "precision_factor": 32.0}, None)
    judge.ref = Shift()
    x = torch.rand(256, 1024)
    want = judge.ref(x)
    exact = torch.relu(x.double() * 3.0 - 2.9999)
    fused = torch.relu(torch.addcmul(torch.full_like(x, -2.9999), x, torch.full_like(x, 3.0)))  # another rounding
    assert judge.compare([fused], [want], "test", "", [x]) >= 0.0
    assert judge.compare([exact.float()], [want], "test", "", [x]) >= 0.0
    low = torch.relu(x.to(torch.bfloat16).float() * 3.0 - 2.9999)  # bfloat16 inputs
    with pytest.raises(verify.Verdict, match="lower-precision|outside tolerance"):  # atol is RMS-relative
        judge.compare([low], [want], "test", "", [x])

    class Mean(torch.nn.Module):
        def forward(self, a):
            return torch.mean(a * a)

    judge = verify.Judge({}, None)
    judge.ref = Mean()
    a = torch.randn(64, 4096)
    quarter = (a[:16] * a[:16]).mean()  # a quarter of the rows: about 0.5% off, mostly within 1e-2
    with pytest.raises(verify.Verdict) as caught:
        judge.compare([quarter], [judge.ref(a)], "test", "", [a])
    assert caught.value.status == "incorrect"


def _judge_module():
    import sys
    from pathlib import Path

    from tempering.envs.kernels import harness

    sys.path.insert(0, str(Path(harness.__file__).parent))
    try:
        import verify
    finally:
        sys.path.remove(str(Path(harness.__file__).parent))
    return verify


def test_integer_outputs_must_match_exactly():
    import torch

    verify = _judge_module()

    class Count(torch.nn.Module):
        def forward(self, x):
            return (x > 0).sum(dim=1)

    judge = verify.Judge({}, None)
    judge.ref = Count()
    x = torch.randn(8, 262144)
    want = judge.ref(x)
    assert judge.compare([want.clone()], [want], "test", "", [x]) == 0.0
    off = want.clone()
    off[3] += 1  # within rtol 1e-2 of a count of 131072, but a wrong count
    with pytest.raises(verify.Verdict, match="1/8 elements"):
        judge.compare([off], [want], "test", "", [x])
    mask = x > 0
    flipped = mask.clone()
    flipped[0, 0] = ~flipped[0, 0]
    with pytest.raises(verify.Verdict):
        judge.compare([flipped], [mask], "test", "", [x])


def test_float64_outputs_are_judged_at_float64s_precision():
    """A float64 product computed in float32, and a float64 tanh good to 10 bits, pass atol/rtol 1e-2 and
    fail the precision check; honest float64 arithmetic in another order passes, and the error reported is
    the real one."""
    import torch

    verify = _judge_module()

    class MatMul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    judge = verify.Judge({}, None)
    judge.ref = MatMul()
    a, b = torch.randn(64, 1024, dtype=torch.float64), torch.randn(1024, 48, dtype=torch.float64)
    want = judge.ref(a, b)
    other_order = sum(a[:, k : k + 1] * b[k : k + 1, :] for k in range(1024))  # a naive loop's rounding
    assert 0.0 < judge.compare([other_order], [want], "test", "", [a, b]) < 1e-13
    in_float32 = (a.float() @ b.float()).double()
    with pytest.raises(verify.Verdict, match="float64's own error"):
        judge.compare([in_float32], [want], "test", "", [a, b])

    class Tanh(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 0.5

    judge = verify.Judge({}, None)
    judge.ref = Tanh()
    x = torch.randn(256, 512, dtype=torch.float64)
    want = judge.ref(x)
    assert judge.compare([0.5 * torch.tanh(x.clone())], [want], "test", "", [x]) < 1e-14
    ten_bits = (want * 1024).round() / 1024
    with pytest.raises(verify.Verdict, match="lower-precision|outside tolerance"):  # each element at its size
        judge.compare([ten_bits], [want], "test", "", [x])


def test_building_a_model_may_allocate_and_fill_but_not_compute():
    """ModelNew() runs under the torch-call ban widened by policy.INIT_CALLS: the layers' own
    initialisation, random and constant parameters and copies pass; computing a table does not."""
    import sys
    from pathlib import Path

    import torch
    import torch.nn as nn

    from tempering.envs.kernels import harness

    sys.path.insert(0, str(Path(harness.__file__).parent))
    try:
        import runner
    finally:
        sys.path.remove(str(Path(harness.__file__).parent))

    def built(make):
        guard = runner.Guard(runner.ALLOWED_CALLS, [False])
        with torch.no_grad(), runner._BanCalls(guard, runner.INIT_CALLS):
            try:
                make()
            except RuntimeError:
                pass
        return guard.violations

    def layers():
        m = nn.Sequential(nn.Linear(8, 4), nn.Conv2d(3, 4, 3), nn.LayerNorm(4), nn.BatchNorm2d(4), nn.Embedding(5, 4))
        m.extra = nn.Parameter(torch.randn(4, 4))
        m.register_buffer("ramp", torch.arange(16, dtype=torch.float32))
        nn.init.xavier_uniform_(m.extra)
        m.load_state_dict({k: v.clone() for k, v in m.state_dict().items()})
        return m.to("cpu").eval()

    assert built(layers) == []
    assert built(lambda: torch.nn.functional.gelu(torch.linspace(-8, 8, 33))) == ["torch call gelu"]
    assert built(lambda: torch.arange(8) / 1024.0) == ["torch call div"]


def test_kernel_host_filter_allows_its_channel_and_memory_only():
    from tempering.envs.kernels.harness import syscalls

    prog = syscalls._program("x86_64", 77, syscalls._RET_TRAP, syscalls.HOST_ALLOWED, syscalls.HOST_CHECKED)
    allow, trap = syscalls._RET_ALLOW, syscalls._RET_TRAP
    allowed = {
        "recvmsg": (47, ()),
        "sendmsg": (46, ()),
        "futex": (202, ()),
        "mmap shared read-write": (9, (0, 4096, 3, 0x01)),
        "mremap may move": (25, (0, 4096, 8192, 1)),
        "munmap": (11, ()),
        "kill itself": (62, (77, 6)),
    }
    assert {k: _bpf(prog, *v) for k, v in allowed.items()} == dict.fromkeys(allowed, allow)
    denied = {
        "openat for reading": (257, (0, 0, 0)),  # the candidate's process may read files; the kernel may not
        "open": (2, (0, 0)),
        "memfd_create": (319, ()),
        "ftruncate": (77, ()),
        "mremap over pages": (25, (0, 4096, 8192, 3)),
        "mprotect executable": (10, (0, 4096, 7)),
        "rt_sigaction set": (13, (11, 0x7FFF0000)),
        "clone": (56, ()),
        "wait4": (61, ()),
        "kill another": (62, (1, 9)),
    }
    assert {k: _bpf(prog, *v) for k, v in denied.items()} == dict.fromkeys(denied, trap)


@pytest.fixture(scope="module")
def kernel_host(tmp_path_factory):
    """The kernel host built as the verifier builds it, and a library of test kernels (needs gcc)."""
    from pathlib import Path

    from tempering.envs.kernels import harness
    from tempering.envs.kernels.verifier import C_FLAGS

    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    d = tmp_path_factory.mktemp("kernel_host")
    source = Path(harness.__file__).parent / "kernel_host.c"
    subprocess.run(["gcc", "-O2", "-fopenmp", str(source), "-o", str(d / "kernel_host"), "-ldl"], check=True)
    (d / "k.c").write_text(
        """#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
void axpy(float a, const float* x, long n, float* y, float b) { for (long i = 0; i < n; i++) y[i] = a * x[i] + b; }
void shift(float* x, long n) { memmove(x + 1, x, (n - 1) * sizeof(float)); }
void many(long a, long b, long c, long d, long e, long f, long g, float* out, long h) { out[0] = a + b + c + d + e + f + g + h; }
void crash(float* x) { *(volatile float*)0 = x[0]; }
void exec_page(float* x) { mprotect((void*)((uintptr_t)x & ~(uintptr_t)4095), 4096, 7); }
"""
    )
    subprocess.run(["gcc", *C_FLAGS, str(d / "k.c"), "-o", str(d / "k.so")], check=True)
    return d


def _open_host(d, functions):
    import contextlib
    import sys
    from pathlib import Path

    from tempering.envs.kernels import harness

    sys.path.insert(0, str(Path(harness.__file__).parent))
    try:
        import ckernel
        import syscalls
    finally:
        sys.path.remove(str(Path(harness.__file__).parent))
    calls = []
    load_c, host = ckernel.open_library(
        str(d / "kernel_host"),
        str(d / "k.so"),
        functions,
        1,
        syscalls.host_program,
        lambda: calls.append(1),
        harness=contextlib.nullcontext,
    )
    return load_c(), host, calls, ckernel


def test_kernel_host_runs_the_kernel_without_python_or_torch_in_its_process(kernel_host):
    import torch

    lib, host, calls, _ = _open_host(kernel_host, ["axpy", "shift", "many"])
    with open(f"/proc/{host.pid}/maps") as f:
        mapped = f.read()
    assert "k.so" in mapped and "libtorch" not in mapped and "python" not in mapped.lower()
    x, y = torch.randn(1000), torch.empty(1000)
    lib.axpy(2.0, x, 1000, y, 0.5)  # floats and pointers in any order
    assert torch.equal(y, 2.0 * x + 0.5)
    base = torch.arange(10.0)
    view = base[2:]  # a view: the bytes it covers go across and come back, the rest stay
    lib.shift(view, view.numel())
    assert base.tolist() == [0, 1, 2, 2, 3, 4, 5, 6, 7, 8]
    out = torch.zeros(1)
    lib.many(1, 2, 3, 4, 5, 6, 7, out, 8)  # more integers than registers
    assert out.item() == 36 and len(calls) == 3
    import wire  # imported by ckernel, from the harness's folder

    shared = wire.shared_empty(4 * 1000).view(torch.float32)  # memory in a memfd: the host maps it, no copy
    lib.axpy(2.0, x, 1000, shared, 0.5)
    assert torch.equal(shared, 2.0 * x + 0.5)
    lib.shift(shared[500:], 500)  # a view into it: its offset travels with the descriptor
    assert torch.equal(shared[501:], (2.0 * x + 0.5)[500:999])
    with pytest.raises(AttributeError, match="no function 'nope'"):
        lib.nope(x)


@pytest.mark.parametrize(
    ("fn", "status", "words"),
    [("exec_page", "forbidden_op", "mprotect with PROT_READ|PROT_WRITE|PROT_EXEC"), ("crash", "crashed", "SIGSEGV")],
)
def test_kernel_host_ends_on_a_denied_call_or_a_crash_and_says_which(kernel_host, fn, status, words):
    import torch

    lib, _, _, ckernel = _open_host(kernel_host, [fn])
    with pytest.raises(ckernel.KernelFailed) as failed:
        getattr(lib, fn)(torch.ones(4))
    assert failed.value.status == status and words in failed.value.message
    with pytest.raises(ckernel.KernelFailed):  # every later call fails the same way
        getattr(lib, fn)(torch.ones(4))


def test_a_calls_cpu_time_is_read_once_the_process_is_off_the_cpu():
    """The kernel adds a running thread's current slice to its CPU time only when it stops: read at once, a
    call that answers and keeps running shows almost none of its time (a short call none at all)."""
    import os
    import sys
    import time
    from pathlib import Path

    from tempering.envs.kernels import harness

    sys.path.insert(0, str(Path(harness.__file__).parent))  # the harness's modules import each other
    try:
        from verify import Peer
    finally:
        sys.path.remove(str(Path(harness.__file__).parent))

    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(go_r, 1)
        end = time.thread_time() + 0.01
        os.write(done_w, b"x")  # answers first, then runs on without sleeping
        while time.thread_time() < end:
            pass
        os.read(go_r, 1)
        os._exit(0)
    try:
        peer = Peer("candidate", pid, None, "")
        c0 = peer.cpu_ns()
        os.write(go_w, b"x")
        os.read(done_r, 1)
        assert peer.cpu_ns() - c0 >= 0.009e9
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)


def test_kernel_host_maps_the_calls_inputs_so_the_judge_sees_what_the_kernel_wrote(kernel_host):
    import torch

    lib, host, _, _ = _open_host(kernel_host, ["shift"])
    import wire  # imported by ckernel, from the harness's folder

    judge_end, runner_end = wire.pair()
    sent = torch.arange(1.0, 65537.0)
    views = wire.Channel(judge_end).send({"op": "inputs"}, {"inputs": [sent]}, shared=True)  # as the judge does
    (x,) = wire.Channel(runner_end).recv(("inputs",), writable=True)["inputs"]
    host.preload([x])  # mapped by the host before the call: no copy
    assert len(host.transient) == 1
    lib.shift(x, x.numel())
    assert views[0][:3].tolist() == [1.0, 1.0, 2.0]  # the judge's own view of the memfd: a changed input
    host.release()
    assert host.transient == [] and len(host.ids) == 0


def _judge_on(monkeypatch, model):
    """The judge's comparison alone (no processes), with the reference `model`."""
    from pathlib import Path

    from tempering.envs.kernels import harness

    monkeypatch.syspath_prepend(str(Path(harness.__file__).parent))
    import verify

    judge = verify.Judge({}, None)
    judge.ref = model
    return verify, judge


@pytest.mark.parametrize(
    "low, high, scale",
    [(-3.0, 3.0, 1e-30), (-3.0, 3.0, 1.0), (-3.0, 3.0, 1e30), (50.0, 88.0, 1.0), (-80.0, -60.0, 1.0)],
)
def test_the_precision_verdict_does_not_depend_on_the_outputs_scale(monkeypatch, low, high, scale):
    """exp(x) * scale, outputs from 1e-35 to 1e38: float32 squares of them overflow or vanish, so checks
    computed from them credited a 2e-3-relative-error exp (or zeros) at one scale and refused an honest
    float64 exp at another. The same kernels get the same verdicts at every scale."""
    import torch

    class Exp(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x) * scale

    verify, judge = _judge_on(monkeypatch, Exp())
    x = torch.rand(4096, generator=torch.Generator().manual_seed(0)) * (high - low) + low
    want = Exp()(x)
    honest = (torch.exp(x.double()) * scale).float()  # rounded once: not the reference's bits
    crude = honest * (1 + 2e-3 * torch.sin(x * 37))  # a polynomial exp's error
    verdicts = []
    for got in (honest, crude, torch.zeros_like(want)):
        judge.result["trials"].append({})
        try:
            judge.compare([got], [want], "get_inputs", "", [x])
            verdicts.append(True)
        except verify.Verdict:
            verdicts.append(False)
    assert verdicts == [True, False, False]


def _sampler_module():
    _judge_module()  # the judge imports it by name, as in its job
    import sys

    return sys.modules["ipsample"]


def _child(dumpable: bool, busy: bool = False) -> int:
    import ctypes
    import os
    import signal

    ready, done = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ctypes.CDLL(None).prctl(4, int(dumpable), 0, 0, 0)  # PR_SET_DUMPABLE
            os.write(done, b"1")
            x = 0
            while True:
                if busy:
                    x += 1
                else:
                    signal.pause()
        finally:
            os._exit(0)
    os.read(ready, 1)
    os.close(ready)
    os.close(done)
    return pid


def _as_judge(check) -> dict:
    """`check()`'s dict, computed in a forked process without privileges (as in a sandbox job: root could
    trace any process, a job's judge cannot)."""
    import json
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
            out = check()
        except BaseException as e:
            out = {"error": repr(e)}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_the_judge_refuses_a_process_its_sampler_cannot_attach_to():
    """A candidate that made itself non-traceable is refused (never excused); a machine where perf events
    cannot be opened at all is a harness error that names `ip_sampling`, never a silent pass."""
    import os
    import signal

    verify = _judge_module()
    ipsample = _sampler_module()
    try:
        ipsample.probe()
    except ipsample.Unavailable as e:
        pytest.skip(f"perf events unavailable here: {e}")

    class Peer:
        def __init__(self, pid):
            self.pids = [pid]

    def attach(dumpable):
        def check():
            pid = _child(dumpable)
            try:
                judge = verify.Judge({"ip_sampling": "require"}, Peer(pid))
                judge.attach_sampler()
                return {"status": None, "events": len(judge.sampler.events)}
            except verify.Verdict as v:
                return {"status": v.status, "message": v.message}
            finally:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)

        return check

    refused = _as_judge(attach(False))
    assert refused.get("status") == "tampering" and "non-traceable" in refused["message"], refused
    attached = _as_judge(attach(True))
    assert attached.get("status") is None and attached["events"] >= 1, attached

    def unavailable(*args, **kwargs):
        raise ipsample.Unavailable("perf_event_open: ENOSYS")

    judge = verify.Judge({"ip_sampling": "require"}, Peer(os.getpid()))
    real, ipsample.probe = ipsample.probe, unavailable
    try:
        with pytest.raises(verify.Verdict) as caught:
            judge.attach_sampler()
    finally:
        ipsample.probe = real
    assert caught.value.status == "harness_error" and "ip_sampling='off'" in caught.value.message
    off = verify.Judge({"ip_sampling": "off"}, Peer(os.getpid()))
    off.attach_sampler()
    assert off.sampler is None and off.result["ip_sampling"] == "off"


def test_the_sampler_places_a_busy_thread_in_its_object():
    """Samples read from the judge's ring buffers land in the object the other process was running."""
    import os
    import signal
    import time

    ipsample = _sampler_module()
    try:
        ipsample.probe()
    except ipsample.Unavailable as e:
        pytest.skip(f"perf events unavailable here: {e}")
    pid = _child(True, busy=True)
    try:
        sampler = ipsample.Sampler([pid], period_ns=50_000)
        sampler.enable()
        time.sleep(0.3)
        sampler.disable()
        sampler.drain()
        located = sampler.attribute({"first"})
        sampler.close()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert located, "no sample in 0.3 s of a busy thread"
    kinds = [ipsample.classify(path, address, "/nonexistent/") for path, address in located]
    assert kinds.count("harness") > len(kinds) / 2  # a Python loop: the interpreter's own code
    assert sum(k.startswith("library") for k in kinds) < len(kinds) / 10


def test_the_sampler_tells_torchs_copies_from_its_compute():
    """On torch's own libtorch_cpu.so: a sample in its GEMM (MKL) or in an ATen compute kernel's loop is
    library code, one in the output copy's loop or the allocator the harness's."""
    import os
    import re

    import torch

    ipsample = _sampler_module()
    path = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    table, strings = ipsample._functions(path)
    if not len(table):
        pytest.skip("libtorch_cpu.so has no symbol table here")

    def first(pattern):  # the first function whose name starts with a match (searched in the string table)
        for m in re.finditer(rb"(?<=\0)" + pattern, strings):
            hits = (table["name"] == m.start()).nonzero()[0]
            if len(hits):
                return int(table["value"][hits[0]]) + 1
        pytest.skip(f"no function matching {pattern!r} in this libtorch_cpu.so")

    expected = {
        rb"mkl_blas_[^\0]*sgemm": "library",  # MKL's GEMM
        rb"_ZN3c1012function_ref[^\0]*relu_kernel": "library",  # ATen's ReLU loop
        rb"_ZN2at3cpu9clamp_min": "library",  # a structured kernel's entry point
        rb"_ZN3c1012function_ref[^\0]*direct_copy_kernel": "harness",  # the output's copy loop
        rb"_ZN2at6detail13empty_generic": "harness",  # allocation
    }
    kinds = {p: ipsample.classify(path, first(p), "/nonexistent/").split(" ")[0] for p in expected}
    assert kinds == expected


def test_each_element_is_judged_at_its_own_size_not_the_outputs_rms(monkeypatch):
    """exp over 30 orders of magnitude with its small values zeroed, and the small half of one output of
    two scales zeroed, fail (both passed in units of the output's RMS); an honest float32 evaluation of
    each, and a matmul summed in another order (its near-zero outputs included), pass."""
    import torch

    class Op(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, *xs):
            return self.fn(*xs)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=gen)
    cases = [
        (lambda t: torch.exp(t * 8.0), lambda want: want.where(want > want.max() * 1e-7, torch.zeros(()))),
        (
            lambda t: torch.cat([t * 1e5, torch.tanh(t)], 1),
            lambda want: torch.cat([want[:, :256], 0 * want[:, 256:]], 1),
        ),
    ]
    for fn, crude in cases:
        verify, judge = _judge_on(monkeypatch, Op(fn))
        want = fn(x)
        judge.compare([fn(x.double()).float()], [want], "get_inputs", "", [x])
        with pytest.raises(verify.Verdict, match="outside tolerance"):
            judge.compare([crude(want)], [want], "get_inputs", "", [x])
    a, b = torch.randn(64, 512, generator=gen), torch.randn(512, 48, generator=gen)
    verify, judge = _judge_on(monkeypatch, Op(torch.matmul))
    other_order = sum(a[:, k : k + 1] * b[k : k + 1, :] for k in range(512))  # a naive loop's rounding
    judge.compare([other_order], [a @ b], "get_inputs", "", [a, b])


def test_outputs_start_wrong_at_every_element_and_weights_get_fresh_values(monkeypatch):
    """The fill differs from the reference at every element (floats never within tolerance, finite where
    the reference is not; integers never equal; bool bytes no bool) and changes each call; a bool output
    with such a byte is bad_output. Re-drawn weights are not a permutation: ones and a one-element
    slope change, a variance stays positive, a mask keeps its pattern."""
    import torch

    verify, judge = _judge_on(monkeypatch, torch.nn.Identity())
    gen = torch.Generator().manual_seed(0)
    floats = torch.tensor([0.0, 1e-30, -3.0, float("inf"), float("nan"), 1.0])
    for group in ([floats], [floats, -floats], [torch.tensor([3e38, -3e38])]):
        fill = verify._wrong_everywhere(group, gen).view(torch.float32)
        for w in group:
            w = w.nan_to_num(0.0, 0.0, 0.0)
            assert bool(torch.isfinite(fill).all()) and bool(((fill.double() - w).abs() > w.abs() * 0.5).all())
    ints = torch.tensor([-1, 0, 1, 2**62], dtype=torch.int64)
    assert not bool((verify._wrong_everywhere([ints], gen).view(torch.int64) == ints).any())
    bools = torch.tensor([True, False, True])
    bytes_ = verify._wrong_everywhere([bools], gen)
    assert bool((bytes_ > 1).all()) and not torch.equal(bytes_, verify._wrong_everywhere([bools], gen))
    with pytest.raises(verify.Verdict, match="bytes other than 0 and 1") as caught:
        judge.compare([bytes_.view(torch.bool)], [bools], "get_inputs", "", [bools])
    assert caught.value.status == "bad_output"
    ones, slope, var = torch.ones(8), torch.full((1,), 0.25), torch.rand(8) + 0.1
    mask = torch.tril(torch.ones(4, 4))
    assert not bool((verify._fresh(ones, gen) == 1).any()) and float(verify._fresh(slope, gen)) != 0.25
    assert bool((verify._fresh(var, gen) > 0).all()) and torch.equal(verify._fresh(mask, gen), mask)
    assert not torch.equal(verify._fresh(torch.zeros(3), gen), torch.zeros(3))
