"""Guided OPD and dual-level GRPO through the shared recipes: a teacher prompt built from the
student's own sample reaches the teacher per episode; the experiment script runs end to end."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tempering.algos.advantages import grpo_advantage
from tempering.config import build
from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.states import GuiStateFamily, most_matched_prompt, sample_of
from tempering.methods.opd import DistillConfig
from tempering.methods.rl import TrainConfig
from tempering.models import char_tokenizer
from tempering.models.chat import ChatFormat
from tempering.recipes.runner import trainer
from tempering.rollout.sampler import Sample
from tempering.teachers import HFTeacher
from tempering.teachers.prompts import requests, sees_sample
from tempering.types import Episode, Task, Turn

ROOT = Path(__file__).resolve().parents[2]


def test_a_sample_aware_builder_is_called_per_episode():
    fmt = ChatFormat(char_tokenizer(), use_chat_template=False)
    task = Task(id="t", prompt="P")
    raw = {"t": Task(id="t", prompt="RAW")}
    eps = [
        Episode(task, fmt.prompt_ids("P"), [Turn(fmt.prompt_ids(x), [0.0] * len(x), info={"text": x})])
        for x in ("ab", "abcd")
    ]

    @sees_sample
    def by_sample(t: Task, e: Episode) -> str:
        return f"{t.prompt}|{e.turns[0].info['text']}"

    prompts, conts, offsets = requests(eps, fmt, by_sample, raw)
    assert [fmt.tokenizer.decode(p) for p in prompts] == ["RAW|ab", "RAW|abcd"]
    assert conts == [fmt.prompt_ids("ab"), fmt.prompt_ids("abcd")] and offsets == [1, 1]
    prompts, _, _ = requests(eps, fmt, lambda t: t.prompt + "!", raw)  # plain builders: once per task
    assert [fmt.tokenizer.decode(p) for p in prompts] == ["RAW!", "RAW!"]


class SpyTeacher(HFTeacher):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.prompts: list[list[int]] = []

    def score(self, prompts, responses, *a, **kw):
        self.prompts += prompts
        return super().score(prompts, responses, *a, **kw)


def _run(out, steps=1):
    return {
        "model": {"name": "tiny-xs"},
        "task": {"family": "gui_states", "train_size": 12, "heldout_size": 2},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 12},
        "run": {
            "steps": steps,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 1,
            "checkpoint_every": 0,
            "progress": False,
            "tensorboard": False,
        },
    }


def test_guided_opd_teacher_reads_most_matched_guidance_for_each_sample(tiny, tmp_path):
    model, tok = tiny
    spy = SpyTeacher(model, tok)
    fam = GuiStateFamily()
    cfg = build(DistillConfig, {**_run(tmp_path / "opd"), "teacher": {"path": "given-in-code"}})
    t = trainer("distill", cfg, family=fam, teacher=spy, teacher_prompt=most_matched_prompt)
    step = asyncio.run(t.step())
    episodes = [e for g in step.groups for e in g.episodes]
    assert len(spy.prompts) == len(episodes) == 4
    for e, p in zip(episodes, spy.prompts):
        text = tok.decode(p)
        assert text == most_matched_prompt(t.raw[e.task.id], e)
        assert text.startswith(e.task.prompt + "\nHint: a correct action is ")  # the student's prompt has no hint
        assert "Hint" not in tok.decode(e.prompt_ids)
    rows = [json.loads(x) for x in (tmp_path / "opd" / "metrics.jsonl").read_text().splitlines()]
    assert any("distill/reverse_kl" in r for r in rows)


class ScriptedOutputs:
    """A sampler that answers each recorded state with fixed outputs, one per episode of its group."""

    def __init__(self, sampler, outputs):
        self.inner, self.outputs, self.seen = sampler, outputs, {}

    def sample(self, prompts, params):
        out = []
        for p in prompts:
            text = self.inner.tokenizer.decode(p)
            k = self.seen[text] = self.seen.get(text, -1) + 1
            ids = self.inner.tokenizer.encode(self.outputs(text)[k], add_special_tokens=False)
            out.append(Sample(ids + [self.inner.tokenizer.eos_token_id], [-1.0] * (len(ids) + 1), False))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.slow
def test_dual_level_grpo_trains_on_recorded_states(tmp_path):
    """Per group: the demonstrated action, another valid one, a well-formed invalid one, and garbage. The
    dual reward (format 0.5 + action 0.5, over all valid actions) gives 1, 1, 0.5, 0, where the single-GT
    reward gives the second one only its format half; GRPO turns these into the update's advantages."""
    fam_args = {"weights": {"format": 0.5, "action": 0.5, "plan": 0.0}, "multi_only": True}
    rewards = {}
    for reference in ("all", "demonstrated"):
        fam = GuiStateFamily(**fam_args, reference=reference)
        by_prompt = {t.prompt: sample_of(t) for t in fam.tasks("train", 12)}

        def outputs(prompt):
            s = by_prompt[prompt]
            other = next(a for a in s.valid if a != s.demonstrated)
            return [s.target, format_output(other, []), format_output(Action("click", "99"), []), "not json"]

        cfg = build(
            TrainConfig, {**_run(tmp_path / reference), "rollout": {**_run(tmp_path)["rollout"], "group_size": 4}}
        )
        t = trainer("train", cfg, family=fam)
        t.sampler = ScriptedOutputs(t.sampler, outputs)
        before = [p.detach().clone() for p in t.model.parameters()]
        step = asyncio.run(t.step())
        rewards[reference] = [[e.reward for e in g.episodes] for g in step.groups]
        if reference == "all":
            assert rewards["all"] == [[1.0, 1.0, 0.5, 0.0]] * 2
            rows = [json.loads(x) for x in (tmp_path / reference / "samples.jsonl").read_text().splitlines()]
            want = grpo_advantage(torch.tensor([[1.0, 1.0, 0.5, 0.0]]))[0].tolist()
            assert [r["turns"][0]["advantage"] for r in rows[:4]] == pytest.approx(want, rel=1e-5)
            assert any(not torch.equal(a, p) for a, p in zip(before, t.model.parameters()))
    assert all(r[1] < 1.0 for r in rewards["demonstrated"])  # single-GT: the other valid action misses
    assert [[r[0], r[2], r[3]] for r in rewards["demonstrated"]] == [[1.0, 0.5, 0.0]] * 2


@pytest.mark.slow
def test_experiment_script_smoke(tmp_path):
    out = tmp_path / "litegui"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples/litegui/experiment.py"),
            "--smoke",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "runs"),
            "--plan",
            "stage1_steps=2",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert set(data["arms"]) == {
        "sft",
        "grpo_single_gt",
        "grpo_dual",
        "opd_single_gt",
        "opd_multi_gt",
        "opd_most_matched",
        "opd_most_matched+grpo_dual",
        "primed",
        "primed_grpo_dual",
        "primed_opd_most_matched_large",
        "primed_opd_most_matched_large+grpo_dual",
    }
    for arm in data["arms"].values():
        for m in ("step_success", "task_success", "format_rate"):
            s = arm[m]
            assert len(s["values"]) == 2 and 0.0 <= s["min"] <= s["mean"] <= s["max"] <= 1.0 and s["std"] >= 0.0
    for warm in ("sft", "primed"):  # shared warm starts, evaluated greedily
        assert data["arms"][warm]["step_success"]["std"] == 0.0
    assert data["plan"]["stage1_steps"] == 2  # --plan changed it, and the table says so
    assert set(data["priming"]) == {"1"} and set(data["priming"]["1"]) == {"success", "format"}
    md = out.with_suffix(".md").read_text()
    assert "| `opd_most_matched` |" in md and "--smoke" in md
    assert "| `primed_opd_most_matched_large` |" in md and "stage1_steps 2 (committed plan: 40)" in md
    assert f"after 1 steps: format rate {data['priming']['1']['format']:.3f}" in md
