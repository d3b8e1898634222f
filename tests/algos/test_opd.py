import math

import pytest
import torch

from tempering.algos.opd import generalized_jsd, renormalize, reverse_kl_advantage, topk_jsd, with_rest


def _lp(*p):
    return torch.tensor([math.log(x) for x in p])


def test_reverse_kl_advantage_by_hand():
    adv = reverse_kl_advantage(
        torch.tensor([[-1.0, -2.0, -0.3]]), torch.tensor([[-0.5, -3.0, -9.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    )
    assert adv.tolist() == [[0.5, -1.0, 0.0]]  # teacher likes token 1 more (+), token 2 less (-); padding 0


# teacher T = (0.5, 0.5), student S = (0.9, 0.1)
T, S = _lp(0.5, 0.5), _lp(0.9, 0.1)


def test_generalized_jsd_endpoints_are_forward_and_reverse_kl():
    # beta = 0: KL(T || S) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.510826
    assert float(generalized_jsd(S, T, 0.0)) == pytest.approx(0.510826, abs=1e-6)
    # beta = 1: KL(S || T) = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5) = 0.368064
    assert float(generalized_jsd(S, T, 1.0)) == pytest.approx(0.368064, abs=1e-6)


def test_generalized_jsd_midpoint_by_hand():
    # M = 0.5 T + 0.5 S = (0.7, 0.3); KL(T||M) = 0.087177, KL(S||M) = 0.116322; JSD = 0.101749
    assert float(generalized_jsd(S, T, 0.5)) == pytest.approx(0.101749, abs=1e-6)
    assert float(generalized_jsd(T, T, 0.3)) == pytest.approx(0.0, abs=1e-7)
    # small beta behaves like beta * forward KL, beta near 1 like (1 - beta) * reverse KL
    assert float(generalized_jsd(S, T, 1e-4)) / 1e-4 == pytest.approx(0.510826, rel=1e-3)
    assert float(generalized_jsd(S, T, 1 - 1e-4)) / 1e-4 == pytest.approx(0.368064, rel=1e-3)


def test_zero_probabilities_stay_finite():
    onehot = torch.tensor([0.0, -float("inf")])
    assert float(generalized_jsd(_lp(0.5, 0.5), onehot, 0.0)) == pytest.approx(math.log(2), abs=1e-6)  # KL(T||S)
    assert math.isfinite(float(generalized_jsd(_lp(0.5, 0.5), onehot, 0.5)))
    with pytest.raises(ValueError):
        generalized_jsd(S, T, 1.5)


def test_renormalize():
    assert renormalize(_lp(0.2, 0.2, 0.1)).exp().tolist() == pytest.approx([0.4, 0.4, 0.2])


def test_topk_jsd_keeps_the_rest_of_the_vocabulary_as_one_bucket():
    s = _lp(0.5, 0.3)  # rest 0.2
    t = _lp(0.6, 0.2)  # rest 0.2
    assert with_rest(s).exp().tolist() == pytest.approx([0.5, 0.3, 0.2])
    # KL(S||T) on (0.5, 0.3, 0.2) vs (0.6, 0.2, 0.2) = 0.5 ln(5/6) + 0.3 ln(3/2) = 0.030479
    assert float(topk_jsd(s, t, 1.0)) == pytest.approx(0.030479, abs=1e-6)
    # mass outside the teacher's top-k is penalised: forward KL of (0.9, 0.1) against a student with 0.1 on it
    assert float(topk_jsd(_lp(0.1), _lp(0.9), 0.0)) == pytest.approx(
        0.9 * math.log(9) + 0.1 * math.log(0.1 / 0.9), abs=1e-6
    )
    assert topk_jsd(s[None, None], t[None, None], 0.5).shape == (1, 1)
