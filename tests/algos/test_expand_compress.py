import pytest
import torch

from tempering.algos.expand_compress import (
    consensus_residual_advantage,
    coverage_report,
    covered,
    reliability_weights,
    residual_weights,
    teacher_weights,
    tu_opd_advantage,
)

# two teachers, four examples
P = torch.tensor([[0.9, 0.1, 0.0, 0.5], [0.0, 0.75, 0.25, 0.5]])


def test_coverage_by_hand():
    assert covered(P[:1]).tolist() == [True, False, False, True]
    rep = coverage_report(P, kappa=0.5)
    assert rep["teacher"] == pytest.approx([0.5, 0.5])
    assert rep["union"] == pytest.approx([0.5, 0.75])
    assert rep["added"] == pytest.approx([0.5, 0.25])
    assert rep["overlap"][0][1] == pytest.approx(1 / 3)  # {0, 3} vs {1, 3}
    assert rep["overlap"][1][1] == 1.0


def test_residual_weights():
    assert residual_weights(P[:1]).tolist() == [0.0, 1.0, 1.0, 0.0]  # round 2 trains on what round 1 misses
    assert residual_weights(P).tolist() == [0.0, 0.0, 1.0, 0.0]
    assert residual_weights(P, upweight=1.0).tolist() == [1.0, 1.0, 2.0, 1.0]


def test_teacher_weights_by_hand():
    p = torch.tensor([[0.9, 0.3, 0.6], [0.1, 0.2, 0.0]])
    assert reliability_weights(p, 0.5)[0].tolist() == pytest.approx([0.6, 0.0, 0.4])
    assert reliability_weights(p, 0.5)[1].tolist() == [0.0, 0.0, 0.0]  # nothing reliable: nothing to distil
    assert teacher_weights(p, 0.5, "uniform", True)[0].tolist() == pytest.approx([0.5, 0.0, 0.5])
    assert teacher_weights(p, 0.5, "uniform", False)[1].tolist() == pytest.approx([1 / 3] * 3)
    assert teacher_weights(p, 0.5, "quality", False)[1].tolist() == pytest.approx([1 / 3, 2 / 3, 0.0])


# one token, two teachers: log pi_1 = -1, log pi_2 = -2; student -1.5
LT = torch.tensor([[[-1.0, -2.0], [0.0, 0.0]]])
LS = torch.tensor([[-1.5, 0.0]])
M = torch.tensor([[1.0, 0.0]])


def test_tu_opd_advantage_by_hand():
    adv = tu_opd_advantage(LT, LS, torch.tensor([[0.6, 0.4]]), M)
    assert adv[0].tolist() == pytest.approx([0.6 * 0.5 + 0.4 * -0.5, 0.0])
    assert tu_opd_advantage(LT, LS, torch.zeros(1, 2), M).abs().sum() == 0


def test_consensus_residual_by_hand():
    # winner 1 (q = .6) lies above the consensus -1.4 by 0.4: target -1.0, advantage 0.5
    assert consensus_residual_advantage(LT, LS, torch.tensor([[0.6, 0.4]]), M)[0].tolist() == pytest.approx([0.5, 0.0])
    assert consensus_residual_advantage(LT, LS, torch.tensor([[0.6, 0.4]]), M, eta=0.5)[0].tolist() == pytest.approx(
        [0.3, 0.0]
    )
    # winner 2 (q = .6) lies below the consensus -1.6: no residual, same as TU-OPD
    q = torch.tensor([[0.4, 0.6]])
    assert consensus_residual_advantage(LT, LS, q, M)[0].tolist() == pytest.approx(
        tu_opd_advantage(LT, LS, q, M)[0].tolist()
    )
    assert consensus_residual_advantage(LT, LS, torch.zeros(1, 2), M).abs().sum() == 0
