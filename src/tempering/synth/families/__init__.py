"""Built-in bundle families: parametric terminal tasks that run offline on the documented base.

A family renders a bundle from `Params`: `depth` (how many processing stages, each with its own input
file), `features` (extra requirements, each exercising one more skill and bringing its own fixture),
`op` (which result the core stage asks for) and `domain` (the scenario: file, column and entity names).
Each family writes two independent implementations of its spec: the renderer computes the expected
outputs in-process (they go into the tests), and the oracle solution is a program that reads the
fixtures. Gold verification runs the second against the first.

The six synthesis actions are parameter moves (`mutate`): increase/reduce x in_depth change `depth`,
increase/reduce x in_breadth add or drop a feature, diversify/in_depth changes `op`,
diversify/in_breadth changes `domain`. Every move draws fresh fixture data.
"""

from __future__ import annotations

import json
from importlib import resources

from tempering.envs.terminal.bundle import Bundle
from tempering.synth.families.base import Family, Params, Spec
from tempering.synth.families.filetree import FileTree
from tempering.synth.families.ledger import Ledger
from tempering.synth.families.logscan import LogScan

__all__ = ["Family", "Params", "Spec", "builtin_seeds", "families", "family_of"]


def families() -> dict[str, Family]:
    return {f.name: f for f in (Ledger(), LogScan(), FileTree())}


def builtin_seeds() -> list[Bundle]:
    """The built-in seed bundles (seeds.json: one family configuration each)."""
    table = json.loads(resources.files("tempering.synth").joinpath("seeds.json").read_text())
    fams = families()
    return [fams[s["family"]].render(Params.from_dict(s["params"])) for s in table["seeds"]]


def family_of(bundle: Bundle) -> tuple[Family, Params] | None:
    """The built-in family and parameters a bundle was rendered from, if any."""
    meta = bundle.metadata
    fam = families().get(meta.get("family", ""))
    if fam is None or "params" not in meta:
        return None
    return fam, Params.from_dict(meta["params"])
