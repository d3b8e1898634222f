"""`tempering synth`: synthesise verified environment bundles at the policy's learning frontier.

tempering synth run --seeds builtin --pass-rates rates.json --out runs/synth method=forge
tempering synth run --seeds builtin-tasks --policy runs/pretrain/final --out runs/synth-configs
tempering synth check DIR                 static checks + gold verification of one bundle, or a table
                                          over a folder of bundles (what loads, runs locally, needs Docker),
                                          and warnings: tests the solution could tamper with
tempering synth export-seeds DIR          write the built-in seed bundles as Harbor folders
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import yaml

from tempering.config import Parser, from_args, parse, print_config
from tempering.envs.terminal.bundle import Bundle, is_task_folder, load_bundles, write_bundle
from tempering.errors import UserError
from tempering.synth.checks import tamper_warnings
from tempering.synth.families import builtin_seeds
from tempering.synth.generators import Generator, LLMGenerator, MutatorGenerator
from tempering.synth.loop import BundleChecker, Checker, Report, SynthConfig, synthesize
from tempering.synth.seeds import load_pass_rates, load_seeds
from tempering.synth.task_seeds import TaskFamilySeed, TaskSeedChecker, load_task_seeds
from tempering.synth.verify import VerifySettings, check_one, make_verifier, short_reason


def _out_dir(path: str) -> Path:
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"output folder {out} exists and is not empty; choose a new folder")
    return out


def _sandbox(kind: str):
    from tempering.sandbox import Sandbox

    return Sandbox(backend=kind)


def run(args) -> int:
    cfg = from_args(args)
    if args.print_config:
        return print_config(cfg)
    out = _out_dir(args.out)
    configs = args.seeds == "builtin-tasks" or args.seeds.endswith(".json")
    seeds = load_task_seeds(args.seeds) if configs else load_seeds(args.seeds)
    if configs and cfg.generator == "llm":
        raise UserError(
            "configurations are synthesised by the built-in mutators; drop generator=llm, or pass bundle seeds"
        )
    if "max_new_tokens" in cfg.model_fields_set and not args.policy:
        raise UserError("max_new_tokens has no effect without --policy (it limits the policy's answers); remove it")
    if cfg.generator == "llm":
        generator: Generator = LLMGenerator(cfg.chat)
    else:
        generator = MutatorGenerator()
        lacking = [s.name for s in seeds if not generator.fits(s)]
        if len(lacking) == len(seeds):
            raise UserError(
                "no seed comes from a built-in family, so the mutators cannot act on them; use "
                "generator=llm with chat.base_url=URL, or --seeds builtin"
            )
    if configs:
        checker: Checker = TaskSeedChecker(cfg.config_checks)
    else:
        checker = BundleChecker(
            make_verifier(cfg.backend, _sandbox(cfg.sandbox) if cfg.backend == "sandbox" else None), cfg.checks
        )
    measure = None
    if args.policy:
        from tempering.synth.measure import PolicyMeasure  # torch: only when a policy is measured

        final = Path(args.policy) / "final"  # a finished run's folder stands for its trained model
        measure = PolicyMeasure.from_model_dir(
            str(final) if (final / "config.json").is_file() else args.policy,
            rollouts=cfg.rollouts,
            tasks=cfg.measure_tasks,
            max_new_tokens=cfg.max_new_tokens,
            sandbox_backend=cfg.sandbox,
        )
        rates = asyncio.run(measure.pass_rates(seeds))
    else:
        rates = load_pass_rates(args.pass_rates, seeds)

    from tempering.progress import progress_bar

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with progress_bar(cfg.target, f"synth {cfg.method}", enabled=not args.no_progress) as bar:
            done = [0]

            def progress(rep: Report) -> None:
                bar.update(
                    {"attempts": rep.attempts, "accepted": len(rep.accepted)}, advance=len(rep.accepted) - done[0]
                )
                done[0] = len(rep.accepted)

            report = asyncio.run(synthesize(seeds, rates, generator, checker, cfg, progress=progress))
        if measure is not None and report.accepted:  # one batch for all accepted results
            for a, r in zip(report.accepted, asyncio.run(measure.many([a.candidate for a in report.accepted]))):
                a.measured = r
        _write_run(tmp, report, cfg, rates)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _print_summary(report, out)
    return 0 if report.accepted else 1


def _write_run(root: Path, report: Report, cfg: SynthConfig, rates: dict[str, float]) -> None:
    rows = []
    for a in report.accepted:
        if isinstance(a.candidate, TaskFamilySeed):
            kind = "config"
        else:
            kind = "bundle"
            write_bundle(a.candidate.bundle, root / "bundles" / a.candidate.name)
        rows.append(
            {
                kind: a.candidate.name,
                "seed": a.seed,
                "action": a.action.name,
                "predicted": a.predicted,
                "score": a.score,
                "attempts": a.attempts,
                "tokens": a.tokens,
                "measured": a.measured,
                "skills": sorted(a.candidate.skills),
            }
        )
    configs = [a.candidate.to_json() for a in report.accepted if isinstance(a.candidate, TaskFamilySeed)]
    if configs:  # itself a valid --seeds file
        (root / "configs.json").write_text(json.dumps(configs, indent=1) + "\n")
    (root / "seed_pass_rates.json").write_text(json.dumps(rates, indent=1) + "\n")
    (root / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    (root / "summary.json").write_text(json.dumps({"summary": report.summary(), "bundles": rows}, indent=1) + "\n")
    (root / "plans.json").write_text(json.dumps(report.plans, indent=1) + "\n")
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in report.events))


def _print_summary(report: Report, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    s = report.summary()
    fmt = lambda v, d=2: "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
    t = Table(title=f"tempering synth: {s['method']} -> {out}")
    t.add_column("accepted results")
    t.add_column("value", justify="right")
    for name, value in [
        ("accepted", str(s["accepted"])),
        ("attempts (per accepted)", f"{s['attempts']} ({fmt(s['attempts_per_accepted'])})"),
        (
            "tokens (per accepted)",
            f"{s['tokens']} ({fmt(s['tokens_per_accepted'], 0)})" + (" est." if s["tokens_estimated"] else ""),
        ),
        ("predicted pass rate, mean", fmt(s["predicted_pass_rate_mean"], 3)),
        ("measured pass rate, mean", fmt(s["measured_pass_rate_mean"], 3)),
        ("measured in [0.25, 0.75]", fmt(s["frontier_share"])),
        ("verifications that could not run", str(s["verification_errors"])),
    ]:
        t.add_row(name, value)
    Console().print(t)


def check(args) -> int:
    args.config, args.schema = None, VerifySettings
    cfg = from_args(args)  # the settings first: a bad key is refused before any bundle is read
    if cfg.backend == "docker" and cfg.sandbox != "auto":
        raise UserError(f"sandbox={cfg.sandbox} has no effect with backend=docker; remove it")
    bundles, rejected = load_bundles(args.bundle)
    verifier = make_verifier(cfg.backend, _sandbox(cfg.sandbox) if cfg.backend == "sandbox" else None)
    rows = [(name, "not loaded", why) for name, why in rejected.items()]
    rows += asyncio.run(_check_all(bundles, verifier, cfg.backend))
    warnings = {b.name: tamper_warnings(b) for b in bundles}
    if is_task_folder(Path(args.bundle)) and len(rows) == 1:
        name, verdict, why = rows[0]
        print(f"{name}: {verdict}" + (f"\n{why}" if why else ""))
        for w in warnings.get(name, []):
            print(f"warning: {w}")
    else:
        _print_check_table(rows, args.bundle, warnings)
    return 0 if all(r[1].startswith("accepted") for r in rows) else 1


async def _check_all(bundles: list[Bundle], verifier, backend: str) -> list[tuple[str, str, str]]:
    async def one(b: Bundle) -> tuple[str, str, str]:
        verdict, stage, why = await check_one(b, verifier, backend)
        if verdict in ("accepted", "rejected"):
            verdict += f" ({stage})" if stage == "static" else f" ({stage}, {verifier.backend})"
        return b.name, verdict, why

    return list(await asyncio.gather(*(one(b) for b in bundles)))


def _print_check_table(rows: list[tuple[str, str, str]], where: str, warnings: dict[str, list]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"tempering synth check {where}")
    cols = ("bundle", "verdict", "why", "warnings") if any(warnings.values()) else ("bundle", "verdict", "why")
    for col in cols:
        t.add_column(col, overflow="fold")
    for name, verdict, why in sorted(rows):  # the reason's first line, then the output's last lines: the cause
        found = warnings.get(name, [])
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        cells = [escape(name), escape(verdict), escape(short_reason(why))]
        t.add_row(*cells, *([escape(str(found[0]) + more) if found else ""] if len(cols) == 4 else []))
    Console().print(t)


def export_seeds(args) -> int:
    out = _out_dir(args.out)
    for b in builtin_seeds():
        write_bundle(b, out / b.name)
    print(f"wrote {len(builtin_seeds())} seed bundles to {out}")
    return 0


FLAGS_NOW_KEYS = {
    "--generator": "generator={}",
    "--base-url": "chat.base_url={}",
    "--model": "chat.model={}",
    "--api-key-env": "chat.api_key_env={}",
    "--backend": "backend={}",
    "--sandbox": "sandbox={}",
    "--max-new-tokens": "max_new_tokens={}",
}
"""`synth run`'s former flags, now config keys."""


def parser() -> Parser:
    ap = Parser(prog="tempering synth", description=__doc__.split("\n")[0])
    p = ap.command(
        "run",
        "synthesise bundles, or task-family configurations, at the policy's frontier. Keys: `tempering config synth`",
        schema="tempering.synth.loop:SynthConfig",
        renamed={
            "--method": "method={}",
            "--target": "target={}",
            "--require-skill": "coverage.{}",
            "--config": "{}",
            **FLAGS_NOW_KEYS,
        },
    )
    p.add_argument(
        "--seeds",
        required=True,
        help="folder of bundle folders, one bundle folder, `builtin` (bundles), "
        "`builtin-tasks` or a .json file (task-family configurations)",
    )
    p.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    rates = p.add_mutually_exclusive_group(required=True)
    rates.add_argument("--pass-rates", help="JSON file {seed name: pass rate of the current policy}")
    rates.add_argument(
        "--policy",
        metavar="MODEL_DIR",
        help="measure pass rates of seeds and accepted results with this "
        "policy (a model folder, a finished run's folder or a tiny size), `rollouts` samples per task",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(fn=run)

    p = ap.command(
        "check",
        "static checks and gold verification of one bundle, or of every bundle in a folder",
        renamed={"--backend": "backend={}", "--sandbox": "sandbox={}"},
    )
    p.add_argument("bundle", help="a bundle folder (Harbor or Terminal-Bench 1), or a folder of them")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="backend=sandbox|docker, sandbox=auto|bwrap|unshare|subprocess",
    )
    p.set_defaults(fn=check)

    p = ap.command("export-seeds", "write the built-in seed bundles as Harbor folders")
    p.add_argument("out", help="folder to write them into (must not exist or be empty)")
    p.set_defaults(fn=export_seeds)
    return ap


def main(argv: list[str]) -> int:
    if argv and argv[0].startswith("--") and argv[0] != "--help":  # the form before `run`
        raise UserError(f"name the sub-command: use tempering synth run {shlex.join(argv)}")
    args = parse(parser(), argv)
    return int(args.fn(args) or 0)
