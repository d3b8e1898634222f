"""tinker-cookbook's RL loop (`tinker_cookbook.rl.train.main`, as it ships) on a tempering task family,
against a local `tempering serve tinker`.

The loop is the cookbook's: its renderer, its rollouts, its advantages (group-centred rewards), its
`importance_sampling` updates through the Tinker API. What it trains on is tempering's: the arithmetic
family's tasks and verifier, through `tempering.integrations.cookbook.TemperingDatasetBuilder`. The
service runs the tiny model under the cookbook's name for its smallest Llama (`role_colon` renderer), so
the same `Config` runs on the real Tinker service by dropping `base_url`.

    python examples/tinker/cookbook_rl_arithmetic.py --out /tmp/cookbook_rl --steps 3

prints each step's mean reward and writes the cookbook's logs (`metrics.jsonl`, per-iteration rollout
summaries) under `--out/log`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from tinker_cookbook.rl import train

from tempering.integrations.cookbook import TemperingDatasetBuilder
from tempering.serve.tinker import cookbook as local

MODEL = "meta-llama/Llama-3.2-1B"
"""The cookbook's name; the service runs `BASE` under it."""
BASE = "tiny-s"
FAMILY = "arithmetic"
FAMILY_ARGS: dict[str, Any] = {"min_value": 0, "max_value": 9, "partial_credit": True}
"""One-digit sums; a wrong number scores its share of right digits."""


def config(
    log_path: Path,
    url: str,
    steps: int,
    seed: int,
    family_args: dict[str, Any] = FAMILY_ARGS,
    batch_size: int = 4,
    group_size: int = 4,
    max_tokens: int = 8,
    learning_rate: float = 3e-3,
    lora_rank: int = 8,
) -> train.Config:
    """The cookbook's RL config: `steps` batches of `batch_size` arithmetic tasks x `group_size` episodes."""
    return train.Config(
        model_name=MODEL,
        renderer_name="role_colon",
        recipe_name="tempering_arithmetic",
        dataset_builder=TemperingDatasetBuilder(
            family=FAMILY,
            family_args=family_args,
            model_name_for_tokenizer=MODEL,
            renderer_name="role_colon",
            batch_size=batch_size,
            group_size=group_size,
            batches=steps,
            seed=seed,
        ),
        base_url=url,
        learning_rate=learning_rate,
        lora_rank=lora_rank,
        max_tokens=max_tokens,
        loss_fn="importance_sampling",
        max_steps=steps,
        eval_every=0,
        save_every=0,
        log_path=str(log_path),
    )


def logged(log_path: Path) -> tuple[list[dict], list[dict]]:
    """The loop's metrics (one record a step) and its rollout summaries, from its log folder."""
    records = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    metrics = [r for r in records if "progress/batch" in r]  # the last record holds the run's token totals
    rollouts = [json.loads(x) for f in sorted(log_path.rglob("train_rollout_summaries.jsonl")) for x in f.open()]
    return metrics, rollouts


def run(
    work: Path, steps: int = 3, seed: int = 0, family_args: dict[str, Any] = FAMILY_ARGS
) -> tuple[list[dict], list[dict]]:
    """Serve, train `steps` steps; the loop's metrics (one record a step) and its rollout summaries."""
    os.environ.update(local.OFFLINE)
    state, log = work / "state", work / "log"
    # the cookbook's loop replaces the root logger's handlers with its own (one writing into `log`):
    # the caller's come back when it ends, so a process that goes on never logs into a removed folder
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with local.serving(state, {MODEL: BASE}, "threads=2", f"seed={seed}") as url:
            local.register_tokenizer(state, MODEL)
            asyncio.run(train.main(config(log, url, steps, seed, family_args)))
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
            h.close()
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)
    return logged(log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="working folder (service state and the loop's logs)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    metrics, _ = run(args.out, args.steps, args.seed)
    for m in metrics:
        print(f"step {m['progress/batch']}: reward {m['env/all/reward/total']:.3f}")


if __name__ == "__main__":
    main()
