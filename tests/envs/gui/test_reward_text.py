"""LiteGUI's text arithmetic on hand-computed cases (the rewards over actions: tests/envs/gui/test_gui_reward.py)."""

import pytest

from tempering.envs.gui.reward import PLAN_LEVELS, snap_plan_score, token_f1


def test_token_f1_hand_computed():
    # pred {call, mom}, ref {call, mom, now}: P = 1, R = 2/3, F1 = 0.8
    assert token_f1("Call mom", "call mom now") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0
    assert token_f1("x", "") == 0.0
    assert token_f1("a a b", "a b b") == pytest.approx(2 / 3)  # overlap 2 of 3 each side


def test_snap_plan_score_rounds_down_to_the_scale():
    assert PLAN_LEVELS == (0.0, 0.3, 0.5, 0.8, 1.0)
    assert snap_plan_score(0.79) == 0.5 and snap_plan_score(0.3) == 0.3 and snap_plan_score(0.29) == 0.0
    assert snap_plan_score(1.0) == 1.0 and snap_plan_score(-0.2) == 0.0
