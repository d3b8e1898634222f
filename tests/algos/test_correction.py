"""Rollout correction (hand-computed): every mode's weights and mask, episodes split into rows, the
on-policy limit, and how the loop applies a correction to a batch."""

import math
from dataclasses import replace

import pytest
import torch

from tempering.algos.correction import CORRECTIONS, MODES, PRESETS, mismatch_kl, rollout_correction
from tempering.config import build
from tempering.errors import ConfigError
from tempering.train.batch import TrainBatch
from tempering.train.config import LoopConfig, UpdateSection
from tempering.train.loop import training_batch
from tempering.train.method import Credit
from tempering.train.scoring import Scores

L = math.log
# two rows: token ratios rho = pi_prox / pi_behav of 2, 1, 3 (product 6) and of 0.5, 1 (product 0.5)
PROX = torch.tensor([[L(0.5), L(0.4), L(0.9), 0.0], [L(0.2), L(0.7), 0.0, 0.0]])
BEHAV = torch.tensor([[L(0.25), L(0.4), L(0.3), 0.0], [L(0.4), L(0.7), 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]])


def run(mode, **kw):
    return rollout_correction(PROX, BEHAV, MASK, mode, **kw)


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b), rtol=1e-5, atol=1e-6)


def test_token_truncation():
    w, mask, stats = run("tis", cap=2.0)
    close(w, [[2.0, 1.0, 2.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    assert mask is MASK
    assert stats["clipped_token_share"] == pytest.approx(1 / 5)  # only the ratio 3 is capped
    assert stats["mean_weight"] == pytest.approx(6.5 / 5)
    # k3 per token: r - log r - 1 for r = 2, 1, 3, 0.5, 1
    k3 = [2 - L(2) - 1, 0.0, 3 - L(3) - 1, 0.5 - L(0.5) - 1, 0.0]
    assert stats["mismatch_kl"] == pytest.approx(sum(k3) / 5, rel=1e-5)
    assert float(mismatch_kl(PROX, PROX, MASK)) == 0.0
    w, _, stats = run("tis", cap=2.0, floor=0.6)  # TRL's clip_min raises the 0.5
    close(w, [[2.0, 1.0, 2.0, 0.0], [0.6, 1.0, 0.0, 0.0]])
    assert stats["clipped_token_share"] == pytest.approx(2 / 5)


def test_sequence_truncation():
    w, mask, stats = run("sequence_truncate")  # cap 2: min(6, 2) and 0.5 on every token of the row
    close(w, [[2.0, 2.0, 2.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    assert mask is MASK and stats["clipped_token_share"] == pytest.approx(3 / 5)
    assert stats["mean_weight"] == pytest.approx(7 / 5)


def test_token_and_sequence_masks_keep_the_ratio_as_weight():
    w, mask, _ = run("token_mask")  # TRL's cap 3: every ratio is kept, as its own weight
    close(w, [[2.0, 1.0, 3.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    w, mask, stats = run("token_mask", cap=2.5)
    close(w, [[2.0, 1.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    assert mask is MASK and stats["masked_token_share"] == pytest.approx(1 / 5)  # still in the normaliser
    w, mask, stats = run("sequence_mask")  # 6 > 3: the row's weight is 0; 0.5 is kept as the weight
    close(w, [[0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    assert mask is MASK and stats["masked_token_share"] == pytest.approx(3 / 5)
    assert stats["mean_weight"] == pytest.approx(1 / 5)


def test_icepop_masks_both_sides():
    w, _, _ = run("icepop")  # verl's [0.5, 5] keeps all five (0.5 on the edge)
    close(w, [[2.0, 1.0, 3.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    w, mask, stats = run("icepop", cap=2.5, floor=0.6)
    close(w, [[2.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    assert mask is MASK and stats["masked_token_share"] == pytest.approx(2 / 5)


def test_rejection_by_product_and_by_geometric_mean():
    # verl's k1 = log pi_behav - log pi_prox: row sums log(1/6) and log 2, row means log(1/6)/3, log(2)/2
    w, mask, stats = run("seq_sum_k1", cap=2.5, floor=0.5)
    close(mask, [[0.0, 0, 0, 0], [1, 1, 0, 0]])  # 1/6 < 0.5: dropped; 2 <= 2.5: kept, weight 1
    close(w, mask.tolist())
    assert stats["masked_token_share"] == pytest.approx(3 / 5)
    w, mask, _ = run("seq_sum_k1", cap=1.5, floor=0.6)  # 2 > 1.5: both dropped
    close(mask, [[0.0, 0, 0, 0], [0, 0, 0, 0]])
    # geometric means (1/6)^(1/3) = 0.550 (< 0.6, dropped) and 2^(1/2) = 1.414 (<= 1.5, kept)
    w, mask, stats = run("seq_mean_k1", cap=1.5, floor=0.6)
    close(mask, [[0.0, 0, 0, 0], [1, 1, 0, 0]])
    w, mask, _ = run("seq_mean_k1")  # verl's geo_rs band [0.999, 1.001] drops both
    assert float(mask.sum()) == 0.0


def test_decoupled_weights_by_the_behaviour_ratio():
    w, mask, _ = run("decoupled")  # AReaL's default cap 5 keeps every ratio, as its weight
    close(w, [[2.0, 1.0, 3.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    w, mask, stats = run("decoupled", cap=2.5)  # tokens above the cap get weight 0
    close(w, [[2.0, 1.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    assert mask is MASK and stats["masked_token_share"] == pytest.approx(1 / 5)


def test_an_episode_split_into_rows_is_judged_as_one():
    one = torch.tensor([0, 0])  # both rows belong to one episode: product 6 * 0.5 = 3 over five tokens
    w, _, _ = rollout_correction(PROX, BEHAV, MASK, "sequence_truncate", episode_B=one)
    close(w, [[2.0, 2.0, 2.0, 0.0], [2.0, 2.0, 0.0, 0.0]])
    w, _, _ = rollout_correction(PROX, BEHAV, MASK, "sequence_mask", cap=3.5, episode_B=one)
    close(w, [[3.0, 3.0, 3.0, 0.0], [3.0, 3.0, 0.0, 0.0]])
    # geometric mean 3^(1/5) = 1.246 of pi_prox / pi_behav, so k1's is 0.803: kept by [0.8, 1.3]
    _, mask, _ = rollout_correction(PROX, BEHAV, MASK, "seq_mean_k1", cap=1.3, floor=0.8, episode_B=one)
    close(mask, MASK.tolist())
    _, mask, _ = rollout_correction(PROX, BEHAV, MASK, "seq_mean_k1", cap=1.3, floor=0.8)  # row by row: 0.55, 1.41
    close(mask, [[0.0, 0, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("mode", CORRECTIONS)
def test_every_mode_reduces_to_the_on_policy_update_at_staleness_0(mode):
    cap = 0.01 if mode in MODES and MODES[mode].stat in ("k2", "k3") else None  # a divergence bound has no default
    w, mask, stats = rollout_correction(PROX, PROX.clone(), MASK, mode, cap, episode_B=torch.tensor([0, 0]))
    torch.testing.assert_close(w, MASK)
    torch.testing.assert_close(mask, MASK)
    assert stats["mismatch_kl"] == 0.0 and stats.get("masked_token_share", 0.0) == 0.0


def test_bad_correction_settings():
    with pytest.raises(ValueError, match="unknown rollout correction 'clip'"):
        run("clip")
    with pytest.raises(ValueError, match="use sequence_mask .* or seq_sum_k1"):
        run("mask")
    with pytest.raises(ValueError, match="cap must be > 1"):
        run("tis", cap=1.0)
    with pytest.raises(ValueError, match=r"floor must be in \(0, 1\)"):
        run("icepop", floor=1.5)


def test_the_config_names_every_mode():
    literal = UpdateSection.model_fields["rollout_correction"].annotation.__args__
    assert tuple(literal) == CORRECTIONS and set(MODES) | set(PRESETS) == set(CORRECTIONS) - {"none"}


def test_correction_applies_to_a_batch():
    b = TrainBatch(
        torch.zeros(2, 4, dtype=torch.long),
        torch.ones(2, 4, dtype=torch.long),
        MASK.clone(),
        BEHAV,
        torch.zeros(2, 4, dtype=torch.long),
        adv_BT=MASK * torch.tensor([[1.0], [-2.0]]),
    )
    w, mask, _ = run("tis", cap=2.0)
    scores = Scores(turns=None, correction_BT=w, correction_mask_BT=mask, proximal_logp_BT=PROX)  # type: ignore[arg-type]
    out = training_batch(b, scores, Credit(b.adv_BT))
    torch.testing.assert_close(out.adv_BT, torch.tensor([[2.0, 1.0, 2.0, 0.0], [-1.0, -2.0, 0.0, 0.0]]))
    assert out.old_logp_BT is PROX  # the PPO ratio is taken against the proximal policy's log-probs
    assert b.adv_BT is not out.adv_BT  # the scored batch itself is not changed
    w, mask, _ = run("seq_sum_k1", cap=2.5, floor=0.5)  # rejection: the first row leaves the loss mask
    out = training_batch(b, replace(scores, correction_BT=w, correction_mask_BT=mask), Credit(b.adv_BT))
    torch.testing.assert_close(out.mask_BT, torch.tensor([[0.0, 0, 0, 0], [1, 1, 0, 0]]))


@pytest.mark.parametrize(
    "over,message",
    [
        ({"loss": {"rollout_correction": "mask"}}, "rollout_correction=mask dropped sequences .* seq_sum_k1"),
        ({"loss": {"rollout_correction": "tis", "rollout_correction_floor": 1.5}}, "rollout_correction_floor"),
    ],
)
def test_the_config_refuses_a_biased_or_meaningless_correction(over, message):
    with pytest.raises(ConfigError, match=message):
        build(LoopConfig, over)
    build(LoopConfig, {"loss": {"rollout_correction": "seq_mean_k1", "rollout_correction_cap": 1.01}})
