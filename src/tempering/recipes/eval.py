"""`tempering eval MODEL_OR_RUN`: pass@1 / pass@k of a model on a split, as a table.

Given a run folder (or a checkpoint inside one), the evaluation defaults to that run's own settings,
read from its config.yaml: task family and arguments, data seed and held-out size, token limits,
turns, sampling and chat settings. Flags override them. Heavy imports wait until the arguments are
parsed, so `--help` is instant.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tempering.config import parse_override
from tempering.errors import UserError

if TYPE_CHECKING:
    from tempering.envs.base import TaskFamily
    from tempering.types import Task


def resolve_model_dir(path: str) -> str:
    """A model folder, a checkpoint folder (`step_N/model`) or a run folder (its `final/` or last checkpoint)."""
    from tempering.models import TINY_SIZES, gguf

    if path in TINY_SIZES:
        return path
    p = Path(gguf.resolve(path))
    for cand in (p, p / "model", p / "final"):
        if (cand / "config.json").is_file():
            return str(cand)
    from tempering.train.checkpoint import list_checkpoints

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


def run_config(path: str) -> tuple[Path, dict[str, Any]] | None:
    """The config.yaml of the run a model belongs to: the folder given, or up to three levels up
    (RUN/final, RUN/model, RUN/checkpoints/step_N/model); None for a bare model folder."""
    from tempering.models import TINY_SIZES

    if path in TINY_SIZES:
        return None
    p = Path(path).resolve()
    for d in [p, *p.parents][:4]:
        f = d / "config.yaml"
        if f.is_file():
            data = yaml.safe_load(f.read_text()) or {}
            if isinstance(data, dict) and isinstance(data.get("task"), dict):
                return f, data
    return None


def run_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """What an evaluation takes from a run's config (keys as the flags name them; absent: not set)."""
    task, roll, run, model = (cfg.get(k) or {} for k in ("task", "rollout", "run", "model"))
    pre = cfg.get("train") or {} if not roll else {}  # pretrain's answer limit lives in train.*
    out = {
        "task": task.get("family"),
        "args": dict(task.get("args") or {}),
        "data_seed": task.get("data_seed"),
        "n": task.get("heldout_size"),
        "max_new_tokens": roll.get("max_new_tokens", pre.get("max_new_tokens")),
        "temperature": roll.get("temperature"),
        "top_p": roll.get("top_p"),
        "top_k": roll.get("top_k"),
        "stop": roll.get("stop"),
        "max_turns": run.get("eval_max_turns") or roll.get("max_turns"),
        "max_context_tokens": roll.get("max_context_tokens"),
        "drop_old_turns": roll.get("drop_old_turns"),
        "feedback_template": roll.get("feedback_template"),
        "feedback_templates": roll.get("feedback_templates"),
        "k": run.get("eval_k"),
        "seed": run.get("seed"),
        "chat_template": model.get("use_chat_template"),
        "system_prompt": model.get("system_prompt"),
    }
    return {k: v for k, v in out.items() if v is not None}


FALLBACK = {
    "task": "arithmetic",
    "max_new_tokens": 16,
    "max_turns": 1,
    "temperature": 1.0,
    "k": 8,
    "data_seed": 0,
    "seed": 0,
}
"""Defaults for a bare model folder (no run config to read)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tempering eval",
        description="Evaluate a model on a split of a task family. Given a run folder (or a checkpoint in "
        "one), every setting defaults to the run's own (task, arguments, token limits, turns, sampling, "
        "chat template); flags override them.",
    )
    p.add_argument("checkpoint", help="run folder, checkpoint folder, or model folder")
    p.add_argument("--task", help="task family (default: the run's; arithmetic for a bare model)")
    p.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task family argument (repeatable; added to the run's)",
    )
    p.add_argument(
        "--split",
        default="heldout",
        help="heldout (default), train, or all (a whole benchmark file, e.g. --task code)",
    )
    p.add_argument(
        "--n",
        type=int,
        help="prompts, each used once (default: the run's held-out size; else the whole split if it is a fixed set, else 500)",
    )
    p.add_argument("--k", type=int, help="samples per prompt for pass@k (default: the run's run.eval_k, else 8)")
    p.add_argument("--max-new-tokens", type=int, help="answer token limit (default: the run's, else 16)")
    p.add_argument("--max-turns", type=int, help="turn limit (default: the run's evaluation turns, else 1)")
    p.add_argument("--temperature", type=float, help="sampling temperature of pass@k (default: the run's, else 1)")
    chat = p.add_mutually_exclusive_group()
    chat.add_argument("--chat-template", dest="chat_template", action="store_true", default=None)
    chat.add_argument("--no-chat-template", dest="chat_template", action="store_false", help="(default: the run's)")
    p.add_argument("--system-prompt", help="system message for chat-template models (default: the run's)")
    p.add_argument("--data-seed", type=int, help="seed of the split's draw (default: the run's, else 0)")
    p.add_argument(
        "--seed",
        type=int,
        help="seed of the sampled evaluation (default: the run's run.seed, as its own evaluations, else 0)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the metrics as JSON")
    return p


def settings(a: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The evaluation's settings: the flags given, then the run's config, then `FALLBACK`; and where
    they came from (for the table's title)."""
    found = run_config(a.checkpoint)
    run = run_defaults(found[1]) if found else {}
    if a.task is not None and a.task != run.get("task"):  # another task: the run's task arguments do not apply
        run = {k: v for k, v in run.items() if k not in ("task", "args", "n")}
    flags = {
        k: getattr(a, k)
        for k in (
            "task",
            "n",
            "k",
            "max_new_tokens",
            "max_turns",
            "temperature",
            "chat_template",
            "system_prompt",
            "data_seed",
            "seed",
        )
    }
    out = {**FALLBACK, **run, **{k: v for k, v in flags.items() if v is not None}}
    args = dict(out.get("args", {}))
    for item in a.arg:
        keys, value = parse_override(item)
        args[".".join(keys)] = value
    out["args"] = args
    return out, f"settings of {found[0]}" if found else "defaults for a bare model"


def main(argv: list[str]) -> int:
    a = _parser().parse_args(argv)
    import asyncio
    import json

    from tempering.envs.registry import make_family
    from tempering.evaluation import evaluate
    from tempering.models import load_policy
    from tempering.models.chat import ChatFormat
    from tempering.progress import print_eval_table
    from tempering.rollout.engine import RolloutOptions, check_feedback_templates
    from tempering.rollout.sampler import HFSampler, SamplingParams

    s, source = settings(a)
    family = make_family(s["task"], **s["args"])
    if "feedback_templates" in s:
        check_feedback_templates(s["feedback_templates"], family.template_keys(), family.name or s["task"])
    n = s.get("n")
    size = family.split_size(a.split)
    if a.n is None and n is not None and size is not None:
        n = min(n, size)  # the run's held-out size, capped as the run's own draw was
    tasks = eval_tasks(family, a.split, n, s["data_seed"])
    model, tok = load_policy(resolve_model_dir(a.checkpoint), seed=s["seed"])
    sampler = HFSampler(model, tok, seed=s["seed"])
    sampling = SamplingParams(
        s["max_new_tokens"], s["temperature"], s.get("top_p", 1.0), s.get("top_k", 0), list(s.get("stop", []))
    )
    extra = {k: s[k] for k in ("max_context_tokens", "drop_old_turns", "feedback_templates") if k in s}
    opts = RolloutOptions(sampling=sampling, max_turns=s["max_turns"], **extra)
    fmt_extra = {k: s[k] for k in ("feedback_template", "system_prompt") if k in s}
    fmt = ChatFormat(tok, s.get("chat_template"), **fmt_extra)
    m = asyncio.run(evaluate(sampler, fmt, family, tasks, opts, k=s["k"]))
    print(f"evaluating {a.checkpoint} with the {source}: {s['max_new_tokens']} new tokens, {s['max_turns']} turn(s)")
    print_eval_table({a.checkpoint: m}, title=f"{s['task']}: {len(tasks)} {a.split} prompts")
    if a.json:
        from tempering.runlog import atomic_write_text

        atomic_write_text(Path(a.json), json.dumps(m, indent=2) + "\n")
    return 0
