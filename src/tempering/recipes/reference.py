"""`tempering config RECIPE`: the config reference (every key, its type, default and meaning)."""

from __future__ import annotations

import argparse
import importlib

from tempering.config import describe

RECIPES = {
    "train": "tempering.recipes.rl:TrainConfig",
    "pretrain": "tempering.recipes.pretrain:PretrainConfig",
    "distill": "tempering.recipes.distill:DistillConfig",
    "direct-opd": "tempering.recipes.direct_opd:DirectOPDConfig",
    "rgrpo": "tempering.recipes.rgrpo:RGRPOConfig",
    "tu-opd": "tempering.recipes.tu_opd:TUOPDConfig",
    "expand-compress": "tempering.recipes.expand_compress:ExpandCompressConfig",
}


def schema(recipe: str):
    mod, _, cls = RECIPES[recipe].partition(":")
    return getattr(importlib.import_module(mod), cls)


def markdown(recipe: str) -> str:
    rows = describe(schema(recipe))
    out = [f"### `tempering {recipe}`", "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    out += [f"| `{k}` | {t} | `{d}` | {doc} |" for k, t, d, doc in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tempering config", description="Print the config reference of a recipe.")
    p.add_argument("recipe", nargs="?", choices=sorted(RECIPES), help="recipe (default: all)")
    a = p.parse_args(argv)
    for r in [a.recipe] if a.recipe else sorted(RECIPES):
        print(markdown(r))
    return 0
