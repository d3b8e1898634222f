"""Rollout correction against the anchors' own numbers (tests/data/offpolicy_parity.json, written once by
benchmarks/offpolicy_parity.py from verl 0.9.1 and AReaL 1.0.4 called, and TRL 1.16's documented formula):
weights and loss mask agree to 1e-6, and AReaL's decoupled PPO loss with them."""

import json
from pathlib import Path

import pytest
import torch

from tempering.algos.correction import MODES, rollout_correction
from tempering.algos.losses import ppo_clip_loss

DATA = json.loads((Path(__file__).parents[1] / "data" / "offpolicy_parity.json").read_text())
INPUTS = {k: torch.tensor(v) for k, v in DATA["inputs"].items()}


def ours(case):
    return rollout_correction(
        INPUTS["prox_logp"], INPUTS["behav_logp"], INPUTS["mask"], case["mode"], case["cap"], case["floor"]
    )


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: f"{c['mode']}-{c['anchor']}-{c['cap']}-{c['floor']}")
def test_weights_and_mask_match_the_anchor(case):
    w, mask, _ = ours(case)
    assert (w - torch.tensor(case["weights"])).abs().max() <= 1e-6
    assert (mask - torch.tensor(case["loss_mask"])).abs().max() <= 1e-6


def test_the_cases_cover_every_mode_and_are_not_trivial():
    modes = {c["mode"] for c in DATA["cases"]}  # tests/algos/test_losses_parity.py covers every mode and preset
    assert modes <= set(MODES) and len(modes) == 8
    m = INPUTS["mask"]
    for mode in modes:
        touched = [
            bool(((torch.tensor(c["weights"]) != 1) & (m > 0)).any()) for c in DATA["cases"] if c["mode"] == mode
        ]
        assert any(touched), mode  # some weight differs from 1 somewhere: the anchor's rule acted


@pytest.mark.parametrize("case", [c for c in DATA["cases"] if "loss" in c], ids=lambda c: f"cap{c['cap']}")
def test_the_decoupled_loss_matches_areal(case):
    """The proximal policy inside the clip, the behaviour weight outside, normalised by the original count."""
    w, mask, _ = ours(case)
    adv = torch.tensor(case["advantages"])
    loss, _ = ppo_clip_loss(torch.tensor(case["current"]), INPUTS["prox_logp"], adv * w, mask, 0.2, 0.28, 3.0)
    assert float(loss) == pytest.approx(case["loss"], abs=1e-6)
