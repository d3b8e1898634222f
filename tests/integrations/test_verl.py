"""The verl adapter: verl's batch layout -> tempering's turn tensors (hand-computed), and, in verl's own
environment, that verl's registries return tempering's functions with tempering's numbers."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tempering.integrations.verl import credit_estimator, ppo_clip_policy_loss, turn_index, verl_to_turns

HERE = Path(__file__).parent


def test_turns_are_runs_of_the_response_mask():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0, 0, 0]])
    turn, n = turn_index(mask)
    assert turn.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1], [-1, 0, 0, 0, 0, 0, 0, 0]]
    assert n.tolist() == [2, 1]


def test_verl_rows_become_groups_of_turns():
    # rows of two groups interleaved (uids a, b, a, b); per-turn scores on each turn's last token
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    rew = torch.tensor([[0, 0.2, 0, 0, 1.0], [0, 0, 0.5, 0, 0], [0.3, 0, 0, 0, 0], [0, 1.0, 0, 0, 0]])
    tt, group, slot = verl_to_turns(rew, mask, np.array(["a", "b", "a", "b"], dtype=object))
    assert group.tolist() == [0, 1, 0, 1] and slot.tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(tt.scores_NGK, torch.tensor([[[0.2, 1.0], [0.3, 0.0]], [[0.5, 0.0], [1.0, 0.0]]]))
    assert tt.valid_NGK.tolist() == [[[1, 1], [1, 0]], [[1, 0], [1, 0]]]
    assert tt.tokens_NGK.tolist() == [[[2, 2], [1, 0]], [[3, 0], [2, 0]]]
    assert tt.success_NGK.tolist() == [[[0, 1], [0, 0]], [[0, 0], [1, 0]]]
    torch.testing.assert_close(tt.rewards_NG, torch.tensor([[1.0, 0.3], [0.5, 1.0]]))
    with pytest.raises(ValueError, match="groups of equal size; got sizes \\[1, 3\\]"):
        verl_to_turns(rew, mask, np.array(["a", "b", "b", "b"], dtype=object))


def test_grpo_estimator_on_single_turn_rows():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    rew = torch.tensor([[0, 1.0, 0], [0, 0, 0.0], [1.0, 0, 0], [0, 1.0, 0]])
    adv, ret = credit_estimator("grpo")(rew, mask, index=np.array(["a", "a", "b", "b"], dtype=object))
    # group a: rewards (1, 0): mean 0.5, unbiased std 0.7071 -> +-0.5 / 0.7071; group b: equal rewards -> 0
    a = 0.5 / 0.5**0.5
    want = torch.tensor([[a, a, 0], [-a, -a, -a], [0, 0, 0], [0, 0, 0]])
    torch.testing.assert_close(adv, want, atol=1e-5, rtol=0)
    assert ret is adv


def test_leap_estimator_on_a_two_turn_group():
    # one group of two: episode 0 fails turn 1 and succeeds turn 2; episode 1 fails its only turn
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]])
    rew = torch.tensor([[0, 0.0, 0, 0, 1.0], [0, 0, 0.4, 0, 0]])
    adv, _ = credit_estimator("leap", gamma=0.5)(rew, mask, index=["q", "q"])
    # rank scores +1 / -1; the success reaches turn 1 discounted by gamma: 0.5, then 1; the failure gets -1
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5, 0.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 0, 0]]))


def test_ppo_clip_loss_uses_verls_global_token_count():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5, 0.5]]))
    adv = torch.tensor([[1.0, 2.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    cfg = {"clip_ratio": 0.2, "clip_ratio_c": 3.0, "global_batch_info": {"dp_size": 2, "batch_num_tokens": 12}}
    loss, stats = ppo_clip_policy_loss(logp, logp, adv, mask, "token-mean", cfg)
    # ratio 1: loss = -(1 + 2 - 1) / (12 / 2) (verl averages gradients over its 2 dp ranks)
    assert float(loss) == pytest.approx(-2.0 / 6.0)
    weights = torch.tensor([[2.0, 0.5, 1.0, 1.0]])
    loss_w, _ = ppo_clip_policy_loss(logp, logp, adv, mask, "token-mean", cfg, rollout_is_weights=weights)
    assert float(loss_w) == pytest.approx(-(2.0 + 1.0 - 1.0) / 6.0)
    assert "actor/tempering_clip_frac_high" in stats and "actor/tempering_dual_clip_frac" in stats
    # token-sum: this rank's sum, doubled so that verl's average over its 2 dp ranks is the global sum
    assert float(ppo_clip_policy_loss(logp, logp, adv, mask, "token-sum", cfg)[0]) == pytest.approx(-2.0 * 2)
    with pytest.raises(ValueError, match="supports loss_agg_mode"):
        ppo_clip_policy_loss(logp, logp, adv, mask, "token-sum-norm", cfg)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_verl_registries_return_tempering_functions_with_the_same_numbers():
    sys.path.insert(0, str(HERE))
    from verl_env import ensure_verl_python

    py = ensure_verl_python()
    res = subprocess.run([str(py), str(HERE / "verl_check.py")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["transformers"].startswith("5.") and int(report["transformers"].split(".")[1]) < 11
    assert report["registered_by_plugin"] is True  # loaded by `import verl`, no explicit call
    assert set(report["estimators"]) >= {"tempering_grpo", "tempering_rloo", "tempering_leap", "tempering_tcpo"}
    for name, diff in report["estimator_max_diff"].items():
        assert diff < 1e-6, name
    assert report["grpo_vs_verl_grpo"] < 1e-5  # tempering's GRPO = verl's own on groups of 4
    assert report["loss_vs_tempering"] < 1e-7
    assert report["loss_vs_verl_vanilla"] < 1e-6
