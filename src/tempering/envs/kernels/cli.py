"""`tempering kernels list|eval|hacks|synth`: the kernel environment from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

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


def _verify_config(args):
    from tempering.envs.kernels.verifier import VerifyConfig

    known = {f.name for f in fields(VerifyConfig)}
    values = {
        k: getattr(args, k)
        for k in ("threads", "compile_baseline", "seeds", "timed_runs", "backend", "cache_dir", "device")
        if getattr(args, k, None) is not None
    }
    for item in args.set or []:
        key, eq, val = item.partition("=")
        if not eq or key not in known:
            raise UserError(f"--set {item!r}: expected key=value with key in {', '.join(sorted(known))}")
        try:
            values[key] = json.loads(val)  # numbers, true/false, lists
        except ValueError:
            values[key] = val
    if values.get("compile_baseline", "cached") not in ("cached", "every", "once", "off"):
        raise UserError("--compile-baseline must be cached, every, once or off")
    return VerifyConfig(**values)


def result_line(r) -> str:
    """One finished problem in words: `01_relu: correct, 1.83x eager`, or its status and why."""
    if r.correct:
        return f"{r.problem}: {r.status}" + (f", {r.speedup_eager:.2f}x eager" if r.speedup_eager else "")
    why = r.message.strip().splitlines()[0] if r.message.strip() else ""
    return f"{r.problem}: {r.status}" + (f" ({why[:120]})" if why else "")


def cmd_eval(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tempering.envs.kernels.evaluate import evaluate, find_submission, format_table, summarize, write_jsonl
    from tempering.envs.kernels.verifier import KernelVerifier
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
            pairs.append((p, path.read_text() if path else None))
    verifier = KernelVerifier(_verify_config(args), sandbox=Sandbox(concurrency=args.concurrency))
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
    """Submit every known reward hack (and bad input); print how each ended; 1 if any got through."""
    from tempering.envs.kernels.hacks import BAD_INPUTS, HACKS, credited, run_hack
    from tempering.envs.kernels.verifier import KernelVerifier
    from tempering.sandbox import Sandbox

    cases = [h for h in HACKS + BAD_INPUTS if not args.only or any(word in h.name for word in args.only)]
    if not cases:
        raise UserError(f"--only {' '.join(args.only)} matches no hack: `tempering kernels hacks` lists them all")
    verifier = KernelVerifier(_verify_config(args), sandbox=Sandbox(concurrency=args.concurrency))

    async def go():
        return await asyncio.gather(*(run_hack(verifier, h) for h in cases))

    outcomes = asyncio.run(go())
    rows = []
    print(f"{'class':38} {'hack':50} {'static':6} {'status':17} caught")
    for h, (res, caught) in zip(cases, outcomes):
        correct, fast = credited(res)
        rows.append(
            {
                "name": h.name,
                "kind": h.kind or "bad input",
                "source": h.source,
                "static_checks": h.static_checks,
                "status": res.status,
                "caught": caught,
                "credited_correct": correct,
                "credited_fast": fast,
                "message": res.message[:300],
            }
        )
        mark = "yes" if caught and not correct else "NO"
        print(
            f"{rows[-1]['kind'][:38]:38} {h.name[:50]:50} {'on' if h.static_checks else 'off':6} {res.status:17} {mark}"
        )
    hacks = [r for r in rows if r["kind"] != "bad input"]
    summary = {
        "hacks_total": len(hacks),
        "hacks_caught": sum(r["caught"] for r in hacks),
        "hacks_credited_correct": sum(r["credited_correct"] for r in hacks),
        "hacks_credited_fast": sum(r["credited_fast"] for r in hacks),
        "bad_inputs_total": len(rows) - len(hacks),
        "bad_inputs_handled": sum(r["caught"] for r in rows if r["kind"] == "bad input"),
    }
    print(", ".join(f"{k} {v}" for k, v in summary.items()))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump({"summary": summary, "cases": rows}, f, indent=2)
        os.replace(tmp, path)
    missed = [r["name"] for r in rows if not r["caught"] or r["credited_correct"]]
    if missed:
        print(f"not caught: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


def cmd_synth(args) -> int:
    from tempering.envs.kernels.synth import SynthConfig, synthesize

    cfg = SynthConfig(
        n=args.n,
        seed=args.seed,
        min_ms=args.min_ms,
        max_ms=args.max_ms,
        similarity=args.similarity,
        max_ops=args.max_ops,
    )
    eval_problems = _problems(args.eval_problems, 1.0)[0]
    manifest = synthesize(cfg, args.out, eval_problems, progress=not args.no_progress)
    print(json.dumps(manifest["stats"], indent=2))
    print(f"{manifest['stats']['kept']} problems in {args.out} (manifest.json)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tempering kernels", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("list", help="list problems (built-in by default) and the backends this machine can run")
    p.add_argument("--problems", default=None, help="problem folder (default: the built-in suite)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply module-level size constants")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("eval", help="verify and time a folder of submissions; KernelBench-style table")
    p.add_argument("--problems", default="builtin", help="problem folder, or `builtin`")
    p.add_argument(
        "--submissions",
        default="reference",
        help="folder of <problem>.py submissions, or `reference` (the built-in reference submissions)",
    )
    p.add_argument("--jsonl", default=None, help="write per-problem rows here")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--scale", type=float, default=1.0, help="size override for the problems (e.g. 0.25)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for candidate and baselines")
    p.add_argument(
        "--compile-baseline", dest="compile_baseline", default=None, help="cached (default) | every | once | off"
    )
    p.add_argument("--seeds", type=int, default=None, help="correctness trials with get_inputs()")
    p.add_argument("--timed-runs", dest="timed_runs", type=int, default=None, help="timed runs per model")
    p.add_argument("--backend", default=None, help="force a backend (c, torch_ext, cuda, triton)")
    p.add_argument("--device", default=None, help="cpu or cuda")
    p.add_argument("--cache-dir", dest="cache_dir", default=None, help="build cache folder")
    p.add_argument("--concurrency", type=int, default=1, help="verification jobs at once (1: clean timings)")
    p.add_argument("--set", action="append", help="any VerifyConfig field, key=value")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("hacks", help="submit every known reward hack; exit 1 if any is credited or missed")
    p.add_argument("--only", nargs="*", default=None, help="hacks whose name contains one of these words")
    p.add_argument("--json", default=None, help="write every case and the summary here")
    p.add_argument("--concurrency", type=int, default=2, help="verification jobs at once")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for candidate and baselines")
    p.add_argument("--seeds", type=int, default=None, help="correctness trials with get_inputs()")
    p.add_argument("--timed-runs", dest="timed_runs", type=int, default=None, help="timed runs per model")
    p.add_argument("--cache-dir", dest="cache_dir", default=None, help="build cache folder")
    p.add_argument("--set", action="append", help="any VerifyConfig field, key=value")
    p.set_defaults(fn=cmd_hacks, compile_baseline="off")

    p = sub.add_parser("synth", help="compose operators into fused problems and filter them (CUDA Agent)")
    p.add_argument("--out", required=True, help="output problem folder (with manifest.json)")
    p.add_argument("--n", type=int, default=20, help="candidate compositions to try")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-ops", dest="max_ops", type=int, default=5, help="operators per problem (1-5)")
    p.add_argument("--min-ms", dest="min_ms", type=float, default=1.0, help="eager time window, low end")
    p.add_argument("--max-ms", dest="max_ms", type=float, default=100.0, help="eager time window, high end")
    p.add_argument("--similarity", type=float, default=0.9, help="drop problems this AST-similar to an eval problem")
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
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)
