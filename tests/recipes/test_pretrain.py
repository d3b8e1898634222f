"""The warm start on the one loop: given answers as the batch, their NLL, and the early-finish rule."""

import asyncio
import json

import pytest
import torch

from tempering.algos.losses import LossNorm
from tempering.config import build
from tempering.envs.registry import make_family
from tempering.errors import ConfigError
from tempering.methods import pretrain as pretrain_mod
from tempering.methods.pretrain import PretrainConfig, answer_nll, given_answer
from tempering.methods.rft import nll_loss
from tempering.models import char_tokenizer, tiny_model
from tempering.models.chat import ChatFormat
from tempering.train import loop
from tempering.train.batch import collate


def scripted_checks(monkeypatch, values):
    """Replace the held-out evaluation with a scripted pass@1 sequence (the last value repeats)."""
    calls = []

    async def fake_evaluate(*args, **kwargs):
        calls.append(1)
        return {"pass@1": values[min(len(calls) - 1, len(values) - 1)]}

    monkeypatch.setattr(loop, "evaluate", fake_evaluate)
    return calls


def config(tmp_path, steps=40, **run):
    return build(
        PretrainConfig,
        {
            "model": {"name": "tiny-xs"},
            "run": {
                "out_dir": str(tmp_path),
                "progress": False,
                "steps": steps,
                "eval_every": 2,
                "stop_at_pass": 0.2,
                "tensorboard": False,
                **run,
            },
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 9},
                "train_size": 50,
                "heldout_size": 10,
            },
            "rollout": {"prompts_per_step": 4},
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("stop_checks,want_steps", [(1, 4), (2, 10)])
def test_stops_after_enough_consecutive_checks(tmp_path, monkeypatch, stop_checks, want_steps):
    # checks at steps 2, 4, 6, 8, 10: a spike at step 4, then two in a row from step 8
    scripted_checks(monkeypatch, [0.0, 0.25, 0.1, 0.2, 0.3])
    res = pretrain_mod.pretrain(config(tmp_path, stop_checks=stop_checks))
    assert res["steps"] == want_steps and (tmp_path / "final" / "config.json").is_file()


@pytest.mark.slow
def test_runs_all_steps_without_a_target(tmp_path, monkeypatch):
    scripted_checks(monkeypatch, [1.0])
    res = pretrain_mod.pretrain(config(tmp_path, stop_at_pass=None, steps=6))
    assert res["steps"] == 6 and res["model"] == str(tmp_path / "final")
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "nll" in r]
    assert [r["step"] for r in trained] == [1, 2, 3, 4, 5, 6] and all(r["success"] == 1.0 for r in trained)


@pytest.mark.slow
def test_a_finished_warm_start_only_reports(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [0.0, 0.25])
    assert pretrain_mod.pretrain(config(tmp_path, stop_checks=1))["steps"] == 4  # finished early, of 40
    seen = len(calls)
    assert pretrain_mod.pretrain(config(tmp_path, stop_checks=1), resume=True)["steps"] == 4
    assert pretrain_mod.pretrain(config(tmp_path, steps=80, stop_checks=1), resume=True)["steps"] == 4
    assert len(calls) == seen  # nothing trained or evaluated again


@pytest.mark.slow
def test_a_resumed_warm_start_keeps_its_count_of_checks(tmp_path, monkeypatch):
    """Checks in a row before an interruption still count after the resume (the count is checkpointed)."""
    scripted_checks(monkeypatch, [0.0, 0.3])
    cfg = config(tmp_path, stop_checks=2, checkpoint_every=2)

    class StopAtStep4:
        def on_evaluation(self, step, metrics):
            return step == 4

    assert loop.Trainer(cfg, pretrain_mod.SPEC).run([StopAtStep4()])["stopped_at"] == 4
    assert pretrain_mod.pretrain(cfg, resume=True)["steps"] == 6  # hits at steps 4 and 6


def test_given_answers_are_the_batch_and_repairs_carry_feedback():
    tok = char_tokenizer()
    fmt = ChatFormat(tok, False, "{feedback}\n{prompt}", None)
    fam = make_family("arithmetic", min_value=10, max_value=99)
    tasks = fam.tasks("train", 40, seed=0)
    plain = given_answer(fmt, fam, tasks, 0.0, seed=0)
    e = plain(tasks[0])
    assert e.prompt_ids == fmt.prompt_ids(tasks[0].prompt)
    assert e.turns[0].action_ids == list(tok.encode(str(tasks[0].answer), add_special_tokens=False)) + [
        tok.eos_token_id
    ]
    repair = given_answer(fmt, fam, tasks, 0.5, seed=0)
    eps = [repair(t) for t in tasks]
    longer = [e for e, t in zip(eps, tasks) if len(e.prompt_ids) > len(fmt.prompt_ids(t.prompt))]
    assert 10 <= len(longer) <= 30  # about half, drawn once per task
    assert [repair(t).prompt_ids for t in tasks] == [e.prompt_ids for e in eps]  # the same draw every time
    assert all(e.turns[0].action_ids == plain(e.task).turns[0].action_ids for e in longer)


def test_answer_nll_is_the_plain_nll_from_the_first_answer_on():
    """The output layer runs only from the first answer position: the same loss and gradient."""
    model, tok = tiny_model("tiny-xs", seed=0), char_tokenizer()
    fmt = ChatFormat(tok, False, "{feedback}\n{prompt}", None)
    fam = make_family("arithmetic", min_value=0, max_value=999)
    tasks = fam.tasks("train", 6, seed=1)
    ep = given_answer(fmt, fam, tasks, 0.0, seed=0)
    batch = collate([ep(t) for t in tasks], tok.pad_token_id)
    norm = LossNorm(tokens=float(batch.mask_BT.sum()), seqs=float(batch.size), max_len=float(batch.mask_BT.shape[1]))
    settings = build(PretrainConfig, {}).loss.update_settings(1.0, 16)
    grads = []
    for fn in (answer_nll, nll_loss):
        model.zero_grad()
        loss, _ = fn(model, batch, norm, settings, {})
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (a, ga), (b, gb) = grads
    assert torch.allclose(a, b, atol=1e-6)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(ga, gb))


def test_keys_that_would_do_nothing_are_refused():
    with pytest.raises(ConfigError, match="rollout.group_size"):
        build(PretrainConfig, {"rollout": {"group_size": 4}})
    with pytest.raises(ConfigError, match="loss.mask_truncated=True has no effect"):
        build(PretrainConfig, {"loss": {"mask_truncated": True}})
    with pytest.raises(ConfigError, match="run.stop_checks=2 has no effect unless run.stop_at_pass"):
        build(PretrainConfig, {"run": {"stop_checks": 2}})


def test_the_loop_drives_it(tmp_path):
    """One step through the loop: the batch is the drawn tasks' given answers, one episode each."""
    t = loop.Trainer(config(tmp_path, steps=2, stop_at_pass=None, eval_every=0), pretrain_mod.SPEC)
    r = asyncio.run(t.step())
    assert len(r.groups) == 4 and all(len(g.episodes) == 1 for g in r.groups)
    assert r.metrics["env_calls"] == 0 and r.metrics["nll"] > 0


def test_max_seconds_finishes_after_the_step_that_passes_it(tmp_path, capsys):
    res = pretrain_mod.pretrain(config(tmp_path, steps=10, stop_at_pass=None, eval_every=0, max_seconds=1e-6))
    assert res["steps"] == 1 and (tmp_path / "final" / "config.json").is_file()
    assert "finishing at step 1 of 10: training ran past run.max_seconds=1e-06" in capsys.readouterr().out
