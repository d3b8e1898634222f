import asyncio
import json

import pytest
import torch

from tempering import cli
from tempering.algos.direct_opd import adaptive_alpha
from tempering.algos.losses import LossNorm, aggregate
from tempering.config import build
from tempering.methods.direct_opd import DirectOPDConfig
from tempering.models import char_tokenizer, load_policy, save_policy, tiny_model
from tempering.recipes.runner import run, trainer
from tempering.rollout.engine import RolloutStats
from tempering.train.batch import collate
from tempering.train.loop import training_batch
from tempering.train.scoring import score
from tempering.train.update import token_logprobs

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 200, "heldout_size": 10}


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory):
    """An untrained tiny-xs: a teacher 'before RL' that differs from the warm-started one."""
    out = tmp_path_factory.mktemp("fresh")
    save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), out)
    return out


def _cfg(student, pairs, out, steps=2, **d):
    return build(
        DirectOPDConfig,
        {
            "model": {"name": str(student)},
            "task": TASK,
            "direct_opd": {
                "pairs": [{"teacher": {"path": str(t)}, "reference": {"path": str(r)}} for t, r in pairs],
                "top_k": 8,
                **d,
            },
            "rollout": {"group_size": 4, "prompts_per_step": 6, "max_new_tokens": 4},
            "optim": {"lr": 3e-3},
            "loss": {"clip_low": 0.2, "clip_high": 0.2},
            "run": {
                "steps": steps,
                "out_dir": str(out),
                "eval_every": 0,
                "eval_k": 2,
                "checkpoint_every": 1,
                "progress": False,
                "tensorboard": False,
            },
        },
    )


def _credit_rows(run):
    return [
        r
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "delta_opd/weighted_reward_mean" in r
    ]


def test_a_pair_without_shift_gives_no_signal(pretrained_dir, tmp_path):
    t = trainer("direct-opd", _cfg(pretrained_dir, [(pretrained_dir, pretrained_dir)], tmp_path))
    m = asyncio.run(t.step()).metrics
    row = _credit_rows(tmp_path)[0]
    assert row["delta_opd/weighted_reward_mean"] == 0.0 and row["direct_opd/shift_abs"] == 0.0
    assert m["policy_loss"] == 0.0 and m["kl_start"] == pytest.approx(
        0.0, abs=1e-6
    )  # the student is still at its start
    assert t.state["alpha"] == 2.5  # sign(0) = 0


def test_first_on_policy_ratio_is_one_when_sampling_tempered_and_filtered(pretrained_dir, fresh_dir, tmp_path):
    """Every log-prob of Direct-OPD is of the untempered policy, the old ones included: sampling at T = 0.6
    with top-k does not move the first ratio off 1, so the PPO loss is -sum_k A_k exactly."""
    cfg = _cfg(pretrained_dir, [(pretrained_dir, fresh_dir)], tmp_path)
    cfg.rollout.temperature, cfg.rollout.top_k = 0.6, 5
    t = trainer("direct-opd", cfg)
    groups = asyncio.run(t.collector(t.sampler, t.state, RolloutStats())).groups
    batch = collate([e for g in groups for e in g.episodes], t.sampler.pad_id)
    scores = score(groups, batch, t.scorers)
    mb = training_batch(batch, scores, t.method.credit(scores, batch, t.state))
    m = mb.mask_BT.bool()
    untempered, _ = token_logprobs(t.model, mb)
    assert (batch.sample_logp_BT - untempered.detach())[m].abs().max() > 0.1  # the sampler's are another distribution
    norm = LossNorm.of(mb.mask_BT)
    _, stats = t.method.loss.fn(t.model, mb, norm, t.settings, t.state)
    want = aggregate(-mb.extra["cand_adv"].sum(-1), mb.mask_BT, "token-mean", norm)
    assert float(want) != 0.0
    assert float(stats["policy_loss"]) == pytest.approx(float(want), rel=1e-4, abs=1e-7)
    assert float(stats["clip_frac_low"]) == float(stats["clip_frac_high"]) == 0.0


def _anchor(t):
    return next(s.teacher for s in t.scorers if getattr(s, "name", "") == "anchor")


@pytest.mark.slow
@pytest.mark.parametrize("order", ["before_update", "after_update"])
def test_alpha_follows_the_hand_computed_schedule_and_resumes(pretrained_dir, fresh_dir, tmp_path, order):
    cfg = _cfg(pretrained_dir, [(pretrained_dir, fresh_dir)], tmp_path, steps=4, alpha=1.0, alpha_order=order)
    t = trainer("direct-opd", cfg)
    for _ in range(3):
        asyncio.run(t.step())
    rows = _credit_rows(tmp_path)
    assert len(rows) == 3 and any(r["delta_opd/weighted_reward_mean"] != 0 for r in rows)
    # official order: this step's rbar moves alpha before this step's update; after_update lags one step
    moved, used = 1.0, []
    for r in rows:
        prev = moved
        moved *= (
            1.01
            if r["delta_opd/weighted_reward_mean"] > 0
            else 0.99
            if r["delta_opd/weighted_reward_mean"] < 0
            else 1.0
        )
        used.append(moved if order == "before_update" else prev)
    assert [r["state/alpha"] for r in rows] == pytest.approx(used)
    t.save()
    again = trainer("direct-opd", cfg, resume=True)
    assert again.step_no == 3 and again.state == pytest.approx(t.state)
    asyncio.run(again.step())
    r4 = _credit_rows(tmp_path)[-1]
    want = adaptive_alpha(moved, r4["delta_opd/weighted_reward_mean"], 0.01, 0.5, 2.5)
    assert r4["state/alpha"] == pytest.approx(want if order == "before_update" else moved)
    # the KL anchor is the student's start, not the resumed weights
    start, _ = load_policy(str(pretrained_dir))
    anchor = next(iter(_anchor(again).model.parameters()))
    assert torch.equal(anchor, next(iter(start.parameters())))
    assert not torch.equal(anchor, next(iter(again.model.parameters())))


@pytest.mark.slow
def test_pairs_compose_one_after_another(pretrained_dir, fresh_dir, tmp_path):
    cfg = _cfg(pretrained_dir, [(pretrained_dir, fresh_dir), (fresh_dir, pretrained_dir)], tmp_path, steps=1)
    hist = run("direct-opd", cfg)
    assert list(hist) == ["start", "after pair 1", "after pair 2"]
    assert all((tmp_path / f"pair_{i}" / "stage.json").is_file() for i in (1, 2))
    assert run("direct-opd", cfg, resume=True) == hist  # finished stages only report
    import yaml

    second = yaml.safe_load((tmp_path / "pair_2" / "config.yaml").read_text())
    assert second["model"]["name"] == str(tmp_path / "pair_1" / "final")  # starts (and anchors) at stage 1's end
    first = _credit_rows(tmp_path / "pair_2")[0]  # alpha restarts from direct_opd.alpha = 2.5
    assert first["state/alpha"] == pytest.approx(
        adaptive_alpha(2.5, first["delta_opd/weighted_reward_mean"], 0.01, 0.5, 2.5)
    )
    assert (tmp_path / "pair_2" / "final" / "model.safetensors").is_file()


def test_bad_input(pretrained_dir, tmp_path, capsys):
    argv = [
        "direct-opd",
        f"model.name={pretrained_dir}",
        f"run.out_dir={tmp_path}",
        "task.train_size=50",
        "task.heldout_size=5",
        f"direct_opd.pairs=[{{teacher: {{path: {pretrained_dir}}}, reference: {{path: {tmp_path / 'missing'}}}}}]",
    ]
    assert cli.main(argv) == 2
    assert "does not exist" in capsys.readouterr().err
    argv[-1] = f"direct_opd.pairs=[{{teacher: {{path: {pretrained_dir}}}, reference: {{path: {pretrained_dir}}}}}]"
    assert cli.main(argv + ["direct_opd.top_k=500"]) == 2
    assert "larger than the vocabulary" in capsys.readouterr().err
    assert cli.main(argv[:-1]) == 2
    assert "direct_opd: Field required" in capsys.readouterr().err
