"""`tempering kernels list|eval|hacks|synth`: the kernel environment from the command line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from tempering.config import Parser, from_args, parse, print_config
from tempering.errors import UserError


def _problems(arg: str | None, scale: float):
    from tempering.envs.kernels.problems import builtin_problems, load_problems

    if arg in (None, "builtin"):
        return builtin_problems(scale=scale), {}
    return load_problems(arg, scale=scale)


def cmd_list(args) -> int:
    from tempering.envs.kernels.sketch import spec_for
    from tempering.envs.kernels.verifier import available_backends

    problems, skipped = _problems(args.problems, args.scale)
    for p in problems:
        spec = spec_for(p.name) if p.level == "builtin" else None
        print(f"{p.name:28} {spec.kind if spec else '-':8} {p.doc}")
    for path, why in skipped.items():
        print(f"skipped {path}: {why}", file=sys.stderr)
    print("\nbackends:")
    for name, why in available_backends().items():
        print(f"  {name:10} {'available' if not why else why}")
    return 0


def result_line(r) -> str:
    """One finished problem in words: `01_relu: correct, 1.83x eager`, or its status and why."""
    if r.correct:
        return f"{r.problem}: {r.status}" + (f", {r.speedup_eager:.2f}x eager" if r.speedup_eager else "")
    why = r.message.strip().splitlines()[0] if r.message.strip() else ""
    return f"{r.problem}: {r.status}" + (f" ({why[:120]})" if why else "")


def cmd_eval(args) -> int:
    cfg = from_args(args)
    if args.print_config:
        return print_config(cfg)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tempering.envs.kernels.evaluate import evaluate, find_submission, format_table, summarize, write_jsonl
    from tempering.envs.kernels.verifier import KERNEL_IMAGE, KernelVerifier
    from tempering.sandbox import Sandbox

    problems, skipped = _problems(args.problems, args.scale)
    for path, why in skipped.items():
        print(f"skipped {path}: {why}", file=sys.stderr)
    pairs = []
    for p in problems:
        if args.submissions == "reference":
            if p.solution is None:
                raise UserError(
                    f"--submissions reference: problem {p.name} ships no reference submission "
                    "(only the built-in suite does); pass a folder of submissions"
                )
            pairs.append((p, p.solution))
        else:
            folder = Path(args.submissions)
            if not folder.is_dir():
                raise UserError(f"submission folder {folder} does not exist: pass a folder with <problem>.py files")
            path = find_submission(p, folder)
            # undecodable bytes reach the verifier as such, which refuses that one file (bad_submission)
            text = path.read_bytes().decode("utf-8", "surrogateescape") if path else None
            pairs.append((p, text))
    verifier = KernelVerifier(cfg, sandbox=Sandbox(concurrency=args.concurrency, image=KERNEL_IMAGE))
    cols = [
        TextColumn("[bold]kernels eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    ]
    lines = args.no_progress or not sys.stdout.isatty()  # a file or a pipe gets plain lines, not a bar
    done = 0

    def report(r, seconds: float) -> None:
        nonlocal done
        done += 1
        if lines:
            print(f"[{done}/{len(pairs)}] {result_line(r)} ({seconds:.1f} s)", flush=True)
        else:
            bar.update(task, advance=1, last=f"{r.problem}: {r.status}")

    with Progress(*cols, disable=lines, transient=False) as bar:
        task = bar.add_task("eval", total=len(pairs), last="")
        results = asyncio.run(evaluate(verifier, pairs, progress=report))
    summary = summarize(results)
    print(format_table(summary))
    if args.jsonl:
        write_jsonl(args.jsonl, [r.to_dict() for r in results])
        print(f"per-problem rows: {args.jsonl}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(summary, f, indent=2)
        os.replace(tmp, path)
    return 0


def cmd_hacks(args) -> int:
    """Submit every known reward hack (and bad input) and the honest twins; print how each ended; 1 if any
    hack got through or any twin failed."""
    cfg = from_args(args, defaults={"compile_baseline": "off"})
    if args.print_config:
        return print_config(cfg)
    from tempering.envs.kernels.hacks import BAD_INPUTS, CONTROLS, HACKS, PATHS, Hack, credited, run_hack
    from tempering.envs.kernels.verifier import KERNEL_IMAGE, KernelVerifier
    from tempering.sandbox import Sandbox

    only = [w for item in args.only or [] for w in item.split(",") if w]
    paths = [p for item in args.paths.split(",") for p in [item.strip()] if p]
    if not set(paths) <= set(PATHS) or not paths:
        raise UserError(f"--paths {args.paths}: choose from {', '.join(PATHS)} (comma-separated)")
    twins = [Hack(c.name, c.problem, c.submission, ("correct",), kind="honest twin") for c in CONTROLS]
    cases = [h for h in HACKS + BAD_INPUTS + twins if not only or any(word in h.name for word in only)]
    if not cases:
        raise UserError(f"--only {','.join(only)} matches no hack: `tempering kernels hacks` lists them all")
    verifier = KernelVerifier(cfg, sandbox=Sandbox(concurrency=args.concurrency, image=KERNEL_IMAGE))
    runs = [(h, path) for h in cases for path in (paths if h.kind not in ("", "bad input") else ["eval"])]

    async def go():
        return await asyncio.gather(*(run_hack(verifier, h, path=path) for h, path in runs))

    outcomes = asyncio.run(go())
    rows = []
    print(f"{'class':38} {'hack':50} {'path':6} {'static':6} {'status':17} caught")
    for (h, path), (res, caught) in zip(runs, outcomes):
        correct, fast = credited(res)
        rows.append(
            {
                "name": h.name,
                "kind": h.kind or "bad input",
                "source": h.source,
                "path": path,
                "static_checks": h.static_checks,
                "status": res.status,
                "caught": caught,
                "credited_correct": correct,
                "credited_fast": fast,
                "message": res.message[:300],
            }
        )
        twin = h.kind == "honest twin"
        mark = ("passed" if caught else "FAILED") if twin else ("yes" if caught and not correct else "NO")
        print(
            f"{rows[-1]['kind'][:38]:38} {h.name[:50]:50} {path:6} {'on' if h.static_checks else 'off':6} "
            f"{res.status:17} {mark}"
        )
    hacks = [r for r in rows if r["kind"] not in ("bad input", "honest twin")]
    summary = {
        "hacks_total": len(hacks),
        "hacks_caught": sum(r["caught"] for r in hacks),
        "hacks_credited_correct": sum(r["credited_correct"] for r in hacks),
        "hacks_credited_fast": sum(r["credited_fast"] for r in hacks),
        "bad_inputs_total": sum(r["kind"] == "bad input" for r in rows),
        "bad_inputs_handled": sum(r["caught"] for r in rows if r["kind"] == "bad input"),
        "twins_total": sum(r["kind"] == "honest twin" for r in rows),
        "twins_passed": sum(r["caught"] for r in rows if r["kind"] == "honest twin"),
    }
    print(", ".join(f"{k} {v}" for k, v in summary.items()))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump({"summary": summary, "cases": rows}, f, indent=2)
        os.replace(tmp, path)
    missed = [
        f"{r['name']} ({r['path']})"
        for r in rows
        if not r["caught"] or (r["credited_correct"] and r["kind"] != "honest twin")
    ]
    if missed:
        print(f"not caught (or a twin that failed): {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


def cmd_synth(args) -> int:
    cfg = from_args(args)
    if args.print_config:
        return print_config(cfg)
    from tempering.envs.kernels.synth import synthesize

    eval_problems = _problems(args.eval_problems, 1.0)[0]
    manifest = synthesize(cfg, args.out, eval_problems, progress=not args.no_progress)
    print(json.dumps(manifest["stats"], indent=2))
    print(f"{manifest['stats']['kept']} problems in {args.out} (manifest.json)")
    return 0


VERIFY = "tempering.envs.kernels.verifier:VerifyConfig"
RENAMED = {
    "--set": "{}",
    **{f"--{k.replace('_', '-')}": f"{k}={{}}" for k in ("seeds", "timed_runs", "threads", "cache_dir")},
}
"""The flags that set VerifyConfig fields before they became `key=value` overrides."""


def parser() -> Parser:
    ap = Parser(prog="tempering kernels", description=__doc__)
    p = ap.command("list", "list problems (built-in by default) and the backends this machine can run")
    p.add_argument("--problems", default=None, help="problem folder (default: the built-in suite)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply module-level size constants")
    p.set_defaults(fn=cmd_list)

    p = ap.command(
        "eval",
        "verify and time a folder of submissions; KernelBench-style table. Settings: VerifyConfig's fields "
        "(docs/kernels.md), e.g. seeds=3 compile_baseline=off",
        schema=VERIFY,
        renamed={
            **RENAMED,
            **{f"--{k.replace('_', '-')}": f"{k}={{}}" for k in ("compile_baseline", "backend", "device")},
        },
    )
    p.add_argument("--problems", default="builtin", help="problem folder, or `builtin`")
    p.add_argument(
        "--submissions",
        default="reference",
        help="folder of <problem>.py submissions, or `reference` (the built-in reference submissions)",
    )
    p.add_argument("--jsonl", default=None, help="write per-problem rows here")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--scale", type=float, default=1.0, help="size override for the problems (e.g. 0.25)")
    p.add_argument("--concurrency", type=int, default=1, help="verification jobs at once (1: clean timings)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=cmd_eval)

    p = ap.command(
        "hacks",
        "submit every known reward hack to the verifier as configured (VerifyConfig's fields, compile_baseline=off "
        "unless given); exit 1 if any is credited or missed",
        schema=VERIFY,
        renamed=RENAMED,
    )
    p.add_argument(
        "--only", action="append", metavar="WORD[,WORD...]", help="hacks whose name contains one of these words"
    )
    p.add_argument("--json", default=None, help="write every case and the summary here")
    p.add_argument("--concurrency", type=int, default=2, help="verification jobs at once")
    p.add_argument(
        "--paths",
        default="eval",
        help="how each case is submitted: eval (the verifier), train (KernelFamily's reward), agent "
        "(KernelAgentFamily's tool calls); comma-separated",
    )
    p.set_defaults(fn=cmd_hacks)

    p = ap.command(
        "synth",
        "compose operators into fused problems and filter them (CUDA Agent). Settings: "
        "envs/kernels/synth.py's SynthConfig, e.g. n=50 max_ops=3",
        schema="tempering.envs.kernels.synth:SynthConfig",
        renamed={
            f"--{k.replace('_', '-')}": f"{k}={{}}" for k in ("n", "seed", "max_ops", "min_ms", "max_ms", "similarity")
        },
    )
    p.add_argument("--out", required=True, help="output problem folder (with manifest.json)")
    p.add_argument(
        "--eval-problems",
        dest="eval_problems",
        default="builtin",
        help="evaluation problems to de-duplicate against (folder or `builtin`)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=cmd_synth)
    return ap


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)
    return int(args.fn(args) or 0)
