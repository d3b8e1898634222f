import math

import pytest
import torch

from tempering.algos.losses import LossNorm, aggregate, kl_estimate, ppo_clip_loss
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


def test_aggregation_by_hand():
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(loss, mask, "token-mean")) == pytest.approx(2.0)  # (1+2+3)/3
    assert float(aggregate(loss, mask, "seq-mean-token-mean")) == pytest.approx(2.25)  # (1.5+3)/2
    norm = LossNorm(tokens=3, seqs=2, max_len=4)
    assert float(aggregate(loss, mask, "seq-mean-token-sum-norm", norm)) == pytest.approx(0.75)  # (3/4+3/4)/2
    with pytest.raises(ValueError):
        aggregate(loss, mask, "sum")


def test_global_norm_splits_like_one_batch():
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        norm = LossNorm.of(mask)
        whole = aggregate(loss, mask, mode, norm)
        parts = aggregate(loss[:2], mask[:2], mode, norm) + aggregate(loss[2:], mask[2:], mode, norm)
        assert float(whole) == pytest.approx(float(parts))


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # d = ref - logp = -1
    assert float(kl_estimate(logp, ref, "k1")) == pytest.approx(1.0)
    assert float(kl_estimate(logp, ref, "k2")) == pytest.approx(0.5)
    assert float(kl_estimate(logp, ref, "k3")) == pytest.approx(math.exp(-1))  # e^-1 + 1 - 1


def test_overlong_penalty_by_hand():
    pen = overlong_penalty(torch.tensor([6, 8, 10, 12]), max_len=10, cache_len=4)
    assert pen.tolist() == pytest.approx([0.0, -0.5, -1.0, -1.0])
