"""The training methods, each one module: its config section, scorers, credit, loss and state.

`METHODS` maps a method's name to its builder `(Context) -> Method` (see `train/method.py`). A new
method is one module here and one entry below; a method defined elsewhere needs neither: give its
builder to `Trainer` (or to `tempering.recipes.train.train(cfg, method=...)`).
"""

from __future__ import annotations

from tempering.methods import direct_opd, opd, rl, tu_opd
from tempering.train.method import MethodBuilder

METHODS: dict[str, MethodBuilder] = {
    "rl": rl.build,
    "distill": opd.build,
    "direct-opd": direct_opd.build,
    "tu-opd": tu_opd.build,
}

__all__ = ["METHODS"]
