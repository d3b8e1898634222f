import pytest
import torch

from tempering.algos.advantages import grpo_advantage
from tempering.algos.tcpo import (
    TURN_DECAY,
    best_prior,
    counterfactual_credit,
    future_best,
    hindsight_credit,
    retrospective_credit,
    tcpo_advantage,
    zscore,
)


def T(x):
    return torch.tensor(x, dtype=torch.float32)


def test_best_prior_and_future_best():
    s, v = T([[[0.2, 0.5, 0.3]]]), torch.ones(1, 1, 3)
    assert best_prior(s, v)[0, 0].tolist() == pytest.approx([0.0, 0.2, 0.5])
    assert future_best(s, v)[0, 0].tolist() == pytest.approx([0.5, 0.5, 0.3])


def test_retrospective_progress_before_success():
    s, v = T([[[0.2, 0.5, 0.3]]]), torch.ones(1, 1, 3)
    assert retrospective_credit(s, v)[0, 0].tolist() == pytest.approx([0.2, 0.3, 0.0])


def test_retrospective_regression_after_success_and_preservation():
    s, v = T([[[1.0, 0.5, 1.0]]]), torch.ones(1, 1, 3)
    # turn 1: +1; turn 2: success held before, dropped by 0.5 -> -0.5; turn 3: back at the best -> +0.1
    assert retrospective_credit(s, v)[0, 0].tolist() == pytest.approx([1.0, -0.5, 0.1])


def test_hindsight_credits_non_improving_turns_that_lead_to_payoff():
    s = T([[[0.0, 1.0], [0.0, 0.0]]])
    v = torch.ones(1, 2, 2)
    h = hindsight_credit(s, v)
    # A turn 1: F=1 vs B's F=0 -> +1; B turn 1: 0 - 1 = -1; A turn 2 improved -> 0; B turn 2: 0 - 1 = -1
    assert h[0].flatten().tolist() == pytest.approx([1.0, 0.0, -1.0, -1.0])


def test_episode_that_ended_early_gets_nothing_past_its_end():
    s = T([[[0.5, 0.0], [0.0, 0.5]]])
    v = T([[[1, 0], [1, 1]]])
    assert hindsight_credit(s, v)[0, 0, 1] == 0.0
    assert hindsight_credit(s, v)[0, 1, 1] == 0.0  # B improved at turn 2; nobody else reached it
    adv = tcpo_advantage(s, v, mode="hindsight")
    assert adv[0, 0, 1] == 0.0


def test_all_equal_scores_give_zero_advantage():
    s, v = T([[[0.5, 0.5], [0.5, 0.5]]]), torch.ones(1, 2, 2)
    for mode in ("trajectory", "turn_reward", "score_diff", "retrospective", "hindsight", "full"):
        assert torch.count_nonzero(tcpo_advantage(s, v, mode=mode)) == 0


def test_trajectory_mode_is_grpo_on_the_final_score():
    s = T([[[0.0, 1.0], [0.5, 0.0], [0.2, 0.0]]])
    v = T([[[1, 1], [1, 0], [1, 1]]])
    adv = tcpo_advantage(s, v, mode="trajectory")
    want = grpo_advantage(T([[1.0, 0.5, 0.0]]))
    assert adv[0, :, 0].tolist() == pytest.approx(want[0].tolist(), rel=1e-5)
    assert adv[0, 1, 1] == 0.0


def test_counterfactual_replaces_the_other_components_at_selected_turns():
    s = T([[[0.0, 1.0], [0.0, 0.0]]])
    v = torch.ones(1, 2, 2)
    cf_mean, cf_mask = T([[[0.0, 0.25], [0.0, 0.0]]]), T([[[0, 1], [0, 0]]])
    assert counterfactual_credit(s, cf_mean, cf_mask)[0].tolist() == [[0.0, 0.75], [0.0, 0.0]]
    full = tcpo_advantage(s, v, mode="full", cf_mean_NGK=cf_mean, cf_mask_NGK=cf_mask)
    hind = tcpo_advantage(s, v, mode="hindsight")
    # turn 2: A's credit becomes 0.75 (was 1.0 retrospective), B's stays -1: z-scores of two values are +-0.707
    assert full[0, :, 1].tolist() == pytest.approx(hind[0, :, 1].tolist(), rel=1e-5)
    assert full[0, 0, 1] > full[0, 1, 1]


def test_counterfactual_credit_changes_the_turn_advantages_by_hand():
    """Three episodes reach turn 2 (final scores 1, 0.5, 0). Turn-2 credit without the counterfactual
    (retrospective + hindsight): 1, 0.5, -0.75. Resampling B's turn 2 with alternatives averaging 1.0 gives
    c_cf = 0.5 - 1.0 = -0.5 in its place: 1, -0.5, -0.75, and B's turn-2 advantage turns negative."""
    s = T([[[0.0, 1.0], [0.0, 0.5], [0.0, 0.0]]])
    v = torch.ones(1, 3, 2)
    cf_mean, cf_mask = T([[[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]]), T([[[0, 0], [0, 1], [0, 0]]])
    full = tcpo_advantage(s, v, mode="full", turn_decay=1.0, cf_mean_NGK=cf_mean, cf_mask_NGK=cf_mask)
    plain = tcpo_advantage(s, v, mode="full", turn_decay=1.0)
    # A_traj = GRPO of (1, 0.5, 0) = (1, 0, -1); turn-1 hindsight F - LOO mean: 0.75, 0, -0.75 -> z = 1, 0, -1
    assert full[0, :, 0].tolist() == pytest.approx([2.0, 0.0, -2.0], abs=1e-4)
    # z of (1, -0.5, -0.75): mean -1/12, unbiased std sqrt(0.895833)
    z_cf = [(c + 1 / 12) / 0.895833**0.5 for c in (1.0, -0.5, -0.75)]
    assert full[0, :, 1].tolist() == pytest.approx([1.0 + z_cf[0], z_cf[1], -1.0 + z_cf[2]], abs=1e-4)
    # z of (1, 0.5, -0.75): mean 0.25, unbiased std sqrt(0.8125)
    z = [(c - 0.25) / 0.8125**0.5 for c in (1.0, 0.5, -0.75)]
    assert plain[0, :, 1].tolist() == pytest.approx([1.0 + z[0], z[1], -1.0 + z[2]], abs=1e-4)
    assert full[0, 1, 1] < 0 < plain[0, 1, 1]
    # the counterfactual is TCPO's full mode only: the hindsight rung ignores it
    hind = tcpo_advantage(s, v, mode="hindsight", turn_decay=1.0, cf_mean_NGK=cf_mean, cf_mask_NGK=cf_mask)
    assert torch.allclose(hind, plain)


def test_two_episode_cells_normalise_to_plus_minus_0707_whatever_the_credit():
    """Per-(prompt, turn) z-scores keep the order of a two-episode cell, not the size of its credit."""
    s, v = T([[[0.0, 1.0], [0.0, 0.0]]]), torch.ones(1, 2, 2)
    mask = T([[[0, 1], [0, 0]]])
    traj = tcpo_advantage(s, v, mode="trajectory")
    for alt in (0.95, 0.1):  # c_cf = 0.05 or 0.9 for A's turn 2, B's stays -1
        adv = tcpo_advantage(s, v, turn_decay=1.0, cf_mean_NGK=mask * alt, cf_mask_NGK=mask)
        assert (adv - traj)[0, :, 1].tolist() == pytest.approx([2**-0.5, -(2**-0.5)], abs=1e-4)


def test_turn_decay_weighs_earlier_turns_more_by_default():
    s, v = T([[[0.0, 0.5, 1.0], [0.5, 0.0, 0.0]]]), torch.ones(1, 2, 3)
    traj = tcpo_advantage(s, v, mode="trajectory")
    turn = tcpo_advantage(s, v, mode="retrospective") - traj
    flat = tcpo_advantage(s, v, mode="retrospective", turn_decay=1.0) - traj
    assert TURN_DECAY < 1.0
    assert bool(flat[0, :, 2].abs().min() > 0)
    assert turn.flatten().tolist() == pytest.approx((flat * T([1.0, TURN_DECAY, TURN_DECAY**2])).flatten().tolist())


def test_zscore_per_turn_and_pooled():
    c = T([[[1.0, 2.0], [3.0, 0.0]]])
    v = T([[[1, 1], [1, 0]]])
    z = zscore(c, v, "turn")
    assert z[0, :, 0].tolist() == pytest.approx([-0.70710, 0.70710], rel=1e-4)
    assert z[0, 0, 1] == 0.0  # only one episode reached turn 2
    zg = zscore(c, v, "group")
    assert zg[0, 0, 1] == pytest.approx(0.0, abs=1e-6)  # 2 is the mean of 1, 2, 3


def test_bad_mode():
    with pytest.raises(ValueError):
        tcpo_advantage(torch.zeros(1, 2, 1), torch.ones(1, 2, 1), mode="magic")
