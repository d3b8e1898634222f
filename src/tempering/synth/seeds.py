"""What FORGE synthesises from: the `Seed` protocol, and seeds that are bundles.

A seed has a name, skill tags, a skill contract per action (None when the action is impossible from it)
and, when it has one, a built-in deterministic mutator per action. Its pass rate belongs to the policy,
not to the seed: it comes from rollouts or from a file, as a {seed name: rate} table.

Two kinds of seeds implement the protocol: `BundleSeed` (a Harbor bundle; built-in family bundles have
mutators, any bundle can go to an LLM generator) and `tempering.synth.task_seeds.TaskFamilySeed` (a
configuration of a built-in synthetic task family).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol, runtime_checkable

from tempering.envs.terminal.bundle import Bundle, load_bundles
from tempering.errors import UserError
from tempering.synth.families import builtin_seeds, family_of
from tempering.synth.scoring import Action


@dataclass(frozen=True)
class SkillContract:
    """Skills the result of an action must exercise (u = x) and may exercise (u <= x)."""

    required: frozenset[str] = frozenset()
    """Skills the synthesised task must carry."""
    optional: frozenset[str] = frozenset()
    """Skills it may carry (counted for coverage only when needed)."""


@runtime_checkable
class Seed(Protocol):
    """Anything FORGE can act on."""

    @property
    def name(self) -> str: ...

    @property
    def skills(self) -> frozenset[str]: ...

    def contract(self, action: Action) -> SkillContract | None:
        """The skill contract of `action` from this seed, or None if the action is not possible."""

    def mutate(self, action: Action, salt: int = 0) -> Seed:
        """The built-in deterministic mutation (NotImplementedError when the seed has none)."""

    def digest(self) -> str:
        """Content hash: a candidate equal to one already accepted is refused as a duplicate."""


def skill_taxonomy() -> dict[str, str]:
    """{skill tag: one-line description} of the built-in taxonomy (skills.json)."""
    return json.loads(resources.files("tempering.synth").joinpath("skills.json").read_text())["skills"]


class BundleSeed:
    """A bundle as a seed. Built-in family bundles know their exact contract and have mutators."""

    def __init__(self, bundle: Bundle):
        self.bundle = bundle
        self._family = family_of(bundle)

    @property
    def name(self) -> str:
        return self.bundle.name

    @property
    def skills(self) -> frozenset[str]:
        return self.bundle.skills

    def digest(self) -> str:
        """Content hash of the bundle (duplicates of accepted bundles are refused)."""
        return self.bundle.digest()

    @property
    def has_mutator(self) -> bool:
        return self._family is not None

    def contract(self, action: Action) -> SkillContract | None:
        if self._family is not None:
            fam, params = self._family
            after = fam.mutate(params, action)
            return None if after is None else SkillContract(fam.skills(after))
        if action.direction == "in_depth":  # deeper in the same skills
            return SkillContract(self.skills)
        return SkillContract(frozenset(), self.skills)  # broader: the seed's skills become optional

    def mutate(self, action: Action, salt: int = 0) -> BundleSeed:
        if self._family is None:
            raise NotImplementedError(f"bundle {self.name} has no built-in family, so no deterministic mutator")
        fam, params = self._family
        after = fam.mutate(params, action, salt)
        if after is None:
            raise ValueError(f"{action.name} is not possible from {self.name}")
        lineage = {"parent": self.name, "action": action.name}
        return BundleSeed(fam.render(after, lineage))

    def __repr__(self) -> str:
        return f"BundleSeed({self.name})"


def load_seeds(source: str | Path) -> list[BundleSeed]:
    """`builtin`, one bundle folder, or a folder of bundle folders (Harbor, or Terminal-Bench 1). Folders
    that cannot be read, or that Harbor would refuse, are left out with a warning naming each."""
    if str(source) == "builtin":
        return [BundleSeed(b) for b in builtin_seeds()]
    root = Path(source)
    if not root.is_dir():
        raise UserError(f"seed folder {root} does not exist; pass a folder of bundles or `builtin`")
    bundles, rejected = load_bundles(root)
    if not bundles:
        why = "; ".join(f"{k}: {v}" for k, v in rejected.items())
        raise UserError(f"no usable bundle in {root} ({why}); `tempering synth check {root}` shows each")
    if rejected:
        names = "; ".join(f"{k} ({v})" for k, v in sorted(rejected.items()))
        warnings.warn(f"left out {len(rejected)} bundle(s) of {root}: {names}", stacklevel=2)
    return [BundleSeed(b) for b in bundles]


def load_pass_rates(path: str | Path, seeds: list) -> dict[str, float]:
    """A JSON file {seed name: pass rate in [0, 1]} covering every seed."""
    p = Path(path)
    try:
        table = json.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"pass-rate file {p} does not exist") from None
    except json.JSONDecodeError as e:
        raise UserError(f'pass-rate file {p} is not JSON ({e}); write {{"seed name": rate, ...}}') from None
    if not isinstance(table, dict):
        raise UserError(f'pass-rate file {p} must hold one JSON object {{"seed name": rate, ...}}')
    missing = [s.name for s in seeds if s.name not in table]
    if missing:
        raise UserError(
            f"pass-rate file {p} has no rate for seed(s) {', '.join(missing[:5])}"
            + (" ..." if len(missing) > 5 else "")
            + "; add them or measure with a policy"
        )
    out = {}
    for s in seeds:
        v = table[s.name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise UserError(f"pass-rate file {p}: rate of {s.name} must be a number in [0, 1], got {v!r}")
        out[s.name] = float(v)
    return out
