"""TRL's importance sampling of vLLM's samples converts to the same rollout correction (algos/correction.py)."""

import pytest

from tempering.trl_names import from_trl, hint

BASE = {"use_vllm": True, "max_steps": 10, "lr_scheduler_type": "constant"}  # all else: TRL's defaults


def test_trls_default_is_its_sequence_mask_with_cap_3():
    keys, mapped, missing, _ = from_trl(BASE)
    assert "vllm_importance_sampling_correction" in mapped and not missing
    assert keys["loss.rollout_correction"] == "sequence_mask" and keys["loss.rollout_correction_cap"] == 3.0


@pytest.mark.parametrize(
    "trl,want",
    [
        ({"vllm_importance_sampling_mode": "token_truncate"}, {"loss.rollout_correction": "tis"}),
        (
            {"vllm_importance_sampling_mode": "token_mask", "vllm_importance_sampling_clip_max": 2.0},
            {"loss.rollout_correction": "token_mask", "loss.rollout_correction_cap": 2.0},
        ),
        (
            {"vllm_importance_sampling_mode": "sequence_truncate", "vllm_importance_sampling_clip_min": 0.5},
            {"loss.rollout_correction": "sequence_truncate", "loss.rollout_correction_floor": 0.5},
        ),
        ({"vllm_importance_sampling_correction": False}, {"loss.rollout_correction": "none"}),
    ],
)
def test_each_mode_and_bound_converts(trl, want):
    keys, _, missing, _ = from_trl({**BASE, **trl})
    assert not missing and {k: keys[k] for k in want} == want
    assert "loss.rollout_correction_floor" in keys or "vllm_importance_sampling_clip_min" not in trl


def test_a_band_without_an_upper_bound_is_uncapped():
    keys, _, missing, _ = from_trl({**BASE, "vllm_importance_sampling_clip_max": None})
    assert not missing and keys["loss.rollout_correction_cap"] == float("inf")


def test_the_hint_names_the_keys_to_write():
    msg = hint("vllm_importance_sampling_correction", True, lambda key: True)
    assert msg == (
        "'vllm_importance_sampling_correction' is TRL's name: write loss.rollout_correction=sequence_mask "
        "loss.rollout_correction_cap=3.0"
    )
