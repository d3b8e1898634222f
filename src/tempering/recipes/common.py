"""What the config verbs share on the command line: CONFIG [key=value ...] [--resume RUN] [--overwrite]
[--print-config] (`config.Parser`, the convention every verb and sub-command follows, and --resume).

Overrides may come anywhere, before or after the flags. The arguments are parsed before the verb's
module (and torch) is imported, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tempering.config import (
    Parser,
    Schema,
    anchor_paths,
    as_written,
    build,
    check_keys,
    gone_paths,
    load_config,
    print_config,
    read_data,
)
from tempering.config import parse as parse_args
from tempering.errors import UserError

RESUMABLE = (
    "run.steps",
    "run.eval_every",
    "run.eval_size",
    "run.checkpoint_every",
    "run.keep_checkpoints",
    "run.log_every",
    "run.log_samples",
    "run.progress",
    "run.tensorboard",
)
"""The keys a resume may change: the run's length and what it reports and keeps, never what it trains
on or how (evaluations sample from a stream of their own, so their cadence leaves training's alone)."""


def parser(verb: str, description: str) -> Parser:
    """A config verb's parser (`config.Parser`), with --resume and --overwrite."""
    from tempering.recipes.verbs import VERBS

    name = verb.split()[0]
    p = Parser(
        prog=f"tempering {verb}",
        description=f"{description} Keys: `tempering config {name}`.",
        schema=VERBS[name].schema,
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run exactly from its latest checkpoint, with its own config.yaml; overrides may change "
        f"only {', '.join(RESUMABLE)} (e.g. run.steps=N to train a finished run further)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a run that RUN_DIR (run.out_dir) already holds")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`config.parse`, and --resume and --overwrite are not given together."""
    a = parse_args(p, argv)
    if a.resume and a.overwrite:
        raise UserError("--resume continues a run and --overwrite replaces it; give one of them")
    return a


def resolve(schema: type[Schema], a: argparse.Namespace, out_key: str = "run.out_dir") -> Any:
    """The config of a new run, or of the run being resumed (its own config.yaml plus overrides)."""
    if a.resume:
        run_dir = Path(a.resume)
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
        if a.config:
            raise UserError(f"--resume reads {run_dir / 'config.yaml'}; give no CONFIG file with it")
        saved = load_config(schema, run_dir / "config.yaml", [f"{out_key}={run_dir}"])
        for key, path in gone_paths(read_data(run_dir / "config.yaml")):
            raise UserError(
                f"{run_dir / 'config.yaml'} names {key}={path}, which no longer exists: put it back at that path to "
                f"resume {run_dir}, or start a new run with the file where it is now"
            )
        cfg = load_config(schema, run_dir / "config.yaml", [*a.overrides, f"{out_key}={run_dir}"])
        before, after = _leaves(saved.model_dump(mode="json")), _leaves(cfg.model_dump(mode="json"))
        for key in sorted(before.keys() | after.keys()):
            if before.get(key) != after.get(key) and key not in RESUMABLE:
                value = after.get(key)
                value = value if isinstance(value, str) else json.dumps(value)
                raise UserError(
                    f"{key} cannot change when resuming {run_dir} (only {', '.join(RESUMABLE)} can): start a "
                    f"new run instead: {getattr(a, 'command', 'tempering VERB')} {run_dir / 'config.yaml'} "
                    f"{key}={value} {out_key}=NEW_DIR"
                )
        return cfg
    # paths the run reads are stored absolute: --resume works from any folder, and on a copied run folder
    return build(schema, anchor_paths(read_data(a.config, a.overrides)))


def _leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`a.b.c` -> value, for every value that is not a mapping."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= _leaves(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def cli_main(argv: list[str], verb: str) -> int:
    """A config verb of the registry: parse, resolve its config, run it, print the held-out table."""
    from tempering.recipes.verbs import VERBS, load

    spec = VERBS[verb]
    assert spec.schema is not None and spec.run is not None
    a = parse(parser(verb, spec.help), argv)
    from tempering.recipes.reference import rows_of

    # a typo fails here, before the schema's modules (and torch) are imported
    a.overrides = as_written(rows_of(verb), a.overrides)
    check_keys(rows_of(verb), read_data(None if a.resume else a.config, a.overrides))
    cfg = resolve(load(spec.schema), a)
    if a.print_config:
        return print_config(cfg)
    hist = spec.runner()(cfg, resume=bool(a.resume), overwrite=a.overwrite)
    from tempering.progress import print_eval_table

    tables = {
        k: v
        for k, v in hist.items()
        if isinstance(v, dict) and v and all(isinstance(x, (int, float)) for x in v.values())
    }
    if tables:
        print_eval_table(tables, title=f"held-out results of tempering {verb}")
    out = Path(cfg.run.out_dir) if hasattr(cfg, "run") else None
    if out is not None and (out / "final").is_dir():
        print(f"the trained model: {out / 'final'}")
        print(f"next: tempering eval {out}  (held-out table)  |  tempering view {out}  (curves and samples)")
    return 0
