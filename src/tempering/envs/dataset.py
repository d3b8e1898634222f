"""User datasets as a task family: rows from JSONL or a Hugging Face `datasets` dataset.

Each row needs a prompt column; every other column reaches the reward functions as a keyword
argument (TRL's convention). Several reward functions may be given with weights (TRL's `reward_funcs`
and `reward_weights`); each is called once per batch of answers, and its values are logged on their own
(`reward/NAME`). The held-out split is a separate file or a hash-based share of the rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.rewards import RewardBatcher, RewardFn, resolve_rewards, total
from tempering.envs.synthetic import in_heldout
from tempering.errors import UserError
from tempering.types import Task


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"dataset file {path} does not exist")
    rows = []
    with path.open() as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{n}: not valid JSON ({e.msg})") from e
            if not isinstance(row, dict):
                raise UserError(f"{path}:{n}: each line must be a JSON object")
            rows.append(row)
    return rows


def load_rows(source: Any) -> list[dict[str, Any]]:
    """Rows from a JSONL path, a `datasets` folder saved with `save_to_disk`, or a `datasets.Dataset`."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.is_dir():
            try:
                import datasets
            except ImportError as e:
                raise UserError("loading a dataset folder needs `pip install 'tempering[data]'`") from e
            return [dict(r) for r in datasets.load_from_disk(str(p))]
        return read_jsonl(p)
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):
        return [dict(r) for r in source]
    if isinstance(source, list):
        return [dict(r) for r in source]
    raise UserError(f"cannot read a dataset from {type(source).__name__}; give a JSONL path or a datasets.Dataset")


class RewardEnv(Env):
    """Scores an answer with the dataset's reward functions: the weighted sum is the score, each
    function's value goes to `info["rewards"]`."""

    def __init__(self, task: Task, batcher: RewardBatcher, threshold: float):
        super().__init__(task)
        self.batcher, self.threshold = batcher, threshold

    async def step(self, action: str) -> StepResult:
        parts = await self.batcher.score(self.task.prompt, action, self.task.meta)
        r = total(self.batcher.rewards, parts)
        ok = r >= self.threshold
        return StepResult(
            score=r, success=ok, done=ok, status="correct" if ok else "incorrect", info={"rewards": parts}
        )


class DatasetFamily(TaskFamily):
    """Tasks from rows; rewards from TRL-style functions.

    reward: a built-in name (`exact`, `numeric`, `regex`, `math`, `boxed`), `package.module:function`,
    a callable, or a list of these; reward_weights: one weight each (default 1). An answer succeeds
    when its weighted reward reaches `success_threshold`.
    """

    def __init__(
        self,
        train: Any,
        reward: str | RewardFn | list = "exact",
        heldout: Any = None,
        prompt_column: str = "prompt",
        heldout_share: float = 0.1,
        success_threshold: float = 1.0,
        name: str = "dataset",
        reward_weights: list[float] | None = None,
    ):
        self.name = name
        self.rewards = resolve_rewards(reward, reward_weights)
        self.batcher = RewardBatcher(self.rewards)
        self.success_threshold = success_threshold
        rows = load_rows(train)
        if not rows:
            where = train if isinstance(train, (str, Path)) else type(train).__name__
            raise UserError(f"dataset {name!r} has no rows ({where}); give a file with one JSON object per line")
        for i, row in enumerate(rows):
            if prompt_column not in row:
                raise UserError(
                    f"dataset {name!r} row {i} has no {prompt_column!r} column (columns: {sorted(row)}); "
                    "set prompt_column to the column holding the prompt"
                )
        tasks = [self._task(r, i, prompt_column) for i, r in enumerate(rows)]
        if heldout is not None:
            self.split = {
                "train": tasks,
                "heldout": [self._task(r, i, prompt_column) for i, r in enumerate(load_rows(heldout))],
            }
        else:
            held = [in_heldout(t.prompt, heldout_share) for t in tasks]
            self.split = {
                "train": [t for t, h in zip(tasks, held) if not h],
                "heldout": [t for t, h in zip(tasks, held) if h],
            }

    def _task(self, row: dict, i: int, prompt_column: str) -> Task:
        meta = {k: v for k, v in row.items() if k != prompt_column}
        return Task(
            id=f"{self.name}:{i}", prompt=str(row[prompt_column]), answer=row.get("answer"), family=self.name, meta=meta
        )

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in self.split:
            raise UserError(f"unknown split {split!r}; use train or heldout")
        pool = self.split[split]
        if n >= len(pool):
            return list(pool)
        return random.Random(seed).sample(pool, n)

    def make_env(self, task: Task) -> Env:
        return RewardEnv(task, self.batcher, self.success_threshold)
