import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tempering.algos.advantages import (
    dr_grpo_advantage,
    grpo_advantage,
    grpo_passk_advantage,
    remax_advantage,
    rloo_advantage,
    zero_std_groups,
)
from tempering.algos.credit import CREDIT, resolve_credit, turn_tensors
from tempering.errors import ConfigError
from tempering.types import Episode, Group, Task, Turn

R = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])


def test_grpo_by_hand():
    adv = grpo_advantage(R)
    # mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    assert torch.allclose(adv[0], torch.tensor([0.866025, -0.866025, -0.866025, 0.866025]), atol=1e-5)
    assert torch.equal(adv[1], torch.zeros(4))


def test_dr_grpo_and_rloo_by_hand():
    assert torch.allclose(dr_grpo_advantage(R)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    # rloo: 1 - (0+0+1)/3 = 2/3; 0 - (1+0+1)/3 = -2/3
    assert torch.allclose(rloo_advantage(R)[0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    assert torch.equal(rloo_advantage(R)[1], torch.zeros(4))


def test_group_of_one_has_zero_advantage():
    one = torch.tensor([[0.7], [0.1]])
    for fn in (grpo_advantage, rloo_advantage):
        assert torch.equal(fn(one), torch.zeros_like(one))
    assert not math.isnan(float(grpo_advantage(one).sum()))


def test_group_of_one_gets_its_raw_score_in_verls_convention():
    one = torch.tensor([[0.7], [-1.5]])
    # verl: mean 0 and std 1 for a group of one, so GRPO gives r / (1 + eps), Dr. GRPO and RLOO give r
    assert torch.allclose(grpo_advantage(one, singleton="raw"), one / (1 + 1e-6), atol=0, rtol=1e-7)
    assert torch.equal(dr_grpo_advantage(one, singleton="raw"), one)
    assert torch.equal(rloo_advantage(one, singleton="raw"), one)
    assert torch.equal(grpo_advantage(R, singleton="raw"), grpo_advantage(R))  # groups of G > 1 are unchanged
    with pytest.raises(ValueError, match="singleton='mean' is unknown"):
        rloo_advantage(one, singleton="mean")


def test_group_of_one_matches_verl():
    """verl's own numbers (tests/data/verl_singleton_group.json, from benchmarks/offpolicy_parity.py)."""
    data = json.loads((Path(__file__).parents[1] / "data" / "verl_singleton_group.json").read_text())
    scores = torch.tensor(data["scores"])[:, None]
    for name, fn in (("grpo", grpo_advantage), ("dr_grpo", dr_grpo_advantage), ("rloo", rloo_advantage)):
        ours = fn(scores, singleton="raw")[:, 0]
        assert (ours - torch.tensor(data["advantages"][name])).abs().max() <= 1e-6, name
        assert torch.equal(fn(scores)[:, 0], torch.zeros(len(scores)))  # ours: no baseline, no signal


def test_the_singleton_convention_reaches_the_credit():
    g = Group(Task("t", "p"), [_ep([0.0, 1.0], 1.0)])
    tt = turn_tensors([g])
    assert resolve_credit("rloo", {}, "raw")(tt).tolist() == [[[1.0, 1.0]]]
    assert resolve_credit("rloo", {})(tt).tolist() == [[[0.0, 0.0]]]
    with pytest.raises(ConfigError, match="loss.singleton_group=raw is read by the outcome credits only"):
        resolve_credit("kevin", {}, "raw")


def test_zero_std_groups():
    assert zero_std_groups(R).tolist() == [False, True]


def _ep(scores, reward):
    e = Episode(task=Task("t", "p"), prompt_ids=[1], turns=[Turn([5], [0.0], score=s) for s in scores])
    e.reward = reward
    return e


def test_outcome_credit_covers_every_turn_of_an_episode():
    g = Group(Task("t", "p"), [_ep([0.0, 1.0], 1.0), _ep([0.0], 0.0)])
    tt = turn_tensors([g])
    assert tt.valid_NGK.tolist() == [[[1, 1], [1, 0]]]
    adv = CREDIT["dr_grpo"](tt)
    assert adv.tolist() == [[[0.5, 0.5], [-0.5, 0.0]]]


def _scored(parts, reward):
    e = Episode(
        task=Task("t", "p"), prompt_ids=[1], turns=[Turn([5, 6], [0.0, 0.0], score=reward, info={"rewards": parts})]
    )
    e.reward = reward
    return e


def test_gdpo_normalises_each_reward_function_in_its_group():
    """Two functions: accuracy splits the group, format is equal within it (so it adds nothing); by hand with
    TRL's episode normalisation (eps 1e-4)."""
    g = Group(
        Task("t", "p"), [_scored({"accuracy": 1.0, "format": 1.0}, 2.0), _scored({"accuracy": 0.0, "format": 1.0}, 1.0)]
    )
    tt = turn_tensors([g])
    assert tt.component_names == ("accuracy", "format")
    adv = CREDIT["gdpo"](tt, eps=1e-4, batch_norm="episodes")
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # accuracy in its group; format is 0 / (0 + eps)
    want = a / (a * math.sqrt(2) + 1e-4)  # the sum (a, -a) over the batch: mean 0, std a * sqrt(2)
    assert adv.flatten().tolist() == pytest.approx([want, -want], rel=1e-5)
    with pytest.raises(ValueError, match="not reward functions"):
        CREDIT["gdpo"](tt, weights={"style": 1.0})
    with pytest.raises(ValueError, match="use a task family with several reward functions"):
        CREDIT["gdpo"](turn_tensors([Group(Task("t", "p"), [_ep([1.0], 1.0), _ep([0.0], 0.0)])]))


def test_grpo_passk_credits_only_the_best_answer():
    r = torch.tensor([[1.0, 0.0, 0.5, 0.2]])
    adv = grpo_passk_advantage(r, scale_by_std=False)
    assert adv.tolist() == [[0.5, 0.0, 0.0, 0.0]]  # best 1.0 minus second best 0.5


def test_episodes_naming_different_reward_parts_train_with_grpo_and_gdpo_refuses():
    """An environment that reports its parts per outcome (a failed compile names fewer) is fine for every
    credit but gdpo, which normalises per function and so needs every episode to name the same ones."""
    g = Group(Task("t", "p"), [_scored({"correct": 1.0, "speedup": 2.0}, 2.0), _scored({"correct": 0.0}, 0.0)])
    tt = turn_tensors([g])
    assert tt.components_NGC is None
    assert CREDIT["grpo"](tt).flatten().tolist() == pytest.approx([0.7071, -0.7071], abs=1e-3)
    with pytest.raises(ValueError, match="only in part"):
        CREDIT["gdpo"](tt)


def test_remax_is_the_reward_less_the_greedy_answers():
    adv = remax_advantage(torch.tensor([[1.0, 0.0, 0.5], [0.0, 0.0, 0.0]]), torch.tensor([0.5, 1.0]))
    assert adv.tolist() == [[0.5, -0.5, 0.0], [-1.0, -1.0, -1.0]]  # no normalisation; equal rewards still count


def test_remax_credit_reads_each_groups_greedy_episode_and_its_own_shaping():
    gs = [
        Group(Task("a", "p"), [_ep([0.0, 1.0], 1.0), _ep([0.0], 0.0)], greedy=_ep([1.0], 1.0)),
        Group(Task("b", "p"), [_ep([0.5], 0.5), _ep([0.5], 0.5)], greedy=_ep([0.0], 0.0)),
    ]
    tt = turn_tensors(gs)
    assert tt.greedy_N.tolist() == [1.0, 0.0]
    assert CREDIT["remax"](tt).tolist() == [[[0.0, 0.0], [-1.0, 0.0]], [[0.5, 0.0], [0.5, 0.0]]]
    shaped = replace(tt, shaping_NGK=torch.full_like(tt.scores_NGK, -0.25) * tt.valid_NGK)
    # the sampled episodes' shaping terms count, the greedy baseline is its verifier reward
    assert CREDIT["remax"](shaped)[:, :, 0].tolist() == [[-0.5, -1.25], [0.25, 0.25]]
    with pytest.raises(ValueError, match="needs one greedy episode per group"):
        CREDIT["remax"](turn_tensors([Group(Task("a", "p"), [_ep([1.0], 1.0)])]))
    with pytest.raises(ValueError, match="every group of a batch has its greedy episode or none"):
        turn_tensors([gs[0], Group(Task("c", "p"), [_ep([1.0], 1.0), _ep([0.0], 0.0)])])
