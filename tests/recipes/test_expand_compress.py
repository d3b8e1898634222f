import asyncio
import json

import pytest
import torch

from tempering.config import build
from tempering.envs.pool import weighted_pool
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.methods.tu_opd import TUOPDConfig
from tempering.models import char_tokenizer, save_policy, tiny_model
from tempering.recipes.expand_compress import expand_compress
from tempering.recipes.rgrpo import RGRPOConfig, rgrpo
from tempering.recipes.runner import trainer
from tempering.rollout.engine import RolloutStats
from tempering.train.batch import collate
from tempering.train.scoring import score

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 24, "heldout_size": 8}
SMALL = {
    "rollout": {"group_size": 2, "prompts_per_step": 4, "max_new_tokens": 4},
    "optim": {"lr": 3e-3},
    "run": {"steps": 1, "eval_every": 0, "eval_k": 2, "checkpoint_every": 0, "progress": False, "tensorboard": False},
}


def _with(model, out, **extra):
    d = json.loads(json.dumps({"model": {"name": str(model)}, "task": TASK, **SMALL}))
    d["run"]["out_dir"] = str(out)
    return {**d, **extra}


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh")
    save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), out)
    return out


def test_mixture_family_tags_and_interleaves_members():
    fam = make_family(
        "mixture",
        members={
            "add": {"family": "arithmetic", "args": {"max_value": 50}},
            "rev": {"family": "strings", "args": {"ops": ["rev"]}, "weight": 2},
        },
    )
    tasks = fam.tasks("train", 9)
    assert [t.family for t in tasks] == ["add", "rev"] * 3 + ["rev"] * 3  # shares by weight, interleaved
    assert len({t.id for t in tasks}) == 9 and tasks[0].id.startswith("add/")
    held = {t.id for t in fam.tasks("heldout", 30)}
    assert not held & {t.id for t in fam.tasks("train", 300)}
    rev = next(t for t in tasks if t.family == "rev")
    assert asyncio.run(fam.make_env(rev).step(rev.answer)).success
    with pytest.raises(UserError, match="needs a 'family'"):
        make_family("mixture", members={"x": {"args": {}}})


def test_weighted_pool_repeats_by_weight():
    tasks = list("abcd")
    pool = weighted_pool(tasks, torch.tensor([0.0, 1.0, 2.0, 1.5]), seed=0)
    assert pool.count("a") == 0 and pool.count("b") == 1 and pool.count("c") == 2 and pool.count("d") in (1, 2)


@pytest.mark.slow
def test_rgrpo_rounds_train_on_what_earlier_rounds_miss(pretrained_dir, tmp_path):
    cfg = build(RGRPOConfig, _with(pretrained_dir, tmp_path, rgrpo={"rounds": 2, "pass_samples": 2, "kappa": 0.5}))
    res = rgrpo(cfg)
    saved = json.loads((tmp_path / "pass_rates.json").read_text())
    p1 = [saved["tasks"][t]["round_1"] for t in saved["tasks"]]
    assert saved["train_examples"] == {"round_1": 24, "round_2": sum(p < 0.5 for p in p1)}
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert cov["all"]["teacher"][0] == pytest.approx(sum(p >= 0.5 for p in p1) / 24)
    assert cov["all"]["union"][1] >= cov["all"]["union"][0]
    assert "| round_2 |" in (tmp_path / "coverage.md").read_text()
    assert set(res["teachers"]) == {"round_1", "round_2"}
    before = (tmp_path / "round_1" / "final" / "model.safetensors").stat().st_mtime_ns
    assert rgrpo(cfg, resume=True) == res  # finished rounds are kept
    assert (tmp_path / "round_1" / "final" / "model.safetensors").stat().st_mtime_ns == before
    assert json.loads((tmp_path / "pass_rates.json").read_text()) == saved
    cfg.run.steps = 2  # a changed config is refused, not silently reused
    with pytest.raises(UserError, match=f"{tmp_path / 'round_1'} holds stage round_1 of another configuration"):
        rgrpo(cfg, resume=True)


def test_tu_opd_refuses_when_no_teacher_is_reliable_anywhere(pretrained_dir, fresh_dir, tmp_path):
    cfg = build(
        TUOPDConfig,
        _with(pretrained_dir, tmp_path, tu_opd={"teachers": {"random": {"path": str(fresh_dir)}}, "pass_samples": 2}),
    )
    with pytest.raises(UserError, match="nothing to distil"):
        trainer("tu-opd", cfg)
    cfg.tu_opd.empty = "grpo"  # falls back to GRPO on the task reward instead
    t = trainer("tu-opd", cfg, overwrite=True)  # the refused run left its folder, before any checkpoint
    asyncio.run(t.step())
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("tu_opd/grpo_fallback") == 1.0 for r in rows)


def test_tu_opd_checks_the_pass_rate_file(pretrained_dir, tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"tasks": {}}))
    cfg = build(
        TUOPDConfig,
        _with(
            pretrained_dir,
            tmp_path / "r",
            tu_opd={"teachers": {"a": {"path": str(pretrained_dir)}}, "pass_rates": str(tmp_path / "p.json")},
        ),
    )
    with pytest.raises(UserError, match="has no pass rates for training example"):
        trainer("tu-opd", cfg)
    with pytest.raises(UserError, match="needs teachers"):
        trainer("tu-opd", build(TUOPDConfig, _with(pretrained_dir, tmp_path / "r")))


def test_expand_compress_refuses_values_it_derives(tmp_path):
    from tempering.errors import ConfigError
    from tempering.recipes.expand_compress import ExpandCompressConfig

    for compress, key in [
        ({"task": {"family": "strings"}}, "compress.task"),
        ({"model": {"name": "tiny-m"}}, "compress.model.name"),
        ({"run": {"out_dir": "elsewhere"}}, "compress.run.out_dir"),
        ({"tu_opd": {"teachers": {"a": {"path": "x"}}}}, "compress.tu_opd.teachers"),
    ]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.") + " is derived"):
            build(ExpandCompressConfig, {"compress": compress})


def test_consensus_residual_credit_keeps_the_winners_excess(pretrained_dir, fresh_dir, tmp_path):
    """tu_opd.residual=true: the target is the reliable consensus plus the winner's excess over it; the
    credit of one step, recomputed by hand from the teachers' log-probs, and different from plain TU-OPD."""
    tasks = build(TUOPDConfig, _with(pretrained_dir, tmp_path)).task
    ids = [t.id for t in make_family(tasks.family, **tasks.args).tasks("train", tasks.train_size, seed=tasks.data_seed)]
    (tmp_path / "p.json").write_text(json.dumps({"tasks": {i: {"a": 0.9, "b": 0.6} for i in ids}}))
    teachers = {"a": {"path": str(pretrained_dir)}, "b": {"path": str(fresh_dir)}}
    adv = {}
    for residual in (True, False):
        tu = {"teachers": teachers, "pass_rates": str(tmp_path / "p.json"), "residual": residual}
        t = trainer("tu-opd", build(TUOPDConfig, _with(pretrained_dir, tmp_path / str(residual), tu_opd=tu)))
        t.sampler.generator.manual_seed(0)
        groups = asyncio.run(t.collector(t.sampler, t.state, RolloutStats())).groups
        batch = collate([e for g in groups for e in g.episodes], t.sampler.pad_id)
        scores = score(groups, batch, t.scorers)
        adv[residual] = t.method.credit(scores, batch, t.state).adv_BT
    la, lb = scores.teachers["a"].token_logp_BC, scores.teachers["b"].token_logp_BC
    consensus = 0.6 * la + 0.4 * lb  # weights 0.9 / 1.5 and 0.6 / 1.5; a is the winner
    m = batch.mask_BT
    torch.testing.assert_close(adv[True], (consensus + (la - consensus).clamp(min=0) - batch.sample_logp_BT) * m)
    torch.testing.assert_close(adv[False], (consensus - batch.sample_logp_BT) * m)
    assert bool(((la > lb) & (m > 0)).any()) and not torch.allclose(adv[True], adv[False])


@pytest.mark.slow
def test_expand_then_compress_end_to_end(pretrained_dir, tmp_path):
    """The compress stage distils the expand stage's rounds, gated by the pass rates the expand stage
    measured: on every step, the share of episodes whose task no round reaches rho on falls back to GRPO,
    and the count of reliable teachers per episode is the one pass_rates.json gives."""
    stage = json.loads(json.dumps(SMALL))
    compress = json.loads(json.dumps(SMALL))
    compress["run"].update(steps=2, log_samples=8)  # every episode of a step (4 prompts x 2) in samples.jsonl
    res = expand_compress(
        {
            "run": {"out_dir": str(tmp_path)},
            "expand": {
                "model": {"name": str(pretrained_dir)},
                "task": TASK,
                **stage,
                "rgrpo": {"rounds": 2, "pass_samples": 2, "kappa": 0.5},
            },
            "compress": {**compress, "tu_opd": {"rho": 0.5, "residual": True, "empty": "grpo"}},
        }
    )
    assert {"teacher round_1", "teacher round_2", "student final"} <= set(res)
    c = json.loads(json.dumps(__import__("yaml").safe_load((tmp_path / "compress" / "config.yaml").read_text())))
    assert c["tu_opd"]["pass_rates"] == str(tmp_path / "expand" / "pass_rates.json")
    assert set(c["tu_opd"]["teachers"]) == {"round_1", "round_2"} and c["model"]["name"] == str(pretrained_dir)
    assert c["tu_opd"]["residual"] is True
    rates = json.loads((tmp_path / "expand" / "pass_rates.json").read_text())["tasks"]
    reliable = {tid: sum(p >= 0.5 for p in row.values()) for tid, row in rates.items()}
    samples = [json.loads(x) for x in (tmp_path / "compress" / "samples.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (tmp_path / "compress" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "tu_opd/reliable_teachers" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        n = [reliable[x["task"]] for x in samples if x["step"] == r["step"]]
        assert len(n) == 8
        assert r["tu_opd/reliable_teachers"] == pytest.approx(sum(n) / 8)
        assert r["tu_opd/grpo_fallback"] == pytest.approx(sum(k == 0 for k in n) / 8)
