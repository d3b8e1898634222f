"""loss.singleton_group: verl's raw-score convention for groups of one, refused where it would do nothing."""

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
