import math

import pytest
import torch

from tempering.algos.direct_opd import adaptive_alpha, direct_opd_advantage, mean_shift, topk_ppo_loss, topk_weights
from tempering.algos.losses import LossNorm


def test_student_weights_renormalise_over_its_top_k():
    pbar = topk_weights(torch.tensor([math.log(0.5), math.log(0.3), math.log(0.1)]))
    assert pbar.tolist() == pytest.approx([5 / 9, 3 / 9, 1 / 9])


def test_advantage_by_hand():
    student = torch.tensor([[[math.log(0.5), math.log(0.3), math.log(0.1)], [0.0, 0.0, 0.0]]])
    teacher = torch.tensor([[[-1.0, -2.0, -3.0], [5.0, 5.0, 5.0]]])
    ref = torch.tensor([[[-1.5, -1.0, -3.0], [0.0, 0.0, 0.0]]])
    mask = torch.tensor([[1.0, 0.0]])
    adv, r = direct_opd_advantage(student, teacher, ref, mask)
    assert r[0, 0].tolist() == pytest.approx([0.5, -1.0, 0.0])  # log pi_T - log pi_Tref
    assert adv[0, 0].tolist() == pytest.approx([5 / 18, -1 / 3, 0.0])  # pbar * r
    assert adv[0, 1].abs().sum() == 0  # off the mask
    assert mean_shift(adv, mask) == pytest.approx(5 / 18 - 1 / 3)


def test_adaptive_alpha_rule():
    assert adaptive_alpha(2.5, 0.3) == 2.5  # would be 2.525: clipped at 2.5
    assert adaptive_alpha(2.5, -0.3) == pytest.approx(2.475)
    assert adaptive_alpha(1.0, 0.3) == pytest.approx(1.01)
    assert adaptive_alpha(0.5, -1.0) == 0.5  # clipped below
    assert adaptive_alpha(1.2, 0.0) == 1.2


def test_on_policy_loss_is_the_rao_blackwellised_gradient():
    logp = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]])).requires_grad_(True)
    adv = torch.tensor([[[0.3, -0.2, 0.1], [1.0, 1.0, 1.0]]])
    mask = torch.tensor([[1.0, 0.0]])
    loss, _ = topk_ppo_loss(logp, logp.detach(), adv, mask)
    assert float(loss.detach()) == pytest.approx(-(0.3 - 0.2 + 0.1))  # ratio 1: -sum_k A_k, one token
    loss.backward()
    assert logp.grad[0, 0].tolist() == pytest.approx([-0.3, 0.2, -0.1])  # -A_k d log pi(v_k)
    assert logp.grad[0, 1].abs().sum() == 0


def test_clip_and_dual_clip_per_candidate():
    old = torch.zeros(1, 1, 2)
    logp = torch.log(torch.tensor([[[1.5, 5.0]]]))
    adv = torch.tensor([[[1.0, -1.0]]])
    loss, stats = topk_ppo_loss(logp, old, adv, torch.ones(1, 1), clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    assert float(loss) == pytest.approx(-1.2 + 3.0)  # clipped at 1.2, and capped at 3 |A|
    assert float(stats["clip_frac_high"]) == pytest.approx(0.5)
    norm = LossNorm(tokens=4, seqs=1)  # a normaliser counted over a whole optimizer step
    assert float(
        topk_ppo_loss(logp, old, adv, torch.ones(1, 1), 0.2, 0.2, 3.0, "token-mean", norm)[0]
    ) == pytest.approx(1.8 / 4)
