"""GAE, whitening and the clipped value loss on hand-computed numbers."""

import pytest
import torch

from tempering.algos.gae import clipped_value_loss, gae, masked_moments, unbiased_var, whiten


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_gae_on_one_turn_by_hand():
    # gamma 1, lambda 0.5; reward 1 on the last token
    adv, ret = gae(t([0, 0, 1]), t([0.5, 0.2, 0.4]), t([1, 1, 1]), gamma=1.0, lam=0.5)
    # A2 = 1 - 0.4 = 0.6; A1 = (0.4 - 0.2) + 0.5 * 0.6 = 0.5; A0 = (0.2 - 0.5) + 0.5 * 0.5 = -0.05
    torch.testing.assert_close(adv, t([-0.05, 0.5, 0.6]))
    torch.testing.assert_close(ret, t([0.45, 0.7, 1.0]))


def test_gae_skips_feedback_tokens_of_a_multi_turn_row():
    # prompt, two tokens of turn 1 (its reward 0.3 on its last token), two feedback tokens, one token of
    # turn 2 (reward 1), padding. Feedback and padding carry junk rewards and values that must not count.
    rewards = t([5.0, 0.0, 0.3, 5.0, 5.0, 1.0, 5.0])
    values = t([9.0, 0.1, 0.2, 7.0, 7.0, 0.5, 9.0])
    mask = t([0, 1, 1, 0, 0, 1, 0])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # the chain runs over action tokens only: a3 = 1 - 0.5 = 0.5;
    # a2 = 0.3 + 0.9 * 0.5 - 0.2 + 0.72 * 0.5 = 0.91 (bootstraps from a3's value across the feedback);
    # a1 = 0.9 * 0.2 - 0.1 + 0.72 * 0.91 = 0.7352
    torch.testing.assert_close(adv, t([0, 0.7352, 0.91, 0, 0, 0.5, 0]))
    torch.testing.assert_close(ret, t([0, 0.8352, 1.11, 0, 0, 1.0, 0]))


def test_gae_rows_are_independent_and_a_row_without_actions_is_zero():
    adv, ret = gae(t([0, 1], [3, 3]), t([0.5, 0.5], [1, 1]), t([1, 1], [0, 0]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, t([0.5, 0.5], [0, 0]))
    torch.testing.assert_close(ret, t([1.0, 1.0], [0, 0]))


def test_matches_verls_compute_gae_advantage_return_by_hand():
    """verl's `compute_gae_advantage_return` (the version that skips observation tokens), written out by
    hand for these inputs: a reversed scan where a masked-off token keeps the running value and advantage,
    returns = advantages + values before whitening, then `masked_whiten` (masked mean, Bessel-corrected
    masked variance, (x - mean) * rsqrt(var + 1e-8)). Only masked positions are compared: verl leaves the
    carried values at observation tokens, which no loss reads."""
    rewards = t([0, 0, 1, 0], [0, 0.5, 0, 2.0])
    values = t([0.5, 0.2, 0.4, 0.0], [0.1, 0.3, 0.9, 0.2])
    mask = t([1, 1, 1, 0], [1, 1, 0, 1])
    gamma, lam = 1.0, 0.95
    # row 0: t3 off; t2: 1 - 0.4 = 0.6; t1: 0.4 - 0.2 + 0.95 * 0.6 = 0.77; t0: 0.2 - 0.5 + 0.95 * 0.77 = 0.4315
    # row 1: t3: 2 - 0.2 = 1.8; t2 off (keeps 1.8 and next value 0.2); t1: 0.5 + 0.2 - 0.3 + 0.95 * 1.8 = 2.11;
    #        t0: 0.3 - 0.1 + 0.95 * 2.11 = 2.2045
    verl_adv = [0.4315, 0.77, 0.6, 2.2045, 2.11, 1.8]
    verl_ret = [0.4315 + 0.5, 0.77 + 0.2, 0.6 + 0.4, 2.2045 + 0.1, 2.11 + 0.3, 1.8 + 0.2]
    n = len(verl_adv)
    mean = sum(verl_adv) / n
    var = sum((a - mean) ** 2 for a in verl_adv) / n * n / (n - 1)
    verl_white = [(a - mean) / (var + 1e-8) ** 0.5 for a in verl_adv]

    adv, ret = gae(rewards, values, mask, gamma, lam)
    on = mask.bool()
    torch.testing.assert_close(adv[on], torch.tensor(verl_adv))
    torch.testing.assert_close(ret[on], torch.tensor(verl_ret))
    cnt, m1, m2 = masked_moments(adv, mask)
    white = whiten(adv, mask, m1, unbiased_var(cnt, m1, m2))
    torch.testing.assert_close(white[on], torch.tensor(verl_white))
    assert float(white[~on].abs().sum()) == 0


def test_unbiased_var_needs_two_values():
    assert unbiased_var(1, 3.0, 9.0) == 0.0
    assert unbiased_var(2, 1.0, 2.0) == pytest.approx(2.0)  # values 0 and 2


def test_clipped_value_loss_by_hand():
    # pos 0: both errors 0.25; pos 1: unclipped 4 beats clipped (1.5 - 0)^2 = 2.25;
    # pos 2: the new value hits the return (error 0), clipped to 0.5 it misses by 0.5: 0.25 (clipped counts)
    v, old, ret = t([1.0, 2.0, 1.0]), t([0.8, 1.0, 0.0]), t([1.5, 0.0, 1.0])
    loss, stats = clipped_value_loss(v, old, ret, t([1, 1, 1]), clip=0.5)
    assert float(loss) == pytest.approx(0.5 * (0.25 + 4 + 0.25) / 3)
    assert float(stats["value_clip_frac"]) == pytest.approx(1 / 3)
    plain, _ = clipped_value_loss(v, old, ret, t([1, 1, 1]), clip=None)
    assert float(plain) == pytest.approx(0.5 * (0.25 + 4 + 0) / 3)


def test_clipped_value_loss_ignores_tokens_off_the_mask_and_trains_the_new_values():
    v = t([1.0, 100.0]).requires_grad_()
    loss, _ = clipped_value_loss(v, t([1.0, 0.0]), t([2.0, 0.0]), t([1, 0]), clip=None)
    assert float(loss.detach()) == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(v.grad, t([-1.0, 0.0]))


def test_episode_gae_chains_an_episode_across_its_rows_and_adds_the_outcome_at_its_end():
    from tempering.algos.gae import episode_gae

    # episode 0 spans rows 0 and 1 (its second turn was sampled from a shortened context); episode 1 is row 2
    mask = t([0, 1, 1, 0], [0, 0, 1, 0], [0, 1, 1, 0])
    values = t([0, 0.1, 0.2, 0], [0, 0, 0.5, 0], [0, 0.3, 0.4, 0])
    rewards = t([0, 0, 0.3, 0], [0, 0, 0, 0], [0, 0, 0, 0])  # a turn-end term inside episode 0
    adv, ret = episode_gae(rewards, values, mask, torch.tensor([0, 0, 1]), t(1.0, -1.0), gamma=0.9, lam=0.8)
    # episode 0 is the multi-turn row of the test above, split over two rows: the same numbers
    torch.testing.assert_close(adv[0], t(0, 0.7352, 0.91, 0))
    torch.testing.assert_close(adv[1], t(0, 0, 0.5, 0))
    torch.testing.assert_close(ret[1], t(0, 0, 1.0, 0))
    # episode 1: A2 = -1 - 0.4 = -1.4; A1 = 0.9 * 0.4 - 0.3 + 0.72 * -1.4 = -0.948
    torch.testing.assert_close(adv[2], t(0, -0.948, -1.4, 0))
