"""CUDA Agent's data synthesis: compose 1-5 operators into fused problems, keep the well-behaved ones.

Operators come from a fixed library (torch functions and small modules, each with the sizes it
needs). A composition becomes a KernelBench-format problem file; it is kept only if it runs in eager
and under torch.compile (same result), is deterministic, its output varies with its input, its eager
time falls in the configured window, and it is not a near-duplicate (AST similarity above the
threshold, 0.9 by default) of any evaluation problem or of a problem already kept.

The compositions are tempering's own code (no model writes them), so the filters run them in this
process, with one shared torch.compile cache; a model-written composer would run them in the sandbox.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tempering import syntax
from tempering.envs.kernels.problems import Problem

# name -> (forward line on `x`, module built in __init__ or "", changes width to a new constant)
OPERATORS: dict[str, tuple[str, str, bool]] = {
    "relu": ("x = torch.relu(x)", "", False),
    "gelu": ("x = torch.nn.functional.gelu(x)", "", False),
    "sigmoid": ("x = torch.sigmoid(x)", "", False),
    "tanh": ("x = torch.tanh(x)", "", False),
    "silu": ("x = torch.nn.functional.silu(x)", "", False),
    "softplus": ("x = torch.nn.functional.softplus(x)", "", False),
    "leaky_relu": ("x = torch.nn.functional.leaky_relu(x, 0.1)", "", False),
    "hardtanh": ("x = torch.nn.functional.hardtanh(x)", "", False),
    "scale": ("x = x * 0.5", "", False),
    "shift": ("x = x + 1.0", "", False),
    "clamp": ("x = torch.clamp(x, -1.0, 1.0)", "", False),
    "softmax": ("x = torch.softmax(x, dim=-1)", "", False),
    "log_softmax": ("x = torch.log_softmax(x, dim=-1)", "", False),
    "layernorm": ("x = self.{op}(x)", "nn.LayerNorm({width})", False),
    "linear": ("x = self.{op}(x)", "nn.Linear({width}, {new})", True),
    "row_sum": ("x = x.sum(dim=-1, keepdim=True)", "", False),
    "row_max": ("x = x.amax(dim=-1, keepdim=True)", "", False),
    "residual_square": ("x = x + x * x", "", False),
    "dropout": ("x = torch.nn.functional.dropout(x, p=0.2, training=True)", "", False),  # stochastic: filtered
    "zero": ("x = x * 0.0", "", False),  # constant output: filtered
}
RARE = {"dropout": 0.2, "zero": 0.2, "row_sum": 0.5, "row_max": 0.5}
"""Sampling weights below 1: the ops the filters exist for stay present but rare."""
SIZES = [(256, 1024), (512, 1024), (512, 2048), (1024, 2048), (1024, 4096), (2048, 4096)]
WIDTHS = [512, 1024, 2048]
OP_COUNT_WEIGHTS = {1: 0.1, 2: 0.55, 3: 0.2, 4: 0.1, 5: 0.05}  # CUDA Agent: most tasks have 2 ops


@dataclass
class SynthConfig:
    """Synthesis settings."""

    n: int = 20
    """Compositions to try."""
    seed: int = 0
    """Random seed of the compositions."""
    max_ops: int = 5
    """Most operators per problem (1-5)."""
    min_ms: float = 1.0
    """Eager time window, low end (ms)."""
    max_ms: float = 100.0
    """Eager time window, high end (ms)."""
    similarity: float = 0.9
    """Drop problems whose AST similarity to an evaluation (or kept) problem exceeds this."""
    check_compile: bool = True
    """Run each candidate under torch.compile too (seconds each on a CPU)."""
    threads: int = 1
    """Torch threads while timing."""


def compose(rng: random.Random, max_ops: int) -> tuple[list[str], str]:
    """(operator names, problem source) of one random composition."""
    counts = [k for k in OP_COUNT_WEIGHTS if k <= max_ops]
    k = rng.choices(counts, weights=[OP_COUNT_WEIGHTS[c] for c in counts])[0]
    names = list(OPERATORS)
    ops = rng.choices(names, weights=[RARE.get(n, 1.0) for n in names], k=k)
    batch, width = rng.choice(SIZES)
    consts = {"batch_size": batch, "dim0": width}
    init, forward, cur = [], [], "dim0"
    for j, name in enumerate(ops):
        line, module, widens = OPERATORS[name]
        attr = f"op{j}"
        new = cur
        if widens:
            new = f"dim{len(consts) - 1}"
            consts[new] = rng.choice(WIDTHS)
        if module:
            init.append(f"self.{attr} = " + module.format(width=cur, new=new))
        forward.append(line.format(op=attr))
        cur = new
    init_body = "".join(f"\n        {ln}" for ln in init)
    fwd_body = "".join(f"\n        {ln}" for ln in forward)
    const_lines = "\n".join(f"{k} = {v}" for k, v in consts.items())
    source = f'''import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused sequence: {" -> ".join(ops)}."""

    def __init__(self):
        super().__init__(){init_body}

    def forward(self, x):{fwd_body}
        return x


{const_lines}


def get_inputs():
    return [torch.randn(batch_size, dim0)]


def get_init_inputs():
    return []
'''
    return ops, source


def ast_tokens(source: str) -> list[str]:
    """The AST as a token sequence: node types, names and attributes; numbers abstracted away."""
    out = []
    for node in ast.walk(syntax.parse(source)):
        out.append(type(node).__name__)
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append("str")
    return out


def ast_similarity(a: str, b: str) -> float:
    """Similarity in [0, 1] of two sources' AST token sequences (difflib ratio)."""
    return difflib.SequenceMatcher(None, ast_tokens(a), ast_tokens(b), autojunk=False).ratio()


def check_problem(source: str, cfg: SynthConfig) -> tuple[str, dict]:
    """("ok", facts) or (rejection reason, facts) for one candidate problem, run in this process."""
    import torch

    ns: dict = {}
    facts: dict = {}
    try:
        exec(compile(source, "<synth>", "exec"), ns)  # our own generated code (see module docstring)
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]()).eval()
        torch.manual_seed(1)
        x1 = ns["get_inputs"]()
        torch.manual_seed(2)
        x2 = ns["get_inputs"]()
        with torch.no_grad():
            y1, y1b, y2 = model(*x1), model(*x1), model(*x2)
    except Exception as e:
        return "eager_error", {"error": f"{type(e).__name__}: {e}"}
    if not bool(torch.isfinite(y1).all()):
        return "non_finite", facts
    if not torch.equal(y1, y1b):
        return "nondeterministic", facts
    if y1.numel() > 1 and float(y1.float().std()) < 1e-6:
        return "constant_output", facts
    if torch.allclose(y1, y2, atol=1e-5, rtol=1e-5):
        return "input_independent", facts
    torch.set_num_threads(cfg.threads)
    times = []
    with torch.no_grad():
        model(*x1)
        for _ in range(5):
            t0 = time.perf_counter()
            model(*x1)
            times.append(time.perf_counter() - t0)
    facts["eager_ms"] = 1e3 * statistics.median(times)
    if not cfg.min_ms <= facts["eager_ms"] <= cfg.max_ms:
        return "outside_time_window", facts
    if cfg.check_compile:
        try:
            compiled = torch.compile(model)
            with torch.no_grad():
                yc = compiled(*x1)
            if not torch.allclose(yc, y1, atol=1e-3, rtol=1e-3):
                return "compile_mismatch", facts
        except Exception as e:
            facts["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            return "compile_error", facts
    return "ok", facts


def synthesize(cfg: SynthConfig, out_dir: str | Path, eval_problems: list[Problem], progress: bool = False) -> dict:
    """Write kept problems and manifest.json into `out_dir`; return the manifest."""
    from rich.progress import Progress

    if not 1 <= cfg.max_ops <= 5:
        from tempering.errors import UserError

        raise UserError(f"max_ops must be within 1..5, got {cfg.max_ops}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.seed)
    reasons: dict[str, int] = {}
    kept: list[dict] = []
    kept_sources: list[str] = []
    seen_ops: set[tuple] = set()
    with Progress(disable=not progress) as bar:
        task = bar.add_task("kernels synth", total=cfg.n)
        for i in range(cfg.n):
            bar.update(task, advance=1)
            ops, source = compose(rng, cfg.max_ops)
            key = (tuple(ops), source)
            if key in seen_ops:
                reasons["duplicate"] = reasons.get("duplicate", 0) + 1
                continue
            seen_ops.add(key)
            sim = max((ast_similarity(source, p.source) for p in eval_problems), default=0.0)
            sim_kept = max((ast_similarity(source, s) for s in kept_sources), default=0.0)
            if sim > cfg.similarity:
                reasons["similar_to_eval"] = reasons.get("similar_to_eval", 0) + 1
                continue
            if sim_kept > cfg.similarity:
                reasons["similar_to_kept"] = reasons.get("similar_to_kept", 0) + 1
                continue
            verdict, facts = check_problem(source, cfg)
            if verdict != "ok":
                reasons[verdict] = reasons.get(verdict, 0) + 1
                continue
            name = f"synth_{i:04d}_{'_'.join(ops)}"[:80]
            _write_atomic(out_dir / f"{name}.py", source)
            kept_sources.append(source)
            kept.append({"name": name, "ops": ops, "max_eval_similarity": round(sim, 4), **facts})
    manifest = {
        "config": asdict(cfg),
        "stats": {"tried": cfg.n, "kept": len(kept), "rejected": dict(sorted(reasons.items()))},
        "problems": kept,
    }
    _write_atomic(out_dir / "manifest.json", json.dumps(manifest, indent=2))
    return manifest


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
