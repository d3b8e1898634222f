"""Rollout correction (hand-computed): truncated importance weights, sequence masking, and how the
loop applies them to a batch."""

import math

import pytest
import torch

from tempering.algos.correction import mismatch_kl, rollout_correction
from tempering.train.batch import TrainBatch
from tempering.train.loop import training_batch
from tempering.train.method import Credit
from tempering.train.scoring import Scores

L = math.log
# two answers: token ratios pi_trainer / pi_sampler of 2, 1, 3 and of 0.5, 1
TRAINER = torch.tensor([[L(0.5), L(0.4), L(0.9), 0.0], [L(0.2), L(0.7), 0.0, 0.0]])
SAMPLER = torch.tensor([[L(0.25), L(0.4), L(0.3), 0.0], [L(0.4), L(0.7), 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]])


def test_truncated_importance_weights():
    w, mask, stats = rollout_correction(TRAINER, SAMPLER, MASK, "tis", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, 2.0, 0.0], [0.5, 1.0, 0.0, 0.0]]))
    assert mask is MASK
    assert stats["tis_truncated_frac"] == pytest.approx(1 / 5)  # only the ratio 3 is capped
    assert stats["tis_mean_weight"] == pytest.approx(6.5 / 5)
    # k3 per token: r - log r - 1 for r = 2, 1, 3, 0.5, 1
    k3 = [2 - L(2) - 1, 0.0, 3 - L(3) - 1, 0.5 - L(0.5) - 1, 0.0]
    assert stats["mismatch_kl"] == pytest.approx(sum(k3) / 5, rel=1e-5)
    assert float(mismatch_kl(TRAINER, TRAINER, MASK)) == 0.0


def test_sequence_masking():
    w, mask, stats = rollout_correction(TRAINER, SAMPLER, MASK, "mask", cap=2.0)
    # sequence ratios: 2 * 1 * 3 = 6 (outside [1/2, 2]: dropped) and 0.5 * 1 = 0.5 (on the edge: kept)
    torch.testing.assert_close(mask, torch.tensor([[0.0, 0, 0, 0], [1, 1, 0, 0]]))
    torch.testing.assert_close(w, mask)
    assert stats["masked_seq_frac"] == pytest.approx(0.5)


def test_bad_correction_settings():
    with pytest.raises(ValueError, match="unknown rollout correction 'clip'"):
        rollout_correction(TRAINER, SAMPLER, MASK, "clip")
    with pytest.raises(ValueError, match="cap C must be > 1"):
        rollout_correction(TRAINER, SAMPLER, MASK, "tis", cap=1.0)


def test_correction_applies_to_a_batch():
    b = TrainBatch(
        torch.zeros(2, 4, dtype=torch.long),
        torch.ones(2, 4, dtype=torch.long),
        MASK.clone(),
        SAMPLER,
        torch.zeros(2, 4, dtype=torch.long),
        adv_BT=MASK * torch.tensor([[1.0], [-2.0]]),
    )
    w, mask, _ = rollout_correction(TRAINER, SAMPLER, MASK, "tis", 2.0)
    scores = Scores(turns=None, correction_BT=w, correction_mask_BT=mask, behaviour_logp_BT=TRAINER)  # type: ignore[arg-type]
    out = training_batch(b, scores, Credit(b.adv_BT))
    torch.testing.assert_close(out.adv_BT, torch.tensor([[2.0, 1.0, 2.0, 0.0], [-1.0, -2.0, 0.0, 0.0]]))
    assert out.old_logp_BT is TRAINER  # the PPO ratio is taken against the trainer's own log-probs
    assert b.adv_BT is not out.adv_BT  # the scored batch itself is not changed
