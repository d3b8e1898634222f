import asyncio
import json

import pytest

from tempering import cli
from tempering.config import build
from tempering.errors import ConfigError
from tempering.methods.opd import DistillConfig
from tempering.methods.tu_opd import TUOPDConfig
from tempering.models import char_tokenizer, load_policy, save_policy, tiny_model
from tempering.recipes.runner import trainer
from tempering.teachers import HFTeacher

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 200, "heldout_size": 10}


def _cfg(student, teacher, out, steps=2, **distill):
    return build(
        DistillConfig,
        {
            "model": {"name": str(student)},
            "teacher": {"path": str(teacher)},
            "task": TASK,
            "distill": distill,
            "rollout": {"group_size": 4, "prompts_per_step": 6, "max_new_tokens": 4},
            "optim": {"lr": 3e-3},
            "run": {
                "steps": steps,
                "out_dir": str(out),
                "eval_every": 0,
                "eval_k": 2,
                "checkpoint_every": 0,
                "progress": False,
                "tensorboard": False,
            },
        },
    )


@pytest.mark.parametrize("loss", ["reverse_kl", "jsd_topk", "jsd_full"])
def test_a_teacher_identical_to_the_student_gives_no_signal(pretrained_dir, tmp_path, loss):
    extra = {"top_k": 8} if loss == "jsd_topk" else {}
    t = trainer("distill", _cfg(pretrained_dir, pretrained_dir, tmp_path, loss=loss, **extra))
    m = asyncio.run(t.step()).metrics
    assert m["policy_loss"] == pytest.approx(0.0, abs=1e-5)
    assert m["grad_norm"] == pytest.approx(0.0, abs=1e-3)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("distill/reverse_kl") == pytest.approx(0.0, abs=1e-5) for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["reverse_kl", "jsd_topk"])
def test_distillation_pulls_a_fresh_student_toward_the_teacher(pretrained_dir, tmp_path, loss):
    extra = {"top_k": 8, "beta": 1.0} if loss == "jsd_topk" else {}
    cfg = _cfg("tiny-xs", pretrained_dir, tmp_path, steps=12, loss=loss, **extra)
    cfg.optim.lr = 1e-2
    t = trainer("distill", cfg)
    for _ in range(12):
        asyncio.run(t.step())
    kl = [
        r["distill/reverse_kl"]
        for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
        if "distill/reverse_kl" in r
    ]
    assert sum(kl[-3:]) < 0.8 * sum(kl[:3])  # the sampled reverse KL to the teacher falls


class Recording(HFTeacher):
    def score(self, prompts, responses, *a, **kw):
        self.seen = [self.tokenizer.decode(p) for p in prompts]
        return super().score(prompts, responses, *a, **kw)


def test_the_teacher_sees_privileged_context_the_student_does_not(pretrained_dir, tmp_path):
    model, tok = load_policy(str(pretrained_dir))
    teacher = Recording(model, tok)
    cfg = _cfg(pretrained_dir, pretrained_dir, tmp_path)
    cfg.teacher.prompt = "answer {answer}: {prompt}"
    t = trainer("distill", cfg, teacher=teacher)
    r = asyncio.run(t.step())
    e = r.groups[0].episodes[0]
    assert tok.decode(e.prompt_ids) == e.task.prompt  # the student saw the plain prompt
    assert teacher.seen[0] == f"answer {e.task.answer}: {e.task.prompt}"
    assert r.metrics["policy_loss"] != pytest.approx(0.0, abs=1e-4)  # same weights, different context: a signal


def _fails(argv, capsys, match):
    assert cli.main(argv) == 2
    assert match in capsys.readouterr().err


def test_bad_input_is_refused_with_a_clear_message(pretrained_dir, tmp_path, capsys):
    base = [
        "distill",
        f"model.name={pretrained_dir}",
        f"run.out_dir={tmp_path / 'r'}",
        "task.train_size=50",
        "task.heldout_size=5",
        "run.progress=false",
    ]
    _fails(base + [f"teacher.path={tmp_path / 'nope'}"], capsys, "does not exist")
    _fails(base, capsys, "teacher: Field required")
    _fails(
        base + [f"teacher.path={pretrained_dir}", "distill.loss=jsd_topk", "distill.top_k=1000"],
        capsys,
        "larger than the vocabulary",
    )
    _fails(
        base
        + [
            "teacher.server=http://127.0.0.1:9",
            "teacher.served_model=t",
            f"teacher.tokenizer={pretrained_dir}",
            "distill.loss=jsd_full",
        ],
        capsys,
        "only an in-process teacher",
    )
    other = char_tokenizer()
    other.add_tokens(["<extra>"])
    save_policy(tiny_model("tiny-xs"), other, tmp_path / "odd")
    _fails(  # another vocabulary: aligned by text spans, which only the sampled-token loss can use
        base + [f"teacher.path={tmp_path / 'odd'}", "distill.loss=jsd_topk"],
        capsys,
        "distill.loss=jsd_topk compares next-token distributions over one vocabulary",
    )


@pytest.mark.parametrize("key, value", [("temperature", 0.7), ("temperature", 0.0), ("top_k", 5), ("top_p", 0.9)])
def test_sampling_another_distribution_than_the_teacher_scores_is_refused(tmp_path, key, value):
    """The teacher scores at temperature 1 over the whole vocabulary; a tempered or truncated student would
    make the reverse-KL advantage compare two different distributions."""
    for schema, extra in ((DistillConfig, {"teacher": {"path": str(tmp_path)}}), (TUOPDConfig, {})):
        with pytest.raises(ConfigError, match=rf"rollout.{key}={value}: .*sample with rollout.temperature=1"):
            build(schema, {**extra, "rollout": {key: value}})
        build(schema, {**extra, "rollout": {key: {"temperature": 1.0, "top_k": 0, "top_p": 1.0}[key]}})
