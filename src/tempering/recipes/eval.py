"""`tempering eval CHECKPOINT --task FAMILY`: pass@1 / pass@k of a model on a split, as a table."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from tempering.config import parse_override
from tempering.envs.base import TaskFamily
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.evaluation import evaluate
from tempering.models import TINY_SIZES, load_policy
from tempering.models.chat import ChatFormat
from tempering.progress import print_eval_table
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.train.checkpoint import list_checkpoints
from tempering.types import Task


def resolve_model_dir(path: str) -> str:
    """A model folder, a checkpoint folder (`step_N/model`) or a run folder (its `final/` or last checkpoint)."""
    if path in TINY_SIZES:
        return path
    p = Path(path)
    for cand in (p, p / "model", p / "final"):
        if (cand / "config.json").is_file():
            return str(cand)
    ckpts = list_checkpoints(p)
    if ckpts:
        return str(ckpts[-1] / "model")
    raise UserError(
        f"{path} holds no model (no config.json, no final/ or checkpoints/); give a model, checkpoint or run folder"
    )


def eval_tasks(family: TaskFamily, split: str, n: int | None, seed: int) -> list[Task]:
    """The tasks to evaluate: `n` of `split`, never one twice. A fixed split (the family knows its
    size) is evaluated whole when `n` is None; asking for more than it holds is an error."""
    size = family.split_size(split)
    if n is None:
        n = size if size is not None else 500
    if size is not None and n > size:
        raise UserError(
            f"the {split} split of {family.name or 'this task family'} has {size} tasks, so --n {n} would "
            f"repeat some: pass --n {size} or less, or leave --n out to evaluate the whole split."
        )
    return family.tasks(split, n, seed=seed)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tempering eval", description="Evaluate a model on a split of a task family.")
    p.add_argument("checkpoint", help="model folder, checkpoint folder, or run folder")
    p.add_argument("--task", default="arithmetic", help="task family (default: arithmetic)")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="task family argument (repeatable)")
    p.add_argument(
        "--split",
        default="heldout",
        help="heldout (default), train, or all (a whole benchmark file, e.g. --task code)",
    )
    p.add_argument(
        "--n", type=int, help="prompts, each used once (default: the whole split if it is a fixed set, else 500)"
    )
    p.add_argument("--k", type=int, default=8, help="samples per prompt for pass@k (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-turns", type=int, default=1)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="also write the metrics as JSON")
    a = p.parse_args(argv)
    args = {}
    for item in a.arg:
        keys, value = parse_override(item)
        args[".".join(keys)] = value
    family = make_family(a.task, **args)
    tasks = eval_tasks(family, a.split, a.n, a.data_seed)
    model, tok = load_policy(resolve_model_dir(a.checkpoint), seed=a.seed)
    sampler = HFSampler(model, tok, seed=a.seed)
    opts = RolloutOptions(sampling=SamplingParams(a.max_new_tokens, a.temperature), max_turns=a.max_turns)
    m = asyncio.run(evaluate(sampler, ChatFormat(tok), family, tasks, opts, k=a.k))
    print_eval_table({a.checkpoint: m}, title=f"{a.task}: {len(tasks)} {a.split} prompts")
    if a.json:
        Path(a.json).write_text(json.dumps(m, indent=2) + "\n")
    return 0
