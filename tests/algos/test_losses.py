import math

import pytest
import torch

from tempering.algos.losses import AGG_MODES, LossNorm, aggregate, kl_estimate, ppo_clip_loss
from tempering.algos.shaping import overlong_penalty


def _loss(ratio, adv, **kw):
    logp = torch.tensor([[math.log(ratio)]])
    loss, stats = ppo_clip_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), **kw)
    return float(loss), stats


def test_ppo_clip_by_hand():
    assert _loss(1.5, 1.0)[0] == pytest.approx(-1.28)  # clipped at 1 + 0.28
    assert _loss(0.5, 1.0)[0] == pytest.approx(-0.5)  # below the clip, positive advantage: unclipped
    assert _loss(0.5, -1.0)[0] == pytest.approx(0.8)  # clipped at 1 - 0.2
    assert _loss(5.0, -1.0)[0] == pytest.approx(3.0)  # dual clip caps at c * |A|
    assert _loss(5.0, -1.0, dual_clip=None)[0] == pytest.approx(5.0)


def test_clip_fractions():
    _, s = _loss(1.5, 1.0)
    assert float(s["clip_frac_high"]) == 1.0 and float(s["clip_frac_low"]) == 0.0


def test_dual_clip_fraction_by_hand():
    # ratios 5, 2, 0.5, 5 with advantages -1, -1, -1, +1: only the first is capped at c * |A| = 3
    logp = torch.tensor([[math.log(5.0), math.log(2.0), math.log(0.5), math.log(5.0)]])
    adv = torch.tensor([[-1.0, -1.0, -1.0, 1.0]])
    loss, s = ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4))
    assert float(s["dual_clip_frac"]) == pytest.approx(0.25)
    assert float(loss) == pytest.approx((3.0 + 2.0 + 0.8 - 1.28) / 4)
    # a masked token is not counted; without a dual clip there is no such statistic
    _, s = ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.tensor([[0.0, 1.0, 1.0, 1.0]]))
    assert float(s["dual_clip_frac"]) == 0.0
    assert "dual_clip_frac" not in ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4), dual_clip=None)[1]


def test_aggregation_by_hand():
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(loss, mask, "token-mean")) == pytest.approx(2.0)  # (1+2+3)/3
    assert float(aggregate(loss, mask, "seq-mean-token-mean")) == pytest.approx(2.25)  # (1.5+3)/2
    assert float(aggregate(loss, mask, "token-sum")) == pytest.approx(6.0)  # 1+2+3
    assert float(aggregate(loss, mask, "seq-mean-token-sum")) == pytest.approx(3.0)  # (3+3)/2
    norm = LossNorm(tokens=3, seqs=2, max_len=4)
    assert float(aggregate(loss, mask, "seq-mean-token-sum-norm", norm)) == pytest.approx(0.75)  # (3/4+3/4)/2
    # two data-parallel ranks average their gradients: each rank's sum counts twice, so the mean is the total
    assert float(aggregate(loss, mask, "token-sum", LossNorm(tokens=1.5, seqs=1, world=2))) == pytest.approx(12.0)
    with pytest.raises(ValueError):
        aggregate(loss, mask, "sum")


def test_global_norm_splits_like_one_batch():
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    for mode in AGG_MODES:
        norm = LossNorm.of(mask)
        whole = aggregate(loss, mask, mode, norm)
        parts = aggregate(loss[:2], mask[:2], mode, norm) + aggregate(loss[2:], mask[2:], mode, norm)
        assert float(whole) == pytest.approx(float(parts))


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # d = ref - logp = -1
    assert float(kl_estimate(logp, ref, "k1")) == pytest.approx(1.0)
    assert float(kl_estimate(logp, ref, "k2")) == pytest.approx(0.5)
    assert float(kl_estimate(logp, ref, "k3")) == pytest.approx(math.exp(-1))  # e^-1 + 1 - 1
    assert float(kl_estimate(logp, ref, "abs")) == pytest.approx(1.0)
    assert float(kl_estimate(ref, logp, "abs")) == pytest.approx(1.0)  # |d| on either side


def test_verl_kl_names_are_the_same_estimators():
    logp, ref = torch.tensor([-0.3, -1.0]), torch.tensor([-2.0, -0.5])
    for verl, ours in (("low_var_kl", "k3"), ("mse", "k2"), ("kl", "k1")):
        assert torch.equal(kl_estimate(logp, ref, verl), kl_estimate(logp, ref, ours))
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(logp, ref, "k4")


def test_overlong_penalty_by_hand():
    pen = overlong_penalty(torch.tensor([6, 8, 10, 12]), max_len=10, cache_len=4)
    assert pen.tolist() == pytest.approx([0.0, -0.5, -1.0, -1.0])
