import pytest
import torch

from tempering.algos.multiturn import discounted_returns, kevin_turn_advantage, trloo_turn_advantage


def test_discounted_returns_by_hand():
    R = discounted_returns(torch.tensor([[[0.0, 0.5, 1.0]]]), torch.ones(1, 1, 3), gamma=0.4)
    assert R[0, 0].tolist() == pytest.approx([0.36, 0.9, 1.0])  # 0 + .4*.9, .5 + .4*1, 1


def test_trloo_leaves_one_out_per_turn():
    scores = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
    valid = torch.tensor([[[1.0, 1.0], [1.0, 0.0]]])
    adv = trloo_turn_advantage(scores, valid, gamma=1.0)
    # turn 1: returns 1 (A) and 0 (B): +1 / -1; turn 2: only A reached it: no baseline -> 0
    assert adv[0].flatten().tolist() == pytest.approx([1.0, 0.0, -1.0, 0.0])


def test_kevin_normalises_over_all_turns_of_the_group():
    scores = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
    valid = torch.tensor([[[1.0, 1.0], [1.0, 0.0]]])
    adv = kevin_turn_advantage(scores, valid, gamma=0.4)
    # returns: A [0.4, 1.0], B [0.0]; mean 0.4667, unbiased std 0.5033
    mean, std = 1.4 / 3, torch.tensor([0.4, 1.0, 0.0]).std().item()
    assert adv[0, 0].tolist() == pytest.approx([(0.4 - mean) / std, (1.0 - mean) / std], rel=1e-4)
    assert adv[0, 1].tolist() == pytest.approx([(0.0 - mean) / std, 0.0], rel=1e-4)
