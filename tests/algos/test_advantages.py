import math

import torch

from tempering.algos.advantages import dr_grpo_advantage, grpo_advantage, rloo_advantage, zero_std_groups
from tempering.algos.credit import CREDIT, turn_tensors
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
