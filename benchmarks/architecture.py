"""The package's shape, measured, and reruns of every training verb before and after a change.

    python benchmarks/architecture.py --before REF [--results docs/results] [--cases NAME ...]

Static figures (from the source, with `ast`): lines per top-level package, the Trainer's lines, the ten
longest functions, the modules that speak HTTP themselves, import circles between modules, and the
share of the package's lines that mypy checks (pyproject's `[tool.mypy] files`).

Adding a method: a method module is written into a scratch folder, registered with one call, and the
CLI's `--help`, `tempering config VERB` and a two-step run of the verb are checked; nothing in the
package is edited, so the count is the module and the one registration.

Reruns: every training verb (and the quickstart's two stages, shortened) runs a few steps on a tiny
model warm-started on sums, once with the code at REF (a git worktree) and once with the working tree;
each case compares a digest of the final weights, of every metric row (timings left out) and of the
held-out history. Metric names a change renamed are mapped first (`RENAMED`) and listed. `--cases` reruns
only the cases named, prints their comparison and writes no results files (a check while changing code).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tempering import syntax

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tempering"

RENAMED = {
    "rollout/tis_mean_weight": "rollout/mean_weight",
    "rollout/tis_truncated_frac": "rollout/clipped_token_share",
    "leap/rank_score_abs": "group_reward_abs",
}
"""Metric names a change renamed (same values): the rollout-correction modes; LEAP's mean |tournament score|,
now logged by the scoring step for any group reward."""

DROPPED = ("state/step",)
"""Metrics a documented fix removed: PPO's state no longer counts trained steps (value pre-training counts
run steps, skipped updates included)."""

CHANGED = {
    "demo": "documented change: pretrain runs on the one loop (its batch is the given answers, the update the "
    "loop's; the same data and optimizer, other float rounding and other metric names), so its warm start and the "
    "GRPO stage after it differ",
    "train+async": "documented addition: the rollout correction logs rollout/weight_min and rollout/weight_max "
    "(TRL's importance-ratio min and max), so its metric rows have two more keys; weights and history unchanged",
    "train+dynamic_sampling+kl_in_reward": "documented change, at a step that drops and refills groups: each "
    "collected batch is scored once, so the update takes the kept groups' reference log-probs from the filter's "
    "forward over the whole batch instead of a second forward over the kept groups (the same values up to float "
    "rounding), and kl_ref_in_reward is averaged over every collected episode",
}
"""Cases a documented change since --before alters, and why (for --before d7100f6; the prompt-shared
whole-distribution losses and the critic-order fix, which changed distill+jsd_topk, direct-opd and ppo+head,
are older)."""

REDEFINED = ("mismatch_kl",)
"""Metrics a documented fix redefined: the update's mismatch_kl is now the k3 estimate of KL(sampler || trainer),
the direction of rollout/mismatch_kl and verl's (it was the reverse), so its values differ; left out of the
metric digests (with rollout/mismatch_kl, whose name contains it)."""

TIMING = ("seconds", "wait", "tokens_per_s", *DROPPED, *REDEFINED)

# ---- static figures -------------------------------------------------------------------------------


def py_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def package_lines() -> dict[str, int]:
    out: dict[str, int] = {}
    for p in py_files():
        rel = p.relative_to(SRC)
        top = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        out[top] = out.get(top, 0) + lines(p)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def functions() -> list[tuple[str, int]]:
    out = []
    for p in py_files():
        tree = syntax.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{p.relative_to(SRC)}:{node.name}", node.end_lineno - node.lineno + 1))
    return sorted(out, key=lambda x: -x[1])


def trainer_lines() -> int:
    tree = syntax.parse((SRC / "train" / "loop.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    return cls.end_lineno - cls.lineno + 1


def module_name(p: Path) -> str:
    rel = p.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(p: Path, modules: set[str]) -> set[str]:
    """The package's modules `p` imports (any import, lazy ones included)."""
    tree = syntax.parse(p.read_text())
    me = module_name(p)
    pkg = me if p.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from pkg import mod` depends on mod; `from pkg import name` on pkg itself
            subs = [f"{base}.{a.name}" for a in node.names]
            names = [m for m in subs if m in modules] or [base]
            if len(names) < len(subs):
                names.append(base)
        for n in names:
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n and n != me:
                out.add(n)
    return out


def import_circles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), packages counted as their __init__."""
    files = {module_name(p): p for p in py_files()}
    graph = {m: imports(p, set(files)) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


def http_clients() -> list[str]:
    """Modules that build HTTP requests themselves (urllib.request, http.client, requests, httpx)."""
    out = []
    for p in py_files():
        text = p.read_text()
        if any(k in text for k in ("urllib.request", "http.client", "import requests", "import httpx")):
            out.append(str(p.relative_to(SRC)))
    return out


def mypy_share() -> float:
    import tomllib

    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    covered = set()
    for f in files:
        path = ROOT / f
        covered |= set(path.rglob("*.py")) if path.is_dir() else {path}
    total = sum(lines(p) for p in py_files())
    return round(sum(lines(p) for p in py_files() if p in covered) / total, 3)


CHECKED_SETTINGS = (
    "loss.rollout_correction",
    "rollout.async_steps",
    "rollout.top_k",
    "rollout.top_p",
    "loss.autocast",
    "rollout.turn_context",
    "loss.dynamic_sampling",
    "loss.policy_loss",
)
"""Settings whose rules `check_sites` counts."""

RULE_PACKAGES = ("train", "algos", "methods")


def _in(p: Path, packages: tuple[str, ...]) -> bool:
    return p.relative_to(SRC).parts[0] in packages


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """A function's nodes, those of functions nested in it left out."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out


def check_sites() -> dict[str, dict]:
    """Per setting, the functions of train/, algos/ and methods/ that refuse something naming it: a `raise` or
    an `ignored_unless` call, in a function whose own strings name the key. The pipeline's drain is counted as
    the functions that call `drained_at`."""
    out: dict[str, dict] = {}
    for key in (*CHECKED_SETTINGS, "drained_at"):
        sites = []
        for p in py_files():
            if not _in(p, RULE_PACKAGES):
                continue
            for fn in ast.walk(syntax.parse(p.read_text())):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                own = _own_nodes(fn)
                if key == "drained_at":
                    hit = any(isinstance(n, ast.Attribute) and n.attr == key for n in own)
                else:
                    refuses = any(
                        isinstance(n, ast.Raise)
                        or (isinstance(n, ast.Call) and getattr(n.func, "id", None) == "ignored_unless")
                        for n in own
                    )
                    names = any(
                        isinstance(n, ast.Constant) and isinstance(n.value, str) and key in n.value for n in own
                    )
                    hit = refuses and names
                if hit:
                    sites.append(f"{p.relative_to(SRC)}:{fn.name}")
        out[key] = {"sites": len(sites), "modules": len({s.split(":")[0] for s in sites}), "where": sites}
    return out


def getattr_reads() -> int:
    """Lines of the Trainer that read a run part through its `__getattr__` (0 without one)."""
    loop = syntax.parse((SRC / "train" / "loop.py").read_text())
    cls = next(n for n in loop.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in cls.body):
        return 0
    build = syntax.parse((SRC / "train" / "build.py").read_text())
    parts = next(n for n in build.body if isinstance(n, ast.ClassDef) and n.name == "Parts")
    fields = {n.target.id for n in parts.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    own = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self":
                        own.add(x.attr)
    lines = set()
    for n in ast.walk(cls):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            if n.attr in fields - own:
                lines.add(n.lineno)
    return len(lines)


def annotated_share(packages: tuple[str, ...] | None = None) -> dict[str, float]:
    """Share of parameters (self and cls left out) and of returns (`__init__` left out) annotated."""
    params = [0, 0]
    returns = [0, 0]
    for p in py_files():
        if packages is not None and not _in(p, packages):
            continue
        for node in ast.walk(syntax.parse(p.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
            args = [x for x in args if x.arg not in ("self", "cls")]
            params[0] += sum(x.annotation is not None for x in args)
            params[1] += len(args)
            if node.name != "__init__":
                returns[0] += node.returns is not None
                returns[1] += 1
    return {"params": round(params[0] / max(params[1], 1), 3), "returns": round(returns[0] / max(returns[1], 1), 3)}


def mypy_strict_packages() -> list[str]:
    """The packages `make lint` checks with `mypy --strict` (the Makefile's MYPY_STRICT)."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("MYPY_STRICT ="):
            return sorted(Path(p).name for p in line.split("=", 1)[1].split())
    return []


def stage_mechanisms() -> dict[str, object]:
    """The ways a staged verb declares its stages: `train/stages.py: Stages`, and a method spec's own `run`."""
    found = []
    text = {p: p.read_text() for p in py_files()}
    if any("Stages(" in t for t in text.values()):
        found.append("train/stages.py: Stages")
    runs = [
        str(p.relative_to(SRC))
        for p, t in text.items()
        if "SPEC = MethodSpec(" in t and "run=" in t.split("SPEC = MethodSpec(")[1].split("\n")[0]
    ]
    if runs:
        found.append("MethodSpec.run (" + ", ".join(runs) + ")")
    return {"count": len(found), "which": found}


# ---- adding a method ------------------------------------------------------------------------------

METHOD = """
from tempering.algos.advantages import dr_grpo_advantage
from tempering.methods.rl import TrainConfig
from tempering.train.method import Context, Method, MethodSpec, turn_credit


def build(ctx: Context) -> Method:
    credit = turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG)[..., None] * t.valid_NGK)
    return Method(name="scratch", credit=credit)


SPEC = MethodSpec(name="scratch", config=TrainConfig, build=build)
"""

PROBE = """
import sys
from tempering.cli import main
from tempering.methods import register
register("scratch", "scratch_method", "A method from a scratch folder.")
assert main(["--help"]) == 0
assert main(["config", "scratch"]) == 0
sys.exit(main(["scratch", *sys.argv[1:]]))
"""


def add_a_method(model: str, work: Path) -> dict:
    folder = work / "scratch"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scratch_method.py").write_text(METHOD)
    before = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True).stdout
    res = subprocess.run(
        [sys.executable, "-c", PROBE, f"model.name={model}", *TINY_RUN, f"run.out_dir={work / 'scratch_run'}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(folder)},
    )
    after = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True).stdout
    ok = res.returncode == 0 and "scratch" in res.stdout and (work / "scratch_run" / "final" / "config.json").is_file()
    if not ok:
        raise SystemExit(f"the scratch method did not run as a verb:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return {"files": 1, "registry_lines": 1, "package_files_edited": int(before != after)}


TINY_RUN = [
    "task.family=arithmetic",
    "task.args.min_value=0",
    "task.args.max_value=30",
    "task.train_size=40",
    "task.heldout_size=4",
    "rollout.group_size=4",
    "rollout.prompts_per_step=4",
    "rollout.max_new_tokens=4",
    "run.steps=2",
    "run.eval_every=0",
    "run.progress=false",
    "run.tensorboard=false",
]


def files_to_add(method: dict) -> dict[str, dict]:
    """Files written or edited to add each kind of component: the method's measured here (`add_a_method`);
    the others as CONTRIBUTING.md's steps have them (not run here)."""
    return {
        "method": {"files": method["files"], "package_files_edited": method["package_files_edited"], "measured": True},
        "loss": {"files": 1, "package_files_edited": 0, "measured": False, "how": "register_policy_loss in any module"},
        "estimator": {
            "files": 1,
            "package_files_edited": 1,
            "measured": False,
            "how": "a function in algos/credit.py: CREDIT",
        },
        "env": {
            "files": 2,
            "package_files_edited": 1,
            "measured": False,
            "how": "a family module and envs/registry.py",
        },
        "stage": {
            "files": 2,
            "package_files_edited": 2,
            "measured": False,
            "how": "a recipe module and recipes/verbs.py",
        },
    }


# ---- reruns ---------------------------------------------------------------------------------------

RERUN_CASES = [
    "train",
    "train+dynamic_sampling",
    "train+dynamic_sampling+kl_in_reward",
    "train+kl",
    "train+async",
    "train+tcpo",
    "train+leap",
    "train+leap+dynamic_sampling",
    "rgrpo_round",
    "ppo",
    "ppo+head",
    "rft",
    "distill",
    "distill+jsd_topk",
    "direct-opd",
    "direct-opd+two_pairs",
    "tu-opd",
    "expand-compress",
    "cuda-agent",
    "demo",
]


def rerun(src: Path, work: Path, teacher: str, model: str, cases: list[str]) -> dict[str, dict]:
    shutil.rmtree(work / "runs", ignore_errors=True)  # a reused --work: the cases run afresh
    work.mkdir(parents=True, exist_ok=True)
    script = ROOT / "benchmarks" / "architecture_cases.py"  # runs with `src` first on its path
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "2"}
    res = subprocess.run(
        [sys.executable, str(script), str(work / "runs"), teacher, model, json.dumps(RENAMED), ",".join(cases)]
        + [",".join(TIMING)],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    if res.returncode != 0:
        raise SystemExit(f"the reruns with {src} failed:\n{res.stderr[-4000:]}")
    rows = [json.loads(x) for x in res.stdout.splitlines() if x.startswith('{"case"')]
    return {r.pop("case"): r for r in rows}


def warm_start(work: Path) -> tuple[str, str]:
    """A tiny model pre-trained on the cases' sums (some right, some wrong) and an untrained one; those a
    given --work already holds are reused (the warm start is most of a short check's time)."""
    from tempering.models import char_tokenizer, save_policy, tiny_model

    teacher = save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), work / "untrained")
    if (work / "warm" / "final" / "model.safetensors").is_file():
        return str(teacher), str(work / "warm" / "final")
    subprocess.run(
        [sys.executable, "-m", "tempering.cli", "pretrain", "model.name=tiny-xs", "task.family=arithmetic"]
        + ["task.args.min_value=0", "task.args.max_value=30", "task.train_size=700", "task.heldout_size=40"]
        + [
            "run.steps=400",
            "rollout.prompts_per_step=32",
            "run.eval_every=100",
            "run.eval_size=40",
            "run.progress=false",
        ]
        + [f"run.out_dir={work / 'warm'}"],
        check=True,
        capture_output=True,
    )
    return str(teacher), str(work / "warm" / "final")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the git ref the reruns compare with (e.g. the last release)")
    p.add_argument("--after", default=None, help="the git ref compared with it (default: the working tree)")
    p.add_argument("--results", default=str(ROOT / "docs" / "results"))
    p.add_argument(
        "--work",
        default=None,
        help="scratch folder, kept (default: a temporary one, removed); its warm start is reused",
    )
    p.add_argument(
        "--cases", nargs="+", choices=RERUN_CASES, default=None, help="rerun only these cases; writes no results"
    )
    a = p.parse_args()
    cases = a.cases or RERUN_CASES
    sys.path.insert(0, str(ROOT))
    from tempering.experiments import conditions, conditions_text, machine, write_results

    work = Path(a.work or tempfile.mkdtemp(prefix="architecture."))
    start = conditions()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", a.after or "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    before_sha = subprocess.run(["git", "rev-parse", "--short", a.before], cwd=ROOT, capture_output=True, text=True)
    if before_sha.returncode != 0:
        raise SystemExit(f"--before {a.before}: not a git ref of this repository")
    trees = {"before": a.before, **({"after": a.after} if a.after else {})}
    for name, ref in trees.items():
        add = ["git", "worktree", "add", "--detach", str(work / name), ref]
        subprocess.run(add, cwd=ROOT, check=True, capture_output=True)
    try:
        teacher, model = warm_start(work)
        old = rerun(work / "before" / "src", work / "runs_before", teacher, model, cases)
        new = rerun(work / "after" / "src" if a.after else SRC.parent, work / "runs_after", teacher, model, cases)
        added = add_a_method(model, work) if a.cases is None else {}
    finally:
        for name in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / name)], cwd=ROOT, capture_output=True)
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    same = {c: {k: old[c][k] == new[c][k] for k in ("weights", "metrics", "history")} for c in cases}
    if a.cases is not None:
        end = conditions_text(start, conditions())
        print(json.dumps({"before": a.before, "conditions": end, "same": same, "runs": {"before": old, "after": new}}))
        return
    longest = functions()[:10]
    circles = import_circles()
    clients = http_clients()
    data = {
        "command": f"python benchmarks/architecture.py --before {a.before}"
        + (f" --after {a.after}" if a.after else ""),
        "before": before_sha.stdout.strip(),
        "after": commit.strip() + ("" if a.after else " (and the working tree)"),
        "machine": machine(),
        "conditions": {"start": start, "end": conditions()},
        "lines": package_lines(),
        "trainer_lines": trainer_lines(),
        "longest_functions": [{"function": f, "lines": n} for f, n in longest],
        "method_files_touched_to_add_one": added,
        "http_clients": len(clients),
        "http_client_modules": clients,
        "import_circles": len(circles),
        "getattr_reads": getattr_reads(),
        "mypy_strict_packages": mypy_strict_packages(),
        "annotated_share": {"package": annotated_share(), "train, algos, methods": annotated_share(RULE_PACKAGES)},
        "check_sites": check_sites(),
        "stage_mechanisms": stage_mechanisms(),
        "files_to_add": files_to_add(added),
        "import_circle_groups": circles,
        "mypy_covered_share": mypy_share(),
        "metric_renames_mapped": RENAMED,
        "metrics_dropped": list(DROPPED),
        "changed_by_documented_fixes": CHANGED,
        "bit_identical": {c: all(v.values()) for c, v in same.items()},
        "reruns": {c: {"before": old[c], "after": new[c]} for c in RERUN_CASES},
    }
    md = [
        "# Architecture: the package's shape, and reruns before and after",
        "",
        f"`{data['command']}` on {data['machine']}; {conditions_text(start, data['conditions']['end'])}.",
        f"Compared: `{data['before']}` (before) and `{data['after']}` (after).",
        "",
        "## Reruns",
        "",
        "Each case trains 3 steps (the demo: 60 pre-training steps, then 3 GRPO steps) from the same warm",
        "start; a digest of the final weights, of every metric row (timings left out) and of the held-out",
        "history. Metric names mapped before comparing: "
        + ", ".join(f"`{k}` -> `{v}`" for k, v in RENAMED.items())
        + "; left out: "
        + ", ".join(f"`{k}`" for k in DROPPED)
        + " (removed by a documented fix).",
        "",
        "| case | weights | metrics | history | bit-identical | a documented fix changes it |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in RERUN_CASES:
        s = same[c]
        why = "" if data["bit_identical"][c] else CHANGED.get(c, "")  # notes for the --before they were written for
        rounds = new[c].get("extra_rounds", 0)
        if "dynamic_sampling" in c:
            why = f"{why} (extra rounds sampled to refill dropped groups: {rounds})".lstrip()
        md.append(f"| {c} | {s['weights']} | {s['metrics']} | {s['history']} | {data['bit_identical'][c]} | {why} |")
    unexplained = [c for c in RERUN_CASES if not data["bit_identical"][c] and c not in CHANGED]
    md += ["", f"Cases that differ without a documented fix: {', '.join(unexplained) or 'none'}."]
    data["unexplained_differences"] = unexplained
    md += [
        "",
        "## Shape",
        "",
        f"- the Trainer class: {data['trainer_lines']} lines",
        f"- adding a method: {added['files']} file and {added['registry_lines']} registration "
        f"(package files edited: {added['package_files_edited']}); it became a CLI verb, a `tempering config` "
        "entry and trained two steps",
        f"- modules that speak HTTP themselves: {len(clients)} ({', '.join(clients)})",
        f"- import circles between modules: {len(circles)}"
        + (" (" + "; ".join(" <-> ".join(g) for g in circles) + ")" if circles else ""),
        f"- share of the package's lines mypy checks: {data['mypy_covered_share']}; packages under `mypy --strict`: "
        + (", ".join(data["mypy_strict_packages"]) or "none"),
        f"- annotated (parameters, returns): package {data['annotated_share']['package']}, train/algos/methods "
        f"{data['annotated_share']['train, algos, methods']}",
        f"- Trainer lines reading a run part through `__getattr__`: {data['getattr_reads']}",
        f"- ways a staged verb declares stages: {data['stage_mechanisms']['count']} "
        f"({'; '.join(data['stage_mechanisms']['which'])})",
        "",
        "| setting | functions with a rule on it (train, algos, methods) | modules | where |",
        "| --- | --- | --- | --- |",
        *[
            f"| `{k}` | {v['sites']} | {v['modules']} | {', '.join(f'`{w}`' for w in v['where'])} |"
            for k, v in data["check_sites"].items()
        ],
        "",
        "| to add | files | package files edited | measured |",
        "| --- | --- | --- | --- |",
        *[
            f"| {k} | {v['files']} | {v['package_files_edited']} | {'yes' if v['measured'] else 'no: ' + v['how']} |"
            for k, v in data["files_to_add"].items()
        ],
        "",
        "| package | lines |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in data["lines"].items()],
        "",
        "| longest functions | lines |",
        "| --- | --- |",
        *[f"| `{f}` | {n} |" for f, n in longest],
        "",
    ]
    write_results(a.results, "architecture", "\n".join(md), data)
    print("\n".join(md))


if __name__ == "__main__":
    main()
