"""LiteGUI's dual-level reward and teacher guidance over actions, on hand-computed cases."""

import pytest

from tempering.envs.gui.action import Action, Parsed, parse_output
from tempering.envs.gui.guidance import build_guidance, most_matched, teacher_prompt
from tempering.envs.gui.reward import RewardWeights, action_reward, dual_reward, parse_judge_score, phi, plan_match
from tempering.errors import UserError

click3 = Action("click", target="3")
type2 = Action("type", target="2", value="call mom now")


def test_phi_per_type():
    assert phi(Action("click", target="3"), click3) == 1.0
    assert phi(Action("click", target="4"), click3) == 0.0
    assert phi(Action("type", target="3", value="x"), click3) == 0.0  # type mismatch
    boxes = {"3": (10, 40, 50, 24)}
    assert phi(Action("click", point=(20, 50)), click3, boxes) == 1.0
    assert phi(Action("click", point=(60, 50)), click3, boxes) == 0.0  # x = 60 is past 10 + 50
    assert phi(Action("click", point=(20, 50)), click3) == 0.0  # no boxes: a point cannot match
    assert phi(Action("type", target="2", value="call mom"), type2) == pytest.approx(0.8)
    assert phi(Action("type", target="1", value="call mom now"), type2) == 0.0  # wrong field
    assert phi(Action("select", target="5", value="rome "), Action("select", target="5", value="Rome")) == 1.0
    assert phi(Action("select", target="5", value="Lima"), Action("select", target="5", value="Rome")) == 0.0
    assert phi(Action("scroll", value="down"), Action("scroll", value="down")) == 1.0
    assert phi(Action("scroll", value="up"), Action("scroll", value="down")) == 0.0
    assert phi(Action("wait"), Action("wait")) == 1.0 and phi(Action("wait"), click3) == 0.0


def test_action_reward_is_max_over_all_valid_actions():
    valid = [click3, type2]
    assert action_reward(Action("type", target="2", value="call mom"), valid) == pytest.approx(0.8)
    assert action_reward(click3, valid) == 1.0
    assert action_reward(Action("click", target="9"), valid) == 0.0
    assert action_reward(None, valid) == 0.0
    # single-GT scoring would have given the second valid action 0
    assert phi(type2, valid[0]) == 0.0 and action_reward(type2, valid) == 1.0


def test_plan_match_snaps_down_to_the_scale():
    ref = ["enter Name Ana", "submit"]
    assert plan_match(["enter Name Ana", "submit"], ref) == 1.0
    # recall: (1 + 0)/2 = .5; precision: 1; F1 = 2/3 -> .5
    assert plan_match(["enter Name Ana"], ref) == 0.5
    # pred "enter name" vs "enter Name Ana": F1 = 0.8; vs submit 0 -> recall (0.8 + 1)/2 = .9,
    # precision (0.8 + 1)/2 = .9, F1 = .9 -> .8
    assert plan_match(["enter name", "submit"], ref) == 0.8
    assert plan_match([], ref) == 0.0
    assert plan_match(["fly"], ref) == 0.0
    assert plan_match([], []) == 1.0 and plan_match(["x"], []) == 0.0


def test_parse_judge_score():
    assert parse_judge_score("0.8") == 0.8
    assert parse_judge_score("Score: 1") == 1.0
    assert parse_judge_score("I'd say .5 here") == 0.5
    assert parse_judge_score("0.75") == 0.8  # nearest level
    assert parse_judge_score("7 out of 10") is None
    assert parse_judge_score("garbage") is None
    assert parse_judge_score("") is None


def test_dual_reward_weights():
    out = parse_output('{"reason":"r","subtasks":["enter Name Ana"],"action":{"type":"click","target":"3"}}')
    r = dual_reward(out, [click3], ["enter Name Ana", "submit"], RewardWeights(format=0.2, action=0.5, plan=0.3))
    assert (r.format, r.action, r.plan) == (1.0, 1.0, 0.5)
    assert r.total == pytest.approx(0.2 + 0.5 + 0.3 * 0.5)
    bad = dual_reward(Parsed(False, error="x"), [click3], ["submit"])
    assert bad.total == 0.0 and bad.action == 0.0


def test_guidance_builders():
    valid = [click3, type2]
    assert build_guidance("single", valid) == 'Hint: a correct action is {"type":"click","target":"3"}'
    assert build_guidance("multi", valid) == (
        'Hint: correct actions are {"type":"click","target":"3"} or {"type":"type","target":"2","value":"call mom now"}'
    )
    student = Action("type", target="2", value="call")
    assert most_matched(valid, student) == type2
    assert most_matched(valid, None) == click3
    assert most_matched(valid, Action("scroll", value="up")) == click3  # all zero: first
    assert "call mom now" in build_guidance("most_matched", valid, student)
    assert teacher_prompt("Task: x\nScreen", "Hint: h") == "Task: x\nScreen\nHint: h"
    with pytest.raises(UserError, match="single, multi or most_matched"):
        build_guidance("best", valid)
    with pytest.raises(UserError, match="at least one valid action"):
        build_guidance("single", [])
