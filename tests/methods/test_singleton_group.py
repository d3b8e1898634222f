"""loss.singleton_group: verl's raw-score convention for groups of one, refused where it would do nothing."""

import warnings
from types import SimpleNamespace

import pytest

from tempering.methods.rl import RLLossSection, check


def test_singleton_group_is_read_by_the_outcome_credits_only():
    assert RLLossSection(singleton_group="raw").singleton_group == "raw"
    with pytest.raises(ValueError, match="loss.singleton_group='raw' has no effect unless loss.advantage=grpo"):
        RLLossSection(singleton_group="raw", advantage="kevin")


def test_singleton_group_needs_groups_of_one():
    cfg = lambda g: SimpleNamespace(
        rollout=SimpleNamespace(group_size=g, counterfactual_turns=0), loss=RLLossSection(singleton_group="raw")
    )
    with pytest.raises(ValueError, match="has no effect unless rollout.group_size=1"):
        check(cfg(4))
    check(cfg(1))  # verl's convention gives the lone episode a signal: no warning that nothing trains


@pytest.mark.parametrize("credit,warns", [("grpo", True), ("remax", False), ("reinforce_pp", False)])
def test_groups_of_one_warn_only_where_the_credit_has_no_baseline_outside_the_group(credit, warns):
    """ReMax's baseline is its greedy answer and the whitened credits normalise over the batch: a group of one
    still trains there."""
    cfg = SimpleNamespace(
        rollout=SimpleNamespace(group_size=1, counterfactual_turns=0, async_steps=0),
        loss=RLLossSection(advantage=credit),
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check(cfg)
    assert any("gives no update a signal" in str(w.message) for w in seen) == warns
