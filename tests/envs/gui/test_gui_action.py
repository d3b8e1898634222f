"""The action format: well-formed outputs parse; malformed ones are format failures, never exceptions."""

import json
import random

import pytest

from tempering.envs.gui.action import Action, format_output, parse_output


def out(action: dict, **extra) -> str:
    return json.dumps({"reason": "r", "subtasks": ["a", "b"], "action": action, **extra})


def test_well_formed_actions():
    p = parse_output(out({"type": "click", "target": "#3"}))
    assert p.ok and p.action == Action("click", target="3") and p.subtasks == ["a", "b"] and p.reason == "r"
    assert parse_output(out({"type": "click", "target": 3})).action == Action("click", target="3")
    assert parse_output(out({"type": "click", "target": [12, 40.5]})).action == Action("click", point=(12.0, 40.5))
    assert parse_output(out({"type": "type", "target": "2", "value": "Ana"})).action == Action("type", "2", "Ana")
    assert parse_output(out({"type": "select", "target": "4", "value": "M"})).action == Action("select", "4", "M")
    assert parse_output("  " + out({"type": "scroll", "value": "down"}) + "\n").action == Action("scroll", value="down")


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "not one JSON object"),
        ('{"reason": "r", "subtasks": [], "action": {"type": "click", "target": "3"}', "not one JSON object"),
        ("[1, 2]", "not a JSON object"),
        ('{"subtasks": [], "action": {"type": "click", "target": "3"}}', "`reason`"),
        ('{"reason": "r", "subtasks": "a", "action": {"type": "click", "target": "3"}}', "`subtasks`"),
        ('{"reason": "r", "subtasks": [1], "action": {"type": "click", "target": "3"}}', "`subtasks`"),
        ('{"reason": "r", "subtasks": []}', "missing `action`"),
        (out("click 3"), "`action` must be an object"),
        (out({"type": "drag", "target": "3"}), "action type must be one of"),
        (out({"type": "click"}), "click needs a target"),
        (out({"type": "click", "target": ""}), "target must be"),
        (out({"type": "click", "target": True}), "target must be"),
        (out({"type": "click", "target": [1]}), "target must be"),
        (out({"type": "type", "target": "2"}), "type needs a value"),
        (out({"type": "type", "target": "2", "value": 5}), "value must be a string"),
        (out({"type": "type", "target": [1, 2], "value": "x"}), "not a point"),
        (out({"type": "scroll", "value": "left"}), "scroll needs value"),
        ('{"reason": "r", "subtasks": [], "action": {"type": "click", "target": "3"}} extra', "not one JSON object"),
    ],
)
def test_malformed_outputs_are_format_failures(text, why):
    p = parse_output(text)
    assert not p.ok and p.action is None
    assert why in p.error


def test_parser_never_raises_on_noise():
    rng = random.Random(0)
    good = out({"type": "type", "target": "2", "value": "Ana"})
    alphabet = '{}[]":,#0123456789 abcdefghijklmnopqrstuvwxyz\\\n'
    for _ in range(2000):
        if rng.random() < 0.5:
            text = good[: rng.randint(0, len(good))]
        else:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        parse_output(text)  # must not raise


def test_format_output_round_trips():
    a = Action("type", target="2", value="ok thanks")
    p = parse_output(format_output(a, ["enter Body ok thanks", "send"], "fill the body"))
    assert p.ok and p.action == a and p.subtasks == ["enter Body ok thanks", "send"]
    assert Action.from_json(a.to_json()) == a
    assert Action.from_json(Action("click", point=(1.0, 2.0)).to_json()) == Action("click", point=(1.0, 2.0))
