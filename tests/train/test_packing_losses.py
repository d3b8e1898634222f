"""Every registered policy loss makes the same loss and gradient on packed micro-batches as on padded ones:
the packed log-probs come back in the batch's (B, T) layout, so sequence-level losses (GSPO's per-sequence
ratio, GMPO's geometric mean) sum each sequence's own tokens; the entropy bonus's gradient goes through the
chunked output layer."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tempering.algos.losses import POLICY_LOSSES, LossNorm
from tempering.models import tiny_model
from tempering.train.batch import collate
from tempering.train.update import UpdateSettings, batch_logprobs, ppo_loss

sys.path.insert(0, str(Path(__file__).parent))
from test_prefix import episodes


def loss_and_grads(model, batch, s: UpdateSettings):
    """The update's loss on one micro-batch, its old and reference log-probs computed as the update and the
    reference scorer compute them (padded or packed), and the policy's gradient."""
    g = torch.Generator().manual_seed(5)
    m = batch.mask_BT
    old = batch_logprobs(model, batch, batch.size, s.temperature, s.share_prefix, s.pack)
    drift = torch.randn(m.shape, generator=g) * 0.3 * m  # ratios away from 1: the clips and caps act
    adv = torch.randn(batch.size, generator=g)[:, None] * m
    mb = replace(batch, old_logp_BT=old + drift, ref_logp_BT=old - drift, adv_BT=adv, sample_logp_BT=old + drift / 2)
    model.zero_grad()
    loss, stats = ppo_loss(model, mb, LossNorm.of(m, max_len=m.shape[1]), s)
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"loss_agg": "seq-mean-token-mean", "entropy_coef": 0.01, "kl_coef": 0.1, "temperature": 0.7},
    ],
    ids=["plain", "seq-mean+entropy+kl"],
)
def test_every_registered_loss_is_the_padded_one_on_packed_micro_batches(extra):
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    for name in POLICY_LOSSES:
        s = UpdateSettings(policy_loss=name, **extra)
        want, want_g = loss_and_grads(model, batch, s)
        got, got_g = loss_and_grads(model, batch, replace(s, pack=True))
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5, msg=name)
        assert max(float(g.abs().max()) for g in want_g.values()) > 1e-4, name  # a real gradient
        assert set(got_g) == set(want_g), name
        for k in want_g:
            torch.testing.assert_close(got_g[k], want_g[k], atol=2e-6, rtol=1e-4, msg=f"{name}: {k}")


def test_the_entropy_bonus_gradient_through_the_chunked_output_layer_is_autograds():
    """d H / d logits by hand in the chunked backward against autograd through the padded forward's entropy."""
    model = tiny_model("tiny-xs", seed=0)
    batch = collate(episodes(), pad_id=0)
    s = UpdateSettings(policy_loss="ppo_clip", entropy_coef=1.0)  # the bonus dominates the gradient
    b = replace(batch, adv_BT=torch.zeros_like(batch.mask_BT))
    grads = []
    for pack in (False, True):
        model.zero_grad()
        loss, stats = ppo_loss(model, b, LossNorm.of(batch.mask_BT), replace(s, pack=pack))
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        assert float(stats["entropy_bonus"]) > 0
    assert max(float(g.abs().max()) for g in grads[0].values()) > 1e-4
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=2e-6, rtol=1e-4, msg=k)
