"""Collapse detection (`train/collapse.py`) on hand-made sequences of step and evaluation numbers, and its
warning and metric flag in a run."""

import json

import pytest
from pydantic import ValidationError

from tempering.recipes.runner import run
from tempering.train.collapse import CollapseRule, CollapseState, check_collapse
from tempering.train.config import RunSection

RULE = CollapseRule(entropy=0.05, patience=3, heldout=0.5)


def test_entropy_below_the_threshold_for_patience_steps_in_a_row_warns_once():
    s, seen = CollapseState(), []
    for step, h in enumerate([0.04, 0.03, 0.06, 0.01, 0.02, 0.049, 0.0, 0.0], start=1):
        s, found = check_collapse(s, RULE, step, entropy=h)
        seen += [(step, c.sign) for c in found]
    # 0.06 breaks the first streak (2 long); 0.01, 0.02, 0.049 make 3 in a row at step 6; once only
    assert seen == [(6, "entropy")]
    assert s.low_entropy_steps == 5 and s.warned == {"entropy"}


def test_the_entropy_message_names_the_numbers_and_the_way_out():
    s = CollapseState(low_entropy_steps=2)
    _, (c,) = check_collapse(s, RULE, 9, entropy=0.0123)
    assert "below 0.05 nats per token for 3 steps" in c.message and "0.0123" in c.message
    assert "step 9" in c.message and "optim.lr" in c.message


def test_heldout_pass_below_the_share_of_the_start_warns_once():
    start = {"eval/pass@1": 0.45, "eval/n": 500}  # 225 solved
    s = CollapseState()
    s, found = check_collapse(s, RULE, 10, start=start, heldout={"eval/pass@1": 0.23, "eval/n": 100})
    assert found == []  # 0.23 >= 0.5 * 0.45 = 0.225
    s, (c,) = check_collapse(s, RULE, 20, start=start, heldout={"eval/pass@1": 0.22, "eval/n": 100})
    assert c.sign == "heldout" and "0.220 at step 20, below 0.5 x the start's 0.450" in c.message
    s, found = check_collapse(s, RULE, 30, start=start, heldout={"eval/pass@1": 0.0, "eval/n": 100})
    assert found == [] and s.warned == {"heldout"}


def test_a_start_that_solved_too_few_prompts_or_no_start_is_not_compared():
    four = {"eval/pass@1": 0.5, "eval/n": 8}  # 4 solved < MIN_SOLVED
    assert check_collapse(CollapseState(), RULE, 5, start=four, heldout={"eval/pass@1": 0.0})[1] == []
    five = {"eval/pass@1": 0.625, "eval/n": 8}
    assert [c.sign for c in check_collapse(CollapseState(), RULE, 5, start=five, heldout={"eval/pass@1": 0.0})[1]] == [
        "heldout"
    ]
    assert check_collapse(CollapseState(), RULE, 5, start=None, heldout={"eval/pass@1": 0.0})[1] == []


def test_a_zero_threshold_turns_each_sign_off_and_both_can_fire_together():
    off = CollapseRule(entropy=0.0, patience=1, heldout=0.0)
    start = {"eval/pass@1": 1.0, "eval/n": 10}
    assert check_collapse(CollapseState(), off, 1, 0.0, start, {"eval/pass@1": 0.0})[1] == []
    on = CollapseRule(entropy=0.1, patience=1, heldout=0.5)
    _, found = check_collapse(CollapseState(), on, 1, 0.0, start, {"eval/pass@1": 0.0})
    assert [c.sign for c in found] == ["entropy", "heldout"]


def test_a_knob_that_would_do_nothing_is_refused():
    with pytest.raises(ValidationError, match=r"run.collapse_patience=3 has no effect unless run.collapse_entropy > 0"):
        RunSection(collapse_entropy=0, collapse_patience=3)
    with pytest.raises(ValidationError, match=r"run.collapse_heldout=0.3 has no effect unless run.eval_on_start=true"):
        RunSection(eval_on_start=False, collapse_heldout=0.3)
    assert RunSection(eval_on_start=False).collapse_heldout == 0.5  # the default alone is no error


def test_the_loop_warns_once_and_flags_the_step_in_metrics(tmp_path, capsys):
    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 20, "heldout_size": 2},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "run": {"steps": 4, "eval_every": 0, "eval_k": 1, "checkpoint_every": 0, "progress": False},
    }
    # any entropy is below 100 nats: the second step in a row is a collapse, and only it is flagged
    cfg["run"] |= {"out_dir": str(tmp_path), "collapse_entropy": 100.0, "collapse_patience": 2, "tensorboard": False}
    run("train", cfg)
    err = capsys.readouterr().err
    assert err.count("the policy's entropy collapsed") == 1 and "at step 2" in err
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "collapse/entropy" in r] == [2]
