"""The statistics rule of every results page, on numbers computed by hand."""

import math

import pytest

from tempering.errors import UserError
from tempering.experiments import Arm, claims_table, interval, judge, sign_flip_p, t975, verdict


def test_t_quantiles_match_scipy_over_every_degree_of_freedom():
    stats = pytest.importorskip("scipy.stats")
    assert t975(2) == pytest.approx(4.3027, abs=1e-4)
    for df in range(1, 400):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-5), df


def test_interval_of_three_differences():
    """d = 4, 5, 6: mean 5, sd 1, half-width t(0.975, 2) / sqrt(3) = 4.3027 / 1.7321 = 2.4841."""
    iv = interval([4.0, 5.0, 6.0])
    assert (iv.n, iv.mean, iv.sd) == (3, 5.0, 1.0)
    assert iv.ci95 == pytest.approx((2.5159, 7.4841), abs=1e-4)
    one = interval([2.0])
    assert one.mean == 2.0 and math.isnan(one.ci95[0])
    with pytest.raises(ValueError, match="finite"):
        interval([1.0, float("nan")])


def test_sign_flip_p_counts_the_sign_assignments_at_least_as_extreme():
    assert sign_flip_p([4, 5, 6]) == 1 / 8  # only + + + reaches 15
    assert sign_flip_p([-1, 2, 3]) == 2 / 8  # sums 6 (+ + +) and 4 (- + +) reach 4
    assert sign_flip_p([0, 0, 0]) == 1.0  # every assignment ties
    assert sign_flip_p([1, 2, 3], threshold=-1) == 1 / 8  # 2, 3, 4 after the threshold
    assert sign_flip_p([-4, -5, -6]) == 1.0
    assert sign_flip_p([1.0] * 17) is None


def test_verdicts_from_the_interval():
    up, mid, down = interval([4, 5, 6]), interval([1, 2, 3]), interval([-6, -5, -4])  # [2.52, 7.48], [-0.48, 4.48]
    assert verdict(up)[0] == "reproduced"
    assert verdict(mid)[0] == "inconclusive"
    assert verdict(down)[0] == "not reproduced"
    assert verdict(up, higher_is_better=False)[0] == "not reproduced"  # lower was claimed
    assert verdict(down, higher_is_better=False)[0] == "reproduced"
    # a claimed size of 8 points lies above the whole interval; 7 inside it
    assert verdict(up, effect=8.0) == (
        "not reproduced",
        "the interval, better positive, is [+2.52, +7.48]: below the claimed +8 points",
    )
    assert verdict(up, effect=7.0)[0] == "reproduced"
    # no worse by more than 1 point: [-0.48, 4.48] lies above -1; [-6.48, -1.52] wholly below it
    assert verdict(mid, margin=1.0)[0] == "reproduced"
    assert verdict(interval([-5, -4, -3]), margin=1.0)[0] == "not reproduced"
    assert verdict(interval([-2, -1, 0]), margin=1.0)[0] == "inconclusive"  # [-3.48, +1.48]
    with pytest.raises(ValueError, match="margin"):
        verdict(up, margin=-1.0)


def test_fewer_than_three_seeds_give_no_verdict():
    assert verdict(interval([40, 50])) == ("inconclusive", "2 seeds; a verdict needs at least 3")
    assert verdict(interval([40])) == ("inconclusive", "1 seed; a verdict needs at least 3")


def _arm(name, values, heldout="sums 300", rollouts=960.0):
    return Arm(name, dict(enumerate(values)), heldout, rollouts)


def test_judge_pairs_seeds_and_writes_the_record():
    c = judge(_arm("tcpo", [0.50, 0.60, 0.70]), _arm("grpo", [0.46, 0.55, 0.64]))
    d = c["difference_points"]
    assert d["per_seed"] == pytest.approx([4, 5, 6]) and d["seeds"] == [0, 1, 2]
    assert d["mean"] == pytest.approx(5) and d["ci95"] == pytest.approx([2.5159, 7.4841], abs=1e-4)
    assert (c["a"], c["b"], c["verdict"], c["p_sign_flip"]) == ("tcpo", "grpo", "reproduced", 1 / 8)
    # lower is better (turns to success): the same numbers refute the claim
    assert judge(_arm("tcpo", [0.50, 0.60, 0.70]), _arm("grpo", [0.46, 0.55, 0.64]), higher_is_better=False)[
        "verdict"
    ] == ("not reproduced")
    # a fixed model (a warm start) has no rollout budget to match
    start = Arm("start", {0: 0.4, 1: 0.4, 2: 0.4}, "sums 300", None)
    assert judge(_arm("tcpo", [0.5, 0.6, 0.7]), start)["difference_points"]["per_seed"] == pytest.approx([10, 20, 30])


def test_judge_refuses_arms_that_differ_and_names_them():
    with pytest.raises(UserError, match="arm `grpo` was scored on another held-out set"):
        judge(_arm("tcpo", [0.5] * 3), _arm("grpo", [0.4] * 3, heldout="sums 200"))
    with pytest.raises(UserError, match="arm `grpo` trained on 480 rollouts, `tcpo` on 960"):
        judge(_arm("tcpo", [0.5] * 3), _arm("grpo", [0.4] * 3, rollouts=480.0))
    with pytest.raises(UserError, match=r"arm `grpo` lacks seed\(s\) \[2\]"):
        judge(_arm("tcpo", [0.5] * 3), _arm("grpo", [0.4] * 2))
    with pytest.raises(UserError, match=r"arm `tcpo` lacks seed\(s\) \[2\]"):
        judge(_arm("tcpo", [0.5] * 2), _arm("grpo", [0.4] * 3))


def test_the_claims_table_reads_every_word_from_the_records():
    claims = {
        "TCPO beats GRPO": judge(_arm("tcpo", [0.50, 0.60, 0.70]), _arm("grpo", [0.46, 0.55, 0.64])),
        "TCPO is no worse than LEAP": judge(_arm("tcpo", [0.5, 0.6]), _arm("leap", [0.4, 0.6]), margin=2.0),
    }
    rows = claims_table(claims)
    assert rows[2] == "| TCPO beats GRPO | `tcpo` | `grpo` | higher | +5.0 | [+2.5, +7.5] | 3 | 0.125 | reproduced |"
    assert rows[3].endswith("| higher, margin 2 | +5.0 | [-58.5, +68.5] | 2 | 0.250 | inconclusive |")
    assert rows[5] == "No test on fewer than 3 seeds: 1 of these claims get no verdict either way."
