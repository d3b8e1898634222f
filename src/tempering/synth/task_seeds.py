"""Configurations of the built-in synthetic task families as FORGE seeds.

A seed here is a family configuration (arithmetic: operand range and operators; strings: length
range, operators and alphabet) plus the data seed its tasks are drawn with. The six actions are
parameter moves:

| action | arithmetic | strings |
| --- | --- | --- |
| increase/in_depth | one more digit per operand | strings two characters longer |
| reduce/in_depth | one fewer digit | two characters shorter |
| increase/in_breadth | add the next operator (`+`, `-`, `*`) | add the next transformation |
| reduce/in_breadth | drop the hardest operator | drop the last transformation |
| diversify/in_depth | a fresh draw of instances (no other difficulty-neutral knob) | another alphabet of the same size |
| diversify/in_breadth | swap the hardest operator for the next one | swap the last transformation for the next one |

Every move draws with a fresh data seed. Skills are the operators (`addition`, `reverse`, ...).
Gold verification (`TaskSeedChecker.gold`): the configuration draws enough distinct training tasks,
and on k sampled tasks the family's own environment accepts the reference answer and rejects a
corrupted one.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from tempering.config import Schema
from tempering.envs.arithmetic import ArithmeticFamily
from tempering.envs.strings import TRANSFORMS, StringsFamily
from tempering.envs.synthetic import SyntheticFamily
from tempering.errors import UserError
from tempering.synth.scoring import Action
from tempering.synth.seeds import SkillContract

ARITH_OPS = "+-*"
"""Operators in the order in_breadth adds them (the last one present is the hardest)."""
ARITH_SKILLS = {"+": "addition", "-": "subtraction", "*": "multiplication"}
ARITH_MAX_DIGITS = 6
STRING_OPS = tuple(TRANSFORMS)
"""Transformations in the order in_breadth adds them."""
STRING_SKILLS = {
    "rev": "reverse",
    "up": "uppercase",
    "sort": "sorting",
    "dup": "doubling",
    "rot": "rotation",
    "uniq": "deduplication",
}
STRING_STEP = 2
"""Characters an in_depth move adds or removes."""
STRING_MAX_LEN = 16
LETTERS = "abcdefghijklmnopqrstuvwxyz"

FAMILIES: dict[str, type[SyntheticFamily]] = {"arithmetic": ArithmeticFamily, "strings": StringsFamily}
KNOBS = {"arithmetic": ("min_value", "max_value", "ops"), "strings": ("min_len", "max_len", "ops", "alphabet")}
"""The configuration keys a seed holds per family (others keep the family's defaults)."""


@dataclass(frozen=True)
class TaskFamilySeed:
    """One configuration of a built-in synthetic family, usable as a FORGE seed."""

    family: str
    """`arithmetic` or `strings`."""
    args: tuple[tuple[str, Any], ...]
    """The configuration (sorted key/value pairs of the family's constructor)."""
    data_seed: int = 0
    """Seed of the task draw: the configuration's tasks are `family().tasks(split, n, seed=data_seed)`."""
    parent: str | None = field(default=None, compare=False)
    """Name of the seed this one was synthesised from."""
    action: str | None = field(default=None, compare=False)
    """The action that produced it."""

    @classmethod
    def of(cls, family: str, data_seed: int = 0, **args: Any) -> TaskFamilySeed:
        if family not in FAMILIES:
            raise UserError(f"unknown task family {family!r} for a configuration seed; use one of {sorted(FAMILIES)}")
        unknown = set(args) - set(KNOBS[family])
        if unknown:
            raise UserError(f"{family} configuration: unknown key(s) {sorted(unknown)}; allowed: {list(KNOBS[family])}")
        if "ops" in args and family == "arithmetic":  # one spelling per operator set
            args["ops"] = "".join(o for o in ARITH_OPS if o in args["ops"]) + "".join(set(args["ops"]) - set(ARITH_OPS))
        elif "ops" in args:
            args["ops"] = tuple(args["ops"])
        return cls(family, tuple(sorted(args.items())), int(data_seed))

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.args)

    @property
    def knobs(self) -> dict[str, Any]:
        """Every knob of the family, defaults filled in."""
        return {**_defaults(self.family), **self.config}

    def make_family(self) -> SyntheticFamily:
        """The configured task family (UserError when the configuration is invalid)."""
        return FAMILIES[self.family](**self.config)

    @property
    def name(self) -> str:
        c = self.knobs
        if self.family == "arithmetic":
            core = f"arithmetic[{c['min_value']}..{c['max_value']} {c['ops']}]"
        else:
            core = f"strings[{c['min_len']}..{c['max_len']} {','.join(c['ops'])} {c['alphabet']}]"
        return f"{core}#{self.data_seed}"

    @property
    def level(self) -> int:
        """Difficulty level: digits of the largest operand, or the longest string."""
        c = self.knobs
        return len(str(c["max_value"])) if self.family == "arithmetic" else int(c["max_len"])

    @property
    def skills(self) -> frozenset[str]:
        return _skills(self.family, self.config)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.family, self.args, self.data_seed], default=list).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "family": self.family,
            "args": {k: list(v) if isinstance(v, tuple) else v for k, v in self.args},
            "data_seed": self.data_seed,
        }
        if self.parent:
            out.update(parent=self.parent, action=self.action)
        return out

    def contract(self, action: Action) -> SkillContract | None:
        after = _move(self.family, self.config, action, 0)
        return None if after is None else SkillContract(_skills(self.family, after))

    def mutate(self, action: Action, salt: int = 0) -> TaskFamilySeed:
        after = _move(self.family, self.config, action, salt)
        if after is None:
            raise ValueError(f"{action.name} is not possible from {self.name}")
        h = hashlib.sha256(f"{self.digest()}/{action.name}/{salt}".encode()).digest()
        child = TaskFamilySeed.of(self.family, int.from_bytes(h[:4], "big"), **after)
        return TaskFamilySeed(child.family, child.args, child.data_seed, parent=self.name, action=action.name)

    def __repr__(self) -> str:
        return f"TaskFamilySeed({self.name})"


def _defaults(family: str) -> dict[str, Any]:
    f = FAMILIES[family]()
    return {k: getattr(f, k) for k in KNOBS[family]}


def _skills(family: str, config: dict[str, Any]) -> frozenset[str]:
    table = ARITH_SKILLS if family == "arithmetic" else STRING_SKILLS
    return frozenset(table[o] for o in {**_defaults(family), **config}["ops"])


def _move(family: str, config: dict[str, Any], action: Action, salt: int) -> dict[str, Any] | None:
    """The configuration after `action`, or None when the action is impossible from `config`."""
    c = {**_defaults(family), **config}
    move = _arith_move if family == "arithmetic" else _strings_move
    return move(c, action.projection, action.direction, salt)


def _arith_move(c: dict[str, Any], projection: str, direction: str, salt: int) -> dict[str, Any] | None:
    lo, hi, ops = c["min_value"], c["max_value"], "".join(o for o in ARITH_OPS if o in c["ops"])
    missing = [o for o in ARITH_OPS if o not in ops]
    if direction == "in_depth":
        if projection == "increase":
            return (
                None
                if len(str(hi * 10 + 9)) > ARITH_MAX_DIGITS
                else {**c, "min_value": lo * 10, "max_value": hi * 10 + 9}
            )
        if projection == "reduce":
            return None if hi < 10 else {**c, "min_value": lo // 10, "max_value": hi // 10}
        return dict(c)  # diversify: the same configuration, drawn afresh (the caller changes the data seed)
    order = lambda s: "".join(o for o in ARITH_OPS if o in s)
    if projection == "increase":
        return {**c, "ops": order(ops + missing[0])} if missing else None
    if projection == "reduce":
        return {**c, "ops": ops[:-1]} if len(ops) > 1 else None
    return {**c, "ops": order(ops[:-1] + missing[0])} if missing else None


def _strings_move(c: dict[str, Any], projection: str, direction: str, salt: int) -> dict[str, Any] | None:
    lo, hi, ops, alphabet = c["min_len"], c["max_len"], tuple(c["ops"]), c["alphabet"]
    missing = [o for o in STRING_OPS if o not in ops]
    if direction == "in_depth":
        if projection == "increase":
            return (
                None
                if hi + STRING_STEP > STRING_MAX_LEN
                else {**c, "min_len": lo + STRING_STEP, "max_len": hi + STRING_STEP}
            )
        if projection == "reduce":
            return None if lo - STRING_STEP < 1 else {**c, "min_len": lo - STRING_STEP, "max_len": hi - STRING_STEP}
        n = len(alphabet)  # diversify: another window of the alphabet, same size
        starts = [s for s in range(len(LETTERS) - n + 1) if LETTERS[s : s + n] != alphabet]
        return {**c, "alphabet": LETTERS[starts[salt % len(starts)] :][:n]} if starts else None
    if projection == "increase":
        return {**c, "ops": ops + (missing[0],)} if missing else None
    if projection == "reduce":
        return {**c, "ops": ops[:-1]} if len(ops) > 1 else None
    return {**c, "ops": ops[:-1] + (missing[0],)} if missing else None


def builtin_task_seeds() -> list[TaskFamilySeed]:
    """The default configuration seeds: arithmetic from one to four digits and over three operator sets,
    and strings at two lengths."""
    return [
        TaskFamilySeed.of("arithmetic", min_value=0, max_value=9, ops="+"),
        TaskFamilySeed.of("arithmetic", min_value=10, max_value=99, ops="+"),
        TaskFamilySeed.of("arithmetic", min_value=100, max_value=999, ops="+"),
        TaskFamilySeed.of("arithmetic", min_value=1000, max_value=9999, ops="+"),
        TaskFamilySeed.of("arithmetic", min_value=10, max_value=99, ops="+-"),
        TaskFamilySeed.of("arithmetic", min_value=10, max_value=99, ops="-"),
        TaskFamilySeed.of("arithmetic", min_value=100, max_value=999, ops="-"),
        TaskFamilySeed.of("arithmetic", min_value=0, max_value=9, ops="*"),
        TaskFamilySeed.of("strings", min_len=3, max_len=5, ops=("rev", "up"), alphabet="abcdef"),
        TaskFamilySeed.of("strings", min_len=5, max_len=8, ops=("sort",), alphabet="abcdefgh"),
    ]


def load_task_seeds(source: str | Path) -> list[TaskFamilySeed]:
    """`builtin-tasks`, or a JSON file: a list of {"family", "args", "data_seed"} objects."""
    if str(source) == "builtin-tasks":
        return builtin_task_seeds()
    p = Path(source)
    try:
        items = json.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"configuration file {p} does not exist") from None
    except json.JSONDecodeError as e:
        raise UserError(
            f"configuration file {p} is not JSON ({e}); write a list of "
            '{"family": "arithmetic", "args": {...}, "data_seed": 0}'
        ) from None
    if not isinstance(items, list) or not items:
        raise UserError(f"configuration file {p} must hold a non-empty JSON list of configurations")
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict) or "family" not in it or not isinstance(it.get("args", {}), dict):
            raise UserError(
                f'configuration file {p}, item {i}: write {{"family": ..., "args": {{...}}, "data_seed": 0}}'
            )
        seed = TaskFamilySeed.of(it["family"], it.get("data_seed", 0), **it.get("args", {}))
        seed.make_family()  # an invalid configuration is a UserError naming the knob
        out.append(seed)
    return out


def corrupt(answer: str) -> str:
    """A near miss of `answer`: its last character changed to another of the same kind."""
    if not answer:
        return "0"
    c = answer[-1]
    pool = "0123456789" if c.isdigit() else LETTERS if c.islower() else LETTERS.upper() if c.isupper() else "0"
    other = pool[(pool.index(c) + 1) % len(pool)] if c in pool else pool[0]
    return answer[:-1] + other


class ConfigChecks(Schema):
    """Bounds of the checks of synthesised configurations."""

    tasks: int = Field(64, ge=1, description="Distinct training tasks a configuration must provide (its training set).")
    gold_samples: int = Field(8, ge=1, description="Tasks whose reference answer must pass and corrupted answer fail.")
    max_overlap: float = Field(
        0.9, ge=0, le=1, description="Largest share of a configuration's tasks that its seed also draws."
    )


class TaskSeedChecker:
    """Static checks and gold verification of synthesised configurations (`loop.Checker`)."""

    def __init__(self, cfg: ConfigChecks | None = None):
        self.cfg = cfg or ConfigChecks()

    def static(self, cand: TaskFamilySeed, seed: TaskFamilySeed, action: Action, required: frozenset[str]) -> list[str]:
        if not isinstance(cand, TaskFamilySeed):
            return [f"[type] expected a task-family configuration, got {type(cand).__name__}"]
        try:
            cand.make_family()
        except UserError as e:
            return [f"[config] {e}"]
        problems = []
        if cand.family != seed.family:
            problems.append(f"[family] {action.name} must stay in family {seed.family}, got {cand.family}")
        if not required <= cand.skills:
            problems.append(f"[skills] missing required skill(s) {sorted(required - cand.skills)}")
        if cand == seed:
            problems.append("[edit] the configuration and its draw equal the seed's")
        dl, s0, s1 = cand.level - seed.level, seed.skills, cand.skills
        want = {
            "increase/in_depth": (dl > 0 and s1 == s0, "a higher level with the same skills"),
            "reduce/in_depth": (dl < 0 and s1 == s0, "a lower level with the same skills"),
            "diversify/in_depth": (dl == 0 and s1 == s0, "the same level and skills"),
            "increase/in_breadth": (dl == 0 and s1 > s0, "the same level and more skills"),
            "reduce/in_breadth": (dl == 0 and s1 < s0, "the same level and fewer skills"),
            "diversify/in_breadth": (dl == 0 and len(s1) == len(s0) and s1 != s0, "the same level and other skills"),
        }[action.name]
        if not want[0]:
            problems.append(
                f"[edit] {action.name} must give {want[1]} (level {seed.level} -> {cand.level}, "
                f"skills {sorted(s0)} -> {sorted(s1)})"
            )
        return problems + self._overlap(cand, seed)

    def _overlap(self, cand: TaskFamilySeed, seed: TaskFamilySeed) -> list[str]:
        try:
            mine = {t.id for t in cand.make_family().tasks("train", self.cfg.tasks, seed=cand.data_seed)}
            theirs = {t.id for t in seed.make_family().tasks("train", self.cfg.tasks, seed=seed.data_seed)}
        except UserError:
            return []  # too few tasks: gold verification reports it
        share = len(mine & theirs) / len(mine)
        if share > self.cfg.max_overlap:
            return [f"[overlap] {share:.0%} of the tasks are the seed's (at most {self.cfg.max_overlap:.0%})"]
        return []

    async def gold(self, cand: TaskFamilySeed) -> tuple[bool, str]:
        family = cand.make_family()
        try:
            tasks = family.tasks("train", self.cfg.tasks, seed=cand.data_seed)
        except UserError as e:
            return False, f"the configuration cannot provide {self.cfg.tasks} training tasks: {e}"
        for task in random.Random(cand.data_seed).sample(tasks, min(self.cfg.gold_samples, len(tasks))):
            good = await family.make_env(task).step(str(task.answer))
            if not good.success:
                return False, f"task {task.id}: the verifier rejects the reference answer {task.answer!r}"
            bad = await family.make_env(task).step(corrupt(str(task.answer)))
            if bad.success:
                return False, f"task {task.id}: the verifier accepts the corrupted answer {corrupt(str(task.answer))!r}"
        return True, ""
