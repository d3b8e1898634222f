"""User datasets as a task family: rows from JSONL, a JSON array, CSV, parquet or a Hugging Face
`datasets` dataset (a folder saved with `save_to_disk`: its `train` split, or its only one).

Each row needs a prompt column: text, or TRL's conversational format (a list of `{"role", "content"}`
messages, a system message allowed), which goes through the model's chat template. Every other column
reaches the reward functions as a keyword argument (TRL's convention); a `completion` column (TRL's
prompt-completion format, text or an assistant message) is the reference answer of the built-in
rewards when there is no `answer` column, and, as in TRL, is not passed to your functions. Several
reward functions may be given with weights (TRL's `reward_funcs` and `reward_weights`); each is called
once per batch of answers, and its values are logged on their own (`reward/NAME`). The held-out split
is a separate file or a share of the distinct prompts.

verl's rows (`data_source`, `prompt` as chat messages, `ability`, `reward_model: {style, ground_truth}`,
`extra_info`) read as they are: `reward_model.ground_truth` is the row's answer, and a verl
`compute_score` reward gets `data_source`, the ground truth and `extra_info` (`rewards.VerlReward`).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.rewards import (
    DEFAULT_REWARD_TIMEOUT,
    RewardBatcher,
    RewardFn,
    completion_text,
    resolve_rewards,
    total,
)
from tempering.errors import UserError
from tempering.models.chat import Conversation
from tempering.types import Task

ROLES = ("system", "user", "assistant", "tool")

NOT_PASSED = ("completion",)
"""Columns TRL does not pass to reward functions (the completion being judged takes their place)."""


def _hub_hint(path: Path) -> str:
    """For a name such as `openai/gsm8k`: how to give a hub dataset without a download at run time."""
    name = str(path)
    if path.suffix or name.startswith((".", "/")) or name.count("/") != 1:
        return ""
    return (
        f"; {name!r} looks like a Hugging Face hub name, and runs read no hub: save it once as a folder, "
        f"`python -c \"import datasets; datasets.load_dataset('{name}', split='train').save_to_disk('data/"
        f"{path.name}')\"` (add the config name if it has several, e.g. 'main'; with HF_DATASETS_OFFLINE=1 "
        f"it reads a copy already in the local hub cache), then give train=data/{path.name}"
    )


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return _read_file(Path(path))[0]


FORMATS = "JSONL, a JSON array of objects, CSV or parquet"


def _read_file(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of a data file and where each is (`file:LINE` or `file: row I`): parquet (by its magic
    bytes, whatever the name), CSV (`.csv`), a JSON array of objects, or JSONL."""
    if not path.is_file():
        raise UserError(f"dataset file {path} does not exist{_hub_hint(path)}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic == b"PAR1":
        return _read_parquet(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x}); read as {FORMATS}: save it as UTF-8"
        ) from None
    if path.suffix.lower() in (".csv", ".tsv"):
        return _read_csv(path, text)
    if text.lstrip().startswith("["):
        return _read_json_array(path, text)
    rows, where = [], []
    for n, text_line in enumerate(text.splitlines(), start=1):
        if not text_line.strip():
            continue
        try:
            row = json.loads(text_line)
        except json.JSONDecodeError as e:
            raise UserError(
                f"{path}:{n}: not valid JSON ({e.msg}); the file is read as JSONL (one object a line)"
            ) from e
        if not isinstance(row, dict):
            raise UserError(f"{path}:{n}: each line must be a JSON object")
        rows.append(row)
        where.append(f"{path}:{n}")
    return rows, where


def _read_json_array(path: Path, text: str) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); a JSON array of objects was expected") from e
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UserError(f"{path}: row {i} of the JSON array is a {type(row).__name__}; each must be an object")
    return rows, [f"{path}: row {i}" for i in range(len(rows))]


def _read_csv(path: Path, text: str) -> tuple[list[dict[str, Any]], list[str]]:
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text), dialect="excel-tab" if path.suffix.lower() == ".tsv" else "excel")
    rows, where = [], []
    for row in reader:
        if None in row:
            raise UserError(f"{path}:{reader.line_num}: more fields than the header's {len(reader.fieldnames or [])}")
        rows.append(dict(row))
        where.append(f"{path}:{reader.line_num}")
    return rows, where


def _read_parquet(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise UserError(f"reading {path} (parquet) needs pyarrow: `pip install 'tempering[data]'`") from e
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow's own errors (a damaged file)
        raise UserError(f"{path} is not a readable parquet file ({type(e).__name__}: {e})") from None
    return rows, [f"{path}: row {i}" for i in range(len(rows))]


def load_rows(source: Any) -> list[dict[str, Any]]:
    """Rows from a data file (JSONL, a JSON array, CSV or parquet), a `datasets` folder saved with
    `save_to_disk`, or a `datasets.Dataset`."""
    return _load(source, "dataset")[0]


def _load(source: Any, name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and, for each, where it is in error messages (`file.jsonl:LINE: row I` or `row I`)."""
    if isinstance(source, (str, Path)) and not Path(source).is_dir():
        rows, where = _read_file(Path(source))
        return rows, [f"{w}: row {i}" if ": row " not in w else w for i, w in enumerate(where)]
    rows = _load_other(source)
    origin = source if isinstance(source, (str, Path)) else type(source).__name__
    return rows, [f"dataset {name!r} ({origin}) row {i}" for i in range(len(rows))]


def _load_other(source: Any) -> list[dict[str, Any]]:
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.is_dir():
            try:
                import datasets
            except ImportError as e:
                raise UserError("loading a dataset folder needs `pip install 'tempering[data]'`") from e
            try:
                loaded = datasets.load_from_disk(str(p))
            except FileNotFoundError as e:
                raise UserError(
                    f"{p} is a folder but not a dataset saved with `save_to_disk` ({e}); give such a folder or a "
                    f"data file ({FORMATS})"
                ) from e
            if isinstance(loaded, datasets.DatasetDict):
                if len(loaded) == 1 or "train" in loaded:  # as TRL's scripts take dataset[train_split]
                    loaded = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
                else:
                    raise UserError(
                        f"{p} holds several splits ({', '.join(loaded)}) and none is named train; give one of "
                        f"them, e.g. train={p / next(iter(loaded))}"
                    )
            return [dict(r) for r in loaded]
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):
        return [dict(r) for r in source]
    if isinstance(source, list):
        return [dict(r) for r in source]
    raise UserError(
        f"cannot read a dataset from {type(source).__name__}; give a data file ({FORMATS}) or a datasets.Dataset"
    )


def _messages(value: Any, where: str, column: str) -> list[dict[str, Any]]:
    """A column in TRL's conversational format, checked: each message a {role, content} with text."""
    if not value:
        raise UserError(f"{where}: {column} is an empty list of messages")
    out = []
    for k, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise UserError(
                f"{where}: message {k} of {column} is {str(m)[:80]!r}; each message is "
                '{"role": ..., "content": ...} (TRL\'s conversational format)'
            )
        if m["role"] not in ROLES:
            raise UserError(f"{where}: message {k} of {column} has role {m['role']!r}; use one of {', '.join(ROLES)}")
        if not isinstance(m["content"], str):
            raise UserError(
                f"{where}: message {k} of {column} has {type(m['content']).__name__} content; tempering's "
                "policies read text, so give the content as a string"
            )
        out.append({"role": m["role"], "content": m["content"]})
    return out


def in_share(key: str) -> int:
    """A prompt's place in the held-out order: a hash, so the split does not depend on row order."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def heldout_count(distinct: int, share: float) -> int:
    """How many distinct prompts `share` holds out: share x distinct, rounded to the nearest (halves
    up), at least one when the share is positive, never all of them."""
    if share <= 0 or distinct < 2:
        return 0
    return min(max(int(share * distinct + 0.5), 1), distinct - 1)


class RewardEnv(Env):
    """Scores an answer with the dataset's reward functions: the weighted sum is the score, each
    function's value goes to `info["rewards"]`."""

    def __init__(self, task: Task, batcher: RewardBatcher, threshold: float):
        super().__init__(task)
        self.batcher, self.threshold = batcher, threshold

    async def step(self, action: str) -> StepResult:
        columns = {k: v for k, v in self.task.meta.items() if k not in NOT_PASSED}
        parts, logged = await self.batcher.score_logged(self.task.prompt, action, columns, self.task.answer)
        r = total(self.batcher.rewards, parts)
        ok = r >= self.threshold
        return StepResult(
            score=r, success=ok, done=ok, status="correct" if ok else "incorrect", info={"rewards": parts, **logged}
        )


class DatasetFamily(TaskFamily):
    """Tasks from rows; rewards from TRL-style functions (or verl's `compute_score`).

    train: the rows: a data file (JSONL, a JSON array of objects, CSV or parquet, verl's included), a
    `datasets` folder saved with `save_to_disk`, or a list of dicts; reward: a built-in name (`exact`, `numeric`, `regex`, `math`, `boxed`), `package.module:function`,
    `./file.py:function` (`./file.py` alone: its `compute_score`), a callable, or a list of these; reward_weights: one weight each (default 1).
    An answer succeeds when its weighted reward reaches `success_threshold`. heldout_share: the share
    of the distinct prompts held out (rounded to the nearest count, at least one); heldout: held-out rows from a file of
    their own instead. prompt_column: the column holding the prompt. name: the family's name in task ids
    and messages. reward_timeout: seconds a reward function may take on one batch (the run's
    `task.reward_timeout` sets it).
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
        reward_timeout: float | None = DEFAULT_REWARD_TIMEOUT,
    ):
        self.name = name
        if not 0 <= heldout_share < 1:
            raise UserError(f"heldout_share={heldout_share} must be in [0, 1)")
        self.rewards = resolve_rewards(reward, reward_weights)
        self.batcher = RewardBatcher(self.rewards, reward_timeout)
        self.success_threshold = success_threshold
        self.prompt_column = prompt_column
        rows, places = _load(train, name)
        if not rows:
            where = train if isinstance(train, (str, Path)) else type(train).__name__
            raise UserError(f"dataset {name!r} has no rows ({where}); give a data file ({FORMATS}) with rows")
        tasks = [self._task(r, i, at) for i, (r, at) in enumerate(zip(rows, places))]
        if heldout is not None:
            held_rows, held_places = _load(heldout, name)
            self.split = {
                "train": tasks,
                "heldout": [self._task(r, i, at, "heldout") for i, (r, at) in enumerate(zip(held_rows, held_places))],
            }
        else:
            distinct = sorted({t.prompt for t in tasks}, key=in_share)
            held = set(distinct[: heldout_count(len(distinct), heldout_share)])
            self.split = {
                "train": [t for t in tasks if t.prompt not in held],
                "heldout": [t for t in tasks if t.prompt in held],
            }

    @property
    def reward_timeout(self) -> float | None:
        return self.batcher.timeout

    @reward_timeout.setter
    def reward_timeout(self, seconds: float | None) -> None:
        self.batcher.timeout = seconds

    def _task(self, row: dict, i: int, at: str, split: str = "") -> Task:
        col = self.prompt_column
        if col not in row:
            hint = "set prompt_column to the column holding the prompt"
            if "messages" in row:
                hint = (
                    "this is TRL's language-modeling format (for SFT); GRPO needs the prompt alone: give a "
                    "'prompt' column (the messages before the answer) and, optionally, a 'completion' column"
                )
            elif {"chosen", "rejected"} <= set(row):
                hint = "this is TRL's preference format (for DPO); GRPO needs a 'prompt' column"
            raise UserError(f"{at} has no {col!r} column (columns: {sorted(row)}); {hint}")
        for media in ("images", "image"):
            if row.get(media) not in (None, []):
                raise UserError(
                    f"{at} has an {media!r} column (TRL's vision format); tempering's policies read text only: "
                    "remove the column to train on the text"
                )
        value = row[col]
        if isinstance(value, str):
            prompt: str = value
        elif isinstance(value, list):
            prompt = Conversation(_messages(value, at, col))
        else:
            raise UserError(
                f"{at}: {col} is {str(value)[:60]!r} ({type(value).__name__}); give a string or a list of "
                '{"role": ..., "content": ...} messages (TRL\'s conversational format)'
            )
        answer = row.get("answer")
        truth = row.get("reward_model")
        if answer is None and isinstance(truth, dict) and truth.get("ground_truth") is not None:
            answer = truth["ground_truth"]  # verl's rows: the built-in rewards compare with it
        if answer is None and row.get("completion") is not None:
            done = row["completion"]
            if isinstance(done, list):
                _messages(done, at, "completion")
            elif not isinstance(done, (str, dict)):
                raise UserError(f"{at}: completion is a {type(done).__name__}; give a string or assistant messages")
            answer = completion_text(done)
        meta = {k: v for k, v in row.items() if k != col}
        tid = f"{self.name}:{split}:{i}" if split else f"{self.name}:{i}"
        return Task(id=tid, prompt=prompt, answer=answer, family=self.name, meta=meta)

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in self.split:
            raise UserError(f"unknown split {split!r}; use train or heldout")
        pool = self.split[split]
        if n >= len(pool):
            return list(pool)
        return random.Random(seed).sample(pool, n)

    def split_size(self, split: str) -> int | None:
        return len(self.split[split]) if split in self.split else None

    def make_env(self, task: Task) -> Env:
        return RewardEnv(task, self.batcher, self.success_threshold)
