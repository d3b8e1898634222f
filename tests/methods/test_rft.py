"""Rejection fine-tuning: which episodes are kept, the NLL on their action tokens only, and a step that
keeps nothing leaves the policy untouched."""

import asyncio

import pytest
import torch

from tempering.methods.rft import RFTSection, kept_credit, nll_loss, rejection, rejection_filter
from tempering.recipes.runner import trainer
from tempering.train.batch import collate
from tempering.train.scoring import Scores
from tempering.train.update import UpdateSettings, policy_logprobs
from tempering.types import Episode, Group, Task, Turn

TASK = Task(id="t", prompt="p")


def ep(reward, *turns, task=TASK, stop="done", truncated=False):
    return Episode(
        task=task,
        prompt_ids=[1, 2],
        turns=[
            Turn(action_ids=list(a), logprobs=[-0.5] * len(a), feedback_ids=[7], status=s, truncated=truncated)
            for a, s in turns
        ],
        stop_reason=stop,
        reward=reward,
    )


def test_rejection_reasons():
    r = RFTSection()
    assert rejection(ep(1.0, ([3, 4], "correct")), r) is None
    assert rejection(ep(0.0, ([3, 4], "correct")), r) == "reward"  # reward must be > 0
    assert rejection(ep(1.0, ([3], "tool_error"), ([4], "correct")), r) == "invalid_call"
    assert rejection(ep(1.0, ([3], "parse_error"), ([4], "correct")), r) == "invalid_call"
    assert rejection(ep(1.0, ([3], "correct"), stop="env_error"), r) == "invalid_call"
    assert rejection(ep(1.0, ([3, 4], "incorrect"), ([3, 4], "correct")), r) == "loop"
    assert rejection(ep(1.0, ([3, 4], "incorrect"), ([5], "x"), ([3, 4], "correct")), r) is None  # not in a row
    assert rejection(ep(1.0, ([3], "correct"), truncated=True), r) == "truncated"
    loose = RFTSection(min_reward=-2, reject_statuses=[], reject_loops=False, reject_truncated=False)
    assert rejection(ep(-1.0, ([3], "tool_error"), ([3], "tool_error"), truncated=True), loose) is None


def test_filter_dedupes_and_credit_masks_rejected_episodes_and_feedback():
    other = Task(id="u", prompt="p")
    groups = [
        Group(TASK, [ep(1.0, ([3, 4], "c")), ep(1.0, ([3, 4], "c")), ep(0.0, ([5], "c"))]),
        Group(
            other,
            [
                ep(1.0, ([3, 4], "c"), task=other),
                ep(2.0, ([6], "w"), ([8], "c"), task=other),
                ep(1.0, ([9], "c"), task=other),
            ],
        ),
    ]
    episodes = [e for g in groups for e in g.episodes]
    batch = collate(episodes, pad_id=0)
    scores = rejection_filter(RFTSection())(groups, batch, Scores.of(groups))
    # group 0: the second copy is a duplicate, the third has reward 0; the same actions for another task are kept
    assert scores.extras["keep"].tolist() == [[1, 0, 0], [1, 1, 1]]
    assert scores.metrics["rft/kept"] == pytest.approx(4 / 6)
    assert scores.metrics["rft/rejected_duplicate"] == pytest.approx(1 / 6)
    c = kept_credit(scores, batch, {})
    # row 4: prompt (2), turn 1 action, feedback, turn 2 action, feedback: only the two actions are trained on
    assert c.mask_BT[4].tolist()[:6] == [0, 0, 1, 0, 1, 0]
    assert c.mask_BT[1].sum() == 0 and c.mask_BT[2].sum() == 0
    assert torch.equal(c.adv_BT, c.mask_BT)


def test_nll_is_the_mean_negative_log_prob_of_the_kept_tokens(tiny):
    model, _ = tiny
    episodes = [ep(1.0, ([3, 4], "c"), ([5], "c")), ep(1.0, ([6], "c"))]
    batch = collate(episodes, pad_id=0)
    logp, _ = policy_logprobs(model, batch)
    loss, stats = nll_loss(model, batch, None, UpdateSettings(share_prefix=False), {})
    m = batch.mask_BT
    assert float(loss.detach()) == pytest.approx(float(-(logp.detach() * m).sum() / m.sum()), rel=1e-5)
    assert m.sum() == 4  # feedback tokens are not trained on


def _cfg(model, out, **rft):
    return {
        "model": {"name": model},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 40,
            "heldout_size": 4,
        },
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 4, "max_turns": 2},
        "rft": rft,
        "run": {"steps": 1, "out_dir": str(out), "eval_every": 0, "eval_k": 1, "progress": False, "tensorboard": False},
    }


def test_rft_trains_on_kept_episodes_and_skips_a_step_that_keeps_none(pretrained_dir, tmp_path):
    t = trainer("rft", _cfg(pretrained_dir, tmp_path / "a", min_reward=-1.0, reject_truncated=False))
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    m = asyncio.run(t.step()).metrics
    assert m["rft/kept"] > 0 and m["nll"] > 0 and m["loss_tokens"] > 0
    assert any(not torch.equal(before[k], v) for k, v in t.model.state_dict().items())

    none = trainer("rft", _cfg(pretrained_dir, tmp_path / "b", min_reward=5.0))
    before = {k: v.clone() for k, v in none.model.state_dict().items()}
    m = asyncio.run(none.step()).metrics
    assert m["rft/kept"] == 0 and m["update_skipped"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in none.model.state_dict().items())


def test_rft_has_no_clip_keys():
    """RFT's loss is plain NLL: its `loss` section has no PPO clip, so a clip key is an unknown key."""
    from tempering.config import build
    from tempering.errors import ConfigError
    from tempering.methods.rft import RFTConfig

    with pytest.raises(ConfigError, match="unknown key 'loss.clip_high'; .*allowed here: loss_agg, ppo_epochs"):
        build(RFTConfig, {"loss": {"clip_high": 0.3}})
