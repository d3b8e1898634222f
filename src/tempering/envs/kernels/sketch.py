"""The kernel-sketch language: a one-line schedule that tempering lowers to C for a problem.

A sketch is `key=value` pairs separated by spaces, e.g. `order=ikj tile=32 unroll=4 vec=1 threads=2`.
Missing keys take their defaults; an unknown key or value is a parse error. Keys:

    order    loop order, a permutation of the problem's loop letters   (default: the natural order)
               map: i            reduce: rc | cr (r = rows, c = reduced columns)
               matmul: any permutation of ijk (C[i,j] += A[i,k] * B[k,j])
             the outermost loop is the parallel one
    tile     0 | 8 | 16 | 32 | 64 | 128 | 256    blocking (default 0 = none):
               map: blocks of tile*256 elements; reduce: blocks of `tile` rows (order=cr) or
               columns (order=rc); matmul: tile x tile x tile blocks
    unroll   1 | 2 | 4 | 8       innermost loop unrolled by hand (default 1)
    tail     0 | 1               emit the remainder loop after an unrolled loop (default 1);
                                 tail=0 is wrong unless the unroll factor divides the trip count
    vec      0 | 1               `#pragma omp simd` on the innermost loop (default 0)
    threads  1 | 2 | 4           OpenMP threads on the outermost loop (default 1), capped at the
                                 thread count the baselines get; parallelising a reduction loop
                                 (matmul order=k.., reduce order=cr) is a data race
    fuse     0 | 1               one pass over the data for all of the problem's ops (default 1) or
                                 one pass per op through the output buffer

The same sketch always lowers to the same C (keys are canonicalised), so the build cache hits.
Some sketches are wrong (a race, a missing tail), most are correct at very different speeds: the
reward is real, and learnable by a tiny character-level policy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tempering.errors import UserError

KEYS = ("order", "tile", "unroll", "tail", "vec", "threads", "fuse")
VALUES = {
    "tile": (0, 8, 16, 32, 64, 128, 256),
    "unroll": (1, 2, 4, 8),
    "tail": (0, 1),
    "vec": (0, 1),
    "threads": (1, 2, 4),
    "fuse": (0, 1),
}
DEFAULTS = {"tile": 0, "unroll": 1, "tail": 1, "vec": 0, "threads": 1, "fuse": 1}


@dataclass(frozen=True)
class Spec:
    """How one built-in problem is expressed in the sketch language."""

    kind: str
    """`map` (elementwise chain), `reduce` (row reduction) or `matmul` (with an optional epilogue)."""
    inputs: tuple[str, ...] = ("x",)
    """forward's argument names (also the C pointer names)."""
    stages: tuple[str, ...] = ()
    """map: one C expression per op; `{i}` is the element index, `v` the previous stage's value.
    reduce: (pre-op on element `{e}`, or "" for none); matmul: epilogue on `v` (bias already added)."""
    reduce: tuple[str, str, str] = ("", "", "")
    """reduce: (initial value, combine `acc` with element `{e}`, finish `acc` using `cols`)."""
    omp_reduction: str = "+"
    """reduce: OpenMP reduction operator for vec=1 (`+` or `max`)."""
    layout: str = "kn"
    """matmul: B's layout, `kn` (A @ B) or `nk` (A @ B.T, as nn.Linear's weight)."""
    linear: bool = False
    """matmul: the problem is `self.linear(x)` (weight and bias from the module)."""


_GELU = "0.5f * v * (1.0f + erff(v * 0.70710678f))"
SPECS: dict[str, Spec] = {
    "relu": Spec("map", stages=("x[{i}]", "v > 0.0f ? v : 0.0f")),
    "leaky_relu": Spec("map", stages=("x[{i}]", "v > 0.0f ? v : 0.01f * v")),
    "gelu": Spec("map", stages=("x[{i}]", _GELU)),
    "sigmoid": Spec("map", stages=("x[{i}]", "1.0f / (1.0f + expf(-v))")),
    "tanh": Spec("map", stages=("x[{i}]", "tanhf(v)")),
    "silu": Spec("map", stages=("x[{i}]", "v / (1.0f + expf(-v))")),
    "hardtanh": Spec("map", stages=("x[{i}]", "v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v)")),
    "softplus": Spec("map", stages=("x[{i}]", "v > 20.0f ? v : log1pf(expf(v))")),
    "elu": Spec("map", stages=("x[{i}]", "v > 0.0f ? v : expm1f(v)")),
    "mish": Spec("map", stages=("x[{i}]", "v > 20.0f ? v : log1pf(expf(v))", "x[{i}] * tanhf(v)")),
    "add": Spec("map", inputs=("a", "b"), stages=("a[{i}] + b[{i}]",)),
    "mul_add": Spec("map", inputs=("a", "b", "c"), stages=("a[{i}] * b[{i}]", "v + c[{i}]")),
    "scale_shift": Spec("map", stages=("x[{i}] * 2.5f", "v + 0.5f")),
    "residual_relu": Spec("map", inputs=("x", "res"), stages=("x[{i}] + res[{i}]", "v > 0.0f ? v : 0.0f")),
    "swiglu": Spec("map", inputs=("a", "b"), stages=("a[{i}]", "v / (1.0f + expf(-v))", "v * b[{i}]")),
    "scale_tanh_clamp": Spec(
        "map", stages=("x[{i}] * 1.5f", "tanhf(v)", "v < -0.5f ? -0.5f : (v > 0.5f ? 0.5f : v)", "v + 1.0f")
    ),
    "row_sum": Spec("reduce", stages=("",), reduce=("0.0f", "acc + {e}", "acc")),
    "row_mean": Spec("reduce", stages=("",), reduce=("0.0f", "acc + {e}", "acc / (float)cols")),
    "row_max": Spec("reduce", stages=("",), reduce=("-INFINITY", "fmaxf(acc, {e})", "acc"), omp_reduction="max"),
    "row_l2norm": Spec("reduce", stages=("{e} * {e}",), reduce=("0.0f", "acc + {e}", "sqrtf(acc)")),
    "relu_row_sum": Spec("reduce", stages=("fmaxf({e}, 0.0f)",), reduce=("0.0f", "acc + {e}", "acc")),
    "matmul": Spec("matmul", inputs=("a", "b")),
    "matmul_bt": Spec("matmul", inputs=("a", "b"), layout="nk"),
    "linear": Spec("matmul", inputs=("x",), layout="nk", linear=True),
    "linear_relu": Spec("matmul", inputs=("x",), layout="nk", linear=True, stages=("v > 0.0f ? v : 0.0f",)),
    "linear_gelu": Spec("matmul", inputs=("x",), layout="nk", linear=True, stages=(_GELU,)),
    "linear_sigmoid_scale": Spec(
        "matmul", inputs=("x",), layout="nk", linear=True, stages=("1.0f / (1.0f + expf(-v))", "v * 2.0f")
    ),
}
LOOPS = {"map": "i", "reduce": "rc", "matmul": "ijk"}


def spec_for(problem_name: str) -> Spec | None:
    """The sketch spec of a built-in problem (`01_relu` or `relu`), or None if it has none."""
    return SPECS.get(problem_name.split("_", 1)[1] if problem_name[:2].isdigit() else problem_name)


def orders(kind: str) -> list[str]:
    letters = LOOPS[kind]
    return ["".join(p) for p in itertools.permutations(letters)]


def parse_sketch(text: str, kind: str) -> dict:
    """The canonical settings of a sketch (every key present), or UserError naming the bad token."""
    settings = dict(DEFAULTS, order=LOOPS[kind])
    seen = set()
    tokens = text.strip().split()
    if not tokens:
        raise UserError("empty sketch: write key=value pairs, e.g. `order=ikj tile=32 unroll=4`")
    for tok in tokens:
        key, eq, val = tok.partition("=")
        if not eq or key not in KEYS:
            raise UserError(f"bad token {tok!r}: expected key=value with key in {', '.join(KEYS)}")
        if key in seen:
            raise UserError(f"key {key!r} given twice")
        seen.add(key)
        if key == "order":
            if val not in orders(kind):
                raise UserError(f"order={val} is not a loop order of this problem ({', '.join(orders(kind))})")
            settings[key] = val
        else:
            if not val.isdigit() or int(val) not in VALUES[key]:
                raise UserError(f"{key}={val} is not allowed ({key} in {', '.join(map(str, VALUES[key]))})")
            settings[key] = int(val)
    return settings


def canonical(settings: dict) -> str:
    """The sketch text of canonical settings (fixed key order)."""
    return " ".join(f"{k}={settings[k]}" for k in KEYS)


# -- lowering ------------------------------------------------------------------------------------


def _pragma(parallel: bool, vec: bool, threads: int, reduction: str = "") -> list[str]:
    red = f" reduction({reduction})" if reduction else ""
    if parallel and threads > 1:
        return [f"#pragma omp parallel for{' simd' if vec else ''} num_threads({threads}){red if vec else ''}"]
    if vec:
        return [f"#pragma omp simd{red}"]
    return []


def _loop(var: str, lo: str, hi: str, body, unroll: int, tail: bool, pragma: list[str]) -> list[str]:
    """A loop over [lo, hi) with `body(index_expr) -> list[str]`, unrolled with an optional tail."""
    if unroll == 1:
        return pragma + [f"for (long {var} = {lo}; {var} < {hi}; {var}++) {{", *body(var), "}"]
    end = f"{var}_end"
    out = ["{", f"long {end} = {lo} + (({hi}) - ({lo})) / {unroll} * {unroll};"]
    out += pragma + [f"for (long {var} = {lo}; {var} < {end}; {var} += {unroll}) {{"]
    for u in range(unroll):
        out += body(f"({var} + {u})")
    out.append("}")
    if tail:
        out += [f"for (long {var} = {end}; {var} < {hi}; {var}++) {{", *body(var), "}"]
    out.append("}")
    return out


def _indent(lines: list[str]) -> str:
    out, depth = [], 1
    for ln in lines:
        if ln.startswith("}"):
            depth -= 1
        out.append("    " * depth + ln if not ln.startswith("#") else ln)
        if ln.endswith("{"):
            depth += 1
    return "\n".join(out)


def _lower_map(spec: Spec, s: dict) -> str:
    ins = ", ".join(f"const float* restrict {n}" for n in spec.inputs)
    block = s["tile"] * 256
    vec, par = bool(s["vec"]), s["threads"] > 1

    def fused(i):
        first = spec.stages[0].format(i=i)
        return ["{", f"float v = {first};", *[f"v = {e.format(i=i)};" for e in spec.stages[1:]], f"y[{i}] = v;", "}"]

    def stage(k):
        def body(i):
            v = spec.stages[0].format(i=i) if k == 0 else f"y[{i}]"
            expr = spec.stages[k].format(i=i) if k > 0 else v
            return ["{", f"float v = {v};", f"y[{i}] = {expr};", "}"] if k > 0 else [f"y[{i}] = {v};"]

        return body

    bodies = [fused] if s["fuse"] or len(spec.stages) == 1 else [stage(k) for k in range(len(spec.stages))]
    lines = []
    if block:
        lines += [f"#pragma omp parallel for num_threads({s['threads']})"] if par else []
        lines += [f"for (long q0 = 0; q0 < n; q0 += {block}) {{", f"long q1 = q0 + {block} < n ? q0 + {block} : n;"]
        for body in bodies:
            lines += _loop("i", "q0", "q1", body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1))
        lines.append("}")
    else:
        for body in bodies:
            lines += _loop("i", "0", "n", body, s["unroll"], bool(s["tail"]), _pragma(par, vec, s["threads"]))
    return f"#include <math.h>\n\nvoid kernel({ins}, float* restrict y, long n) {{\n{_indent(lines)}\n}}\n"


def _lower_reduce(spec: Spec, s: dict) -> str:
    init, combine, finish = spec.reduce
    pre = spec.stages[0]
    vec, par, tile = bool(s["vec"]), s["threads"] > 1, s["tile"]
    red = f"{spec.omp_reduction}:acc"
    two_pass = bool(pre) and not s["fuse"]  # fuse=0: the pre-op writes a temporary first
    src = "t" if two_pass else "x"
    elem = (
        (lambda idx: f"{src}[{idx}]") if (two_pass or not pre) else (lambda idx: "(" + pre.format(e=f"x[{idx}]") + ")")
    )
    lines = []
    if two_pass:
        lines += ["float* t = (float*)malloc(sizeof(float) * rows * cols);"]
        lines += _pragma(par, vec, s["threads"]) + [
            "for (long q = 0; q < rows * cols; q++) {",
            f"t[q] = {pre.format(e='x[q]')};",
            "}",
        ]
    if s["order"] == "rc":

        def body(c):
            return [f"acc = {combine.format(e=elem('r * cols + ' + c))};"]

        lines += [f"#pragma omp parallel for num_threads({s['threads']})"] if par else []
        lines += ["for (long r = 0; r < rows; r++) {", f"float acc = {init};"]
        if tile:
            lines += [
                f"for (long cb = 0; cb < cols; cb += {tile}) {{",
                f"long ce = cb + {tile} < cols ? cb + {tile} : cols;",
            ]
            lines += _loop("c", "cb", "ce", body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1, red))
            lines.append("}")
        else:
            lines += _loop("c", "0", "cols", body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1, red))
        lines += [f"y[r] = {finish};", "}"]
    else:  # cr: columns outer, a running value per row (strided)
        lines += ["for (long r = 0; r < rows; r++) y[r] = " + init + ";"]

        def body(r):
            return [
                "{",
                f"float acc = y[{r}];",
                f"acc = {combine.format(e=elem(r + ' * cols + c'))};",
                f"y[{r}] = acc;",
                "}",
            ]

        rb, re_ = ("rb", "re") if tile else ("0", "rows")
        if tile:
            lines += [
                f"for (long rb = 0; rb < rows; rb += {tile}) {{",
                f"long re = rb + {tile} < rows ? rb + {tile} : rows;",
            ]
        lines += [f"#pragma omp parallel for num_threads({s['threads']})"] if par else []
        lines += ["for (long c = 0; c < cols; c++) {"]
        lines += _loop("r", rb, re_, body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1))
        lines.append("}")
        if tile:
            lines.append("}")
        lines += ["for (long r = 0; r < rows; r++) {", "float acc = y[r];", f"y[r] = {finish};", "}"]
    if two_pass:
        lines.append("free(t);")
    return (
        "#include <math.h>\n#include <stdlib.h>\n\n"
        f"void kernel(const float* restrict x, float* restrict y, long rows, long cols) {{\n{_indent(lines)}\n}}\n"
    )


def _lower_matmul(spec: Spec, s: dict) -> str:
    order, tile, vec, threads = s["order"], s["tile"], bool(s["vec"]), s["threads"]
    size = {"i": "M", "j": "N", "k": "K"}

    def b_at(k, j):
        return f"b[{k} * N + {j}]" if spec.layout == "kn" else f"b[{j} * K + {k}]"

    epi = ["float v = acc" + (" + bias[j]" if spec.linear else "") + ";", *[f"v = {e};" for e in spec.stages]]
    has_epi = bool(spec.linear or spec.stages)
    fused = bool(s["fuse"]) and not tile and has_epi and order[0] != "k"
    bounds = {v: ((f"{v}0", f"{v}_hi") if tile else ("0", size[v])) for v in "ijk"}

    def nest(level: int) -> list[str]:
        var = order[level]
        lo, hi = bounds[var]
        if level == 2:
            if var == "k":  # dot product: accumulate in a register
                body = lambda kx: [f"acc += a[i * K + {kx}] * {b_at(kx, 'j')};"]
                loop = _loop("k", lo, hi, body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1, "+:acc"))
                done = (epi + ["c[i * N + j] = v;"]) if fused else ["c[i * N + j] = acc;"]
                return ["{", "float acc = c[i * N + j];", *loop, *done, "}"]
            ix = {"i": "i", "j": "j", "k": "k"}

            def body(e, var=var):
                ix2 = dict(ix, **{var: e})
                return [
                    f"c[{ix2['i']} * N + {ix2['j']}] += a[{ix2['i']} * K + {ix2['k']}] * {b_at(ix2['k'], ix2['j'])};"
                ]

            return _loop(var, lo, hi, body, s["unroll"], bool(s["tail"]), _pragma(False, vec, 1))
        pragma = [f"#pragma omp parallel for num_threads({threads})"] if level == 0 and not tile and threads > 1 else []
        out = pragma + [f"for (long {var} = {lo}; {var} < {hi}; {var}++) {{", *nest(level + 1)]
        if fused and level == 0 and order[1] == "k":  # i k j / j k i: finish the row/column just completed
            other = order[2]
            out += [
                f"for (long {other} = 0; {other} < {size[other]}; {other}++) {{",
                "float acc = c[i * N + j];",
                *epi,
                "c[i * N + j] = v;",
                "}",
            ]
        return out + ["}"]

    lines = ["for (long q = 0; q < M * N; q++) c[q] = 0.0f;"]
    if tile:
        for d, var in enumerate(order):
            if d == 0 and threads > 1:
                lines.append(f"#pragma omp parallel for num_threads({threads})")
            lines += [
                f"for (long {var}0 = 0; {var}0 < {size[var]}; {var}0 += {tile}) {{",
                f"long {var}_hi = {var}0 + {tile} < {size[var]} ? {var}0 + {tile} : {size[var]};",
            ]
        lines += nest(0) + ["}"] * 3
    else:
        lines += nest(0)
    if has_epi and not fused:
        lines += [
            "for (long i = 0; i < M; i++) {",
            "for (long j = 0; j < N; j++) {",
            "float acc = c[i * N + j];",
            *epi,
            "c[i * N + j] = v;",
            "}",
            "}",
        ]
    bias = ", const float* restrict bias" if spec.linear else ""
    return (
        "#include <math.h>\n\n"
        f"void kernel(const float* restrict a, const float* restrict b{bias}, float* restrict c, "
        f"long M, long K, long N) {{\n{_indent(lines)}\n}}\n"
    )


def lower(spec: Spec, settings: dict, max_threads: int | None = None) -> str:
    """C source of a sketch for one problem; `threads` is capped at `max_threads` (the baselines' count)."""
    if max_threads is not None and settings["threads"] > max_threads:
        settings = dict(settings, threads=max(1, max_threads))
    if spec.kind == "map":
        return _lower_map(spec, settings)
    if spec.kind == "reduce":
        return _lower_reduce(spec, settings)
    return _lower_matmul(spec, settings)


def submission(spec: Spec, c_source: str, constants: str = "") -> str:
    """A full `c` submission (ModelNew + C_SOURCE) around lowered C; `constants` are the problem's sizes."""
    args = ", ".join(spec.inputs)
    first = spec.inputs[0]
    if spec.kind == "map":
        call = f"y = torch.empty_like({first})\n        self.lib.kernel({args}, y, {first}.numel())"
    elif spec.kind == "reduce":
        call = "y = torch.empty(x.shape[0])\n        self.lib.kernel(x, y, x.shape[0], x.shape[1])"
    elif spec.linear:
        call = (
            "w = self.linear.weight\n        y = torch.empty(x.shape[0], w.shape[0])\n"
            "        self.lib.kernel(x, w, self.linear.bias, y, x.shape[0], x.shape[1], w.shape[0])"
        )
    else:
        n = "b.shape[1]" if spec.layout == "kn" else "b.shape[0]"
        call = f"y = torch.empty(a.shape[0], {n})\n        self.lib.kernel(a, b, y, a.shape[0], a.shape[1], {n})"
    init = "\n        self.linear = nn.Linear(in_features, out_features)" if spec.linear else ""
    return f'''import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
{c_source}"""

{constants}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__(){init}
        self.lib = load_c()

    def forward(self, {args}):
        {call}
        return y
'''
