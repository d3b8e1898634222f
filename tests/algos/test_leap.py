import pytest
import torch

from tempering.algos.leap import dcp_expand, dcp_thresholds, rank_scores, rank_turn_credit

K = 3
FAIL = K + 1


def _scores(success, first, tokens=None, eff=False):
    return rank_scores(
        torch.tensor([success]), torch.tensor([first]), None if tokens is None else torch.tensor([tokens]), eff
    )[0]


def test_tournament_by_hand():
    s = _scores([1, 1, 0, 0], [1, 2, FAIL, FAIL])
    # A beats all three: 1; B loses to A, beats C, D: 1/3; C, D lose to A, B, tie each other: -2/3
    assert s.tolist() == pytest.approx([1.0, 1 / 3, -2 / 3, -2 / 3])
    assert float(s.sum()) == pytest.approx(0.0)


def test_all_fail_all_success_and_ties_are_zero():
    assert _scores([0, 0, 0, 0], [FAIL] * 4).tolist() == [0.0] * 4
    assert _scores([1, 1, 1, 1], [2, 2, 2, 2]).tolist() == [0.0] * 4


def test_single_late_success_gets_the_largest_signal():
    s = _scores([0, 0, 0, 1], [FAIL, FAIL, FAIL, 3])
    assert s.tolist() == pytest.approx([-1 / 3, -1 / 3, -1 / 3, 1.0])


def test_token_efficiency_breaks_ties_between_successes_only():
    s = _scores([1, 1, 0, 0], [1, 1, FAIL, FAIL], tokens=[10, 20, 5, 50], eff=True)
    assert s.tolist() == pytest.approx([1.0, 1 / 3, -2 / 3, -2 / 3])
    assert _scores([1, 1, 0, 0], [1, 1, FAIL, FAIL], tokens=[10, 20, 5, 50], eff=False).tolist() == pytest.approx(
        [2 / 3, 2 / 3, -2 / 3, -2 / 3]
    )


def test_turn_credit_discounts_positive_scores_back_in_time():
    s = torch.tensor([[1 / 3, -2 / 3]])
    turns = torch.tensor([[2, 3]])
    adv = rank_turn_credit(s, turns, K=3, gamma=0.5)
    assert adv[0, 0].tolist() == pytest.approx([1 / 6, 1 / 3, 0.0])  # 1/3 * 0.5^(2-1), 1/3, past the end
    assert adv[0, 1].tolist() == pytest.approx([-2 / 3] * 3)


def test_dcp_defaults_expand_half_to_all_but_one_failures():
    assert dcp_thresholds(8) == (4, 7)
    assert dcp_expand(torch.tensor([3, 4, 7, 8]), 8).tolist() == [False, True, True, False]
    assert dcp_expand(torch.tensor([0, 8]), 8, min_fail=0.0, max_fail=1.0).tolist() == [True, True]
