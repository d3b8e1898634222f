"""Several task families under one, each task tagged with its member family.

Used where teachers specialise (expand-then-compress): results are reported per member. Tasks are
interleaved across members, so any prefix of a split holds a mix. Each member keeps its own
verifier and its own train / held-out separation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tempering.envs.base import Env, TaskFamily
from tempering.envs.group import GroupReward
from tempering.errors import UserError
from tempering.types import Episode, Task


@dataclass
class MixtureFamily(TaskFamily):
    """`members`: name -> {"family": registered family, "args": {...}, "weight": share of the tasks}."""

    members: dict[str, dict[str, Any]]
    """Member families by the name their tasks carry in `Task.family`."""
    name: str = "mixture"

    def __post_init__(self):
        from tempering.envs.registry import make_family

        if not self.members:
            raise UserError(
                "mixture: give at least one member, e.g. members: {add: {family: arithmetic}, rev: {family: strings, args: {ops: [rev]}}}"
            )
        self.families: dict[str, TaskFamily] = {}
        self.weights: dict[str, float] = {}
        for m, spec in self.members.items():
            if not isinstance(spec, dict) or "family" not in spec:
                raise UserError(f"mixture member {m!r} needs a 'family' (and optionally 'args' and 'weight')")
            unknown = set(spec) - {"family", "args", "weight"}
            if unknown:
                raise UserError(f"mixture member {m!r}: unknown keys {sorted(unknown)}; allowed: family, args, weight")
            if spec["family"] == "mixture":
                raise UserError(f"mixture member {m!r} cannot itself be a mixture")
            self.families[m] = make_family(spec["family"], **spec.get("args", {}))
            self.weights[m] = float(spec.get("weight", 1.0))
            if self.weights[m] <= 0:
                raise UserError(f"mixture member {m!r}: weight must be positive")

    def counts(self, n: int) -> dict[str, int]:
        """How many of `n` tasks each member contributes (largest remainders; deterministic)."""
        total = sum(self.weights.values())
        raw = {m: n * w / total for m, w in self.weights.items()}
        out = {m: int(r) for m, r in raw.items()}
        for m in sorted(raw, key=lambda m: out[m] - raw[m])[: n - sum(out.values())]:
            out[m] += 1
        return out

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        # members built on the same family draw from different streams (seed offset by member position)
        per = {
            m: [replace(t, id=f"{m}/{t.id}", family=m) for t in self.families[m].tasks(split, k, seed=seed + 7919 * i)]
            for i, (m, k) in enumerate(self.counts(n).items())
        }
        out: list[Task] = []
        for i in range(max((len(v) for v in per.values()), default=0)):
            out += [v[i] for v in per.values() if i < len(v)]
        return out

    def make_env(self, task: Task) -> Env:
        if task.family not in self.families:
            raise UserError(f"task {task.id} belongs to no member of this mixture ({', '.join(self.families)})")
        return self.families[task.family].make_env(task)

    def template_keys(self) -> frozenset[str] | None:
        """The keys every member lets a template name (a template serves them all)."""
        sets = [k for k in (f.template_keys() for f in self.families.values()) if k is not None]
        return frozenset.intersection(*sets) if sets else None

    def group_reward(self, name: str) -> GroupReward | None:
        """Each group's reward from the member its task belongs to; None unless every member defines `name`."""
        own = {m: f.group_reward(name) for m, f in self.families.items()}
        if any(fn is None for fn in own.values()):
            return None

        def by_member(episodes: Sequence[Episode]) -> list[float]:
            fn = own[episodes[0].task.family]
            assert fn is not None
            return fn(episodes)

        return by_member
