"""`tempering eval CHECKPOINT --task FAMILY`: held-out pass@1 / pass@k of a model, as a table."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from tempering.config import parse_override
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.evaluation import evaluate
from tempering.models import TINY_SIZES, load_policy
from tempering.models.chat import ChatFormat
from tempering.progress import print_eval_table
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.train.checkpoint import list_checkpoints


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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tempering eval", description="Evaluate a model on a task family's held-out split."
    )
    p.add_argument("checkpoint", help="model folder, checkpoint folder, or run folder")
    p.add_argument("--task", default="arithmetic", help="task family (default: arithmetic)")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="task family argument (repeatable)")
    p.add_argument("--n", type=int, default=500, help="held-out prompts (default 500)")
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
    tasks = family.tasks("heldout", a.n, seed=a.data_seed)
    model, tok = load_policy(resolve_model_dir(a.checkpoint), seed=a.seed)
    sampler = HFSampler(model, tok, seed=a.seed)
    opts = RolloutOptions(sampling=SamplingParams(a.max_new_tokens, a.temperature), max_turns=a.max_turns)
    m = asyncio.run(evaluate(sampler, ChatFormat(tok), family, tasks, opts, k=a.k))
    print_eval_table({a.checkpoint: m}, title=f"{a.task}: {len(tasks)} held-out prompts")
    if a.json:
        Path(a.json).write_text(json.dumps(m, indent=2) + "\n")
    return 0
