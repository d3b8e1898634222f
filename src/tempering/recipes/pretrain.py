"""`tempering pretrain`: supervised warm start on a task family's (prompt, answer) pairs.

Gives RL a policy with non-zero reward. It can stop early once greedy held-out pass@1 reaches a
target, which leaves room for RL to show what it adds.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import Field
from safetensors.torch import load_file

from tempering.config import Schema
from tempering.envs.base import StepResult, TaskFamily
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.evaluation import evaluate
from tempering.models import load_policy, save_policy
from tempering.models.chat import ChatFormat
from tempering.progress import Reporter, count_parameters, human, warn
from tempering.rollout.engine import RolloutOptions, format_feedback
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.runlog import RunLog, atomic_write_text, prepare_run_dir
from tempering.train.checkpoint import latest_checkpoint, load_trainer_state, rng_state, save_checkpoint, set_rng_state
from tempering.train.config import ModelSection, RolloutSection, RunBase, TaskSection
from tempering.train.cursor import PromptCursor
from tempering.train.optim import make_optimizer, make_scheduler

RESULT = "result.json"
"""Written when the run stops: what `pretrain()` returns (a resume of a finished run reads it)."""


class PretrainSection(Schema):
    batch_size: int = Field(64, ge=1, description="Examples per step.")
    lr: float = Field(1e-3, gt=0, description="Peak learning rate (AdamW, warm-up then constant).")
    warmup_steps: int = Field(50, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    stop_at_pass: float | None = Field(
        None, ge=0, le=1, description="Stop once held-out pass@1 reaches this (None: run all steps)."
    )
    stop_checks: int = Field(
        1,
        ge=1,
        description="Consecutive checks at or above stop_at_pass before stopping (more: the warm start has settled, not spiked).",
    )
    max_seconds: float | None = Field(None, gt=0, description="Stop after this much wall-clock time.")
    max_new_tokens: int = Field(16, ge=1, description="Answer token limit during the checks.")
    repair_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of two-turn repair examples: a corrupted answer, the verifier's feedback, then the right answer (teaches the policy to use feedback).",
    )


class PretrainRun(RunBase):
    steps: int = Field(1500, ge=1, description="Maximum optimizer steps.")
    out_dir: str = Field("runs/pretrain", description="Run folder; the model is saved to OUT_DIR/model.")
    eval_every: int = Field(100, ge=1, description="Greedy held-out pass@1 every N steps.")
    eval_size: int | None = Field(200, ge=1, description="Held-out prompts per periodic check (default: all).")
    checkpoint_every: int = Field(250, ge=0, description="Checkpoint every N steps (0 = only when the run stops).")
    keep_checkpoints: int = Field(2, ge=1, description="Complete checkpoints kept on disk.")


class PretrainConfig(Schema):
    model: ModelSection = Field(
        default_factory=ModelSection, description="Model to train (a tiny size starts from scratch)."
    )
    task: TaskSection = Field(default_factory=TaskSection, description="Task family providing (prompt, answer) pairs.")
    train: PretrainSection = Field(default_factory=PretrainSection, description="Optimisation and stopping.")
    run: PretrainRun = Field(default_factory=PretrainRun, description="Length, seed, folder and held-out checks.")


def answer_loss(model, ids: torch.Tensor, attn: torch.Tensor, labels: torch.Tensor, first: int) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens (`labels` != -100, none before position `first`), with the
    output layer applied only from the first answer on: with a real vocabulary it is most of the cost."""
    dev = model.device
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return model(input_ids=ids.to(dev), attention_mask=attn.to(dev), labels=labels.to(dev)).loss
    keep = torch.arange(first - 1, ids.shape[1] - 1, device=dev)  # the positions that predict an answer token
    logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), logits_to_keep=keep).logits
    target = labels[:, first:].to(dev)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100)


def _examples(fmt: ChatFormat, tasks, eos_id: int) -> list[tuple[list[int], list[int]]]:
    """(context, target) pairs; the loss covers the target only."""
    return [
        (fmt.prompt_ids(t.prompt), list(fmt.tokenizer.encode(str(t.answer), add_special_tokens=False)) + [eos_id])
        for t in tasks
    ]


def _corrupt(answer: str, rng: random.Random, alphabet: str) -> str:
    chars = list(answer)
    for i in rng.sample(range(len(chars)), k=rng.randint(1, max(1, len(chars) // 3))):
        chars[i] = rng.choice([c for c in alphabet if c != chars[i]] or alphabet)
    return "".join(chars)


def _repair_examples(fmt: ChatFormat, family, tasks, eos_id: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Two-turn examples: prompt, a corrupted answer, the verifier's feedback, then the right answer."""
    if not hasattr(family, "check"):
        raise UserError(
            f"pretrain.train.repair_share needs a family with a check() verifier; {type(family).__name__} has none"
        )
    rng = random.Random(seed)
    alphabet = "".join(sorted({c for t in tasks for c in str(t.answer)}))
    defaults = RolloutSection()
    out = []
    for t in tasks:
        wrong = _corrupt(str(t.answer), rng, alphabet)
        score, ok, feedback, status = family.check(t, wrong)
        if ok:
            continue
        message = format_feedback(defaults.feedback_templates, StepResult(score, ok, False, feedback, status))
        enc = lambda s: list(fmt.tokenizer.encode(s, add_special_tokens=False))
        ctx = fmt.prompt_ids(t.prompt) + enc(wrong) + [eos_id] + fmt.feedback_ids(message, t.prompt)
        out.append((ctx, enc(str(t.answer)) + [eos_id]))
    return out


def pretrain(
    cfg: PretrainConfig, resume: bool = False, overwrite: bool = False, family: TaskFamily | None = None
) -> dict[str, Any]:
    """Supervised warm start; checkpoints like `train` (model, optimizer, scheduler, data cursor, RNGs and
    the stopping rule's count), so `resume=True` continues exactly and a finished run only reports.
    `family` overrides `cfg.task` (e.g. one shared with later stages)."""
    out = Path(cfg.run.out_dir)
    prepare_run_dir(out, resume, overwrite)
    if resume and (out / RESULT).is_file():
        done = yaml.safe_load((out / "config.yaml").read_text())["run"]["steps"]
        if cfg.run.steps != done:  # its stopping rule may have ended it early: more steps would not continue it
            raise UserError(
                f"{out} is a finished warm start (run.steps={done}), and one is not extended: start a new run "
                f"from its model instead: tempering pretrain model.name={out / 'model'} run.out_dir=NEW_DIR"
            )
        warn(f"{out} is finished; nothing to do")
        return json.loads((out / RESULT).read_text())
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    t_start = time.perf_counter()
    hits = 0  # consecutive checks at or above stop_at_pass
    family = family or make_family(cfg.task.family, **cfg.task.args)
    train_tasks = family.tasks("train", cfg.task.train_size, seed=cfg.task.data_seed)
    heldout = family.tasks("heldout", cfg.task.heldout_size, seed=cfg.task.data_seed)
    c = cfg.model
    model, tok = load_policy(c.name, seed=cfg.run.seed, dtype=c.dtype, device=c.device, tokenizer=c.tokenizer)
    fmt = ChatFormat(tok, cfg.model.use_chat_template, RolloutSection().feedback_template, cfg.model.system_prompt)
    examples = _examples(fmt, train_tasks, tok.eos_token_id)
    if cfg.train.repair_share > 0:
        n = (
            round(len(examples) * cfg.train.repair_share / (1 - cfg.train.repair_share))
            if cfg.train.repair_share < 1
            else len(examples)
        )
        examples += _repair_examples(
            fmt, family, train_tasks[:n] if n <= len(train_tasks) else train_tasks, tok.eos_token_id, cfg.run.seed
        )
    sampler = HFSampler(model, tok, seed=cfg.run.seed)
    opts = RolloutOptions(sampling=SamplingParams(max_new_tokens=cfg.train.max_new_tokens, temperature=0.0))
    t = cfg.train
    opt = make_optimizer(model, t.lr, t.weight_decay, (0.9, 0.999))
    sched = make_scheduler(opt, t.warmup_steps, cfg.run.steps, "constant")
    cursor = PromptCursor(len(examples), cfg.run.seed)
    start, spent = 0, 0.0
    gens = {"sampler": sampler.generator}
    if resume:
        ckpt = latest_checkpoint(out, warn=warn)
        model.load_state_dict(load_file(ckpt / "model" / "model.safetensors"), strict=False)
        s = load_trainer_state(ckpt)
        opt.load_state_dict(s["optimizer"])
        sched.load_state_dict(s["scheduler"])
        cursor.load_state_dict(s["cursor"])
        set_rng_state(s["rng"], gens)
        start, hits, spent = s["step"], s["hits"], s["seconds"]
    log = RunLog(
        out,
        cfg.model_dump(mode="json"),
        resume_step=start if resume else None,
        tensorboard=cfg.run.tensorboard,
        wandb=cfg.run.wandb,
        title=f"{out.name} · pretrain · {cfg.model.name}",
        plots=["loss", "heldout_pass@1", "grad_norm", "lr"],
    )

    def save(step: int) -> None:
        state = {
            "step": step,
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "cursor": cursor.state_dict(),
            "rng": rng_state(gens),
            "hits": hits,
            "seconds": spent + time.perf_counter() - t_start,
        }
        save_checkpoint(out, step, model, tok, state, cfg.run.keep_checkpoints)

    pad = tok.pad_token_id
    best: dict[str, Any] = {"heldout_pass@1": 0.0}
    step = start
    report = Reporter(cfg.run.steps, "pretrain", log_every=cfg.run.log_every, bar=cfg.run.progress, start=start)
    total, _ = count_parameters(model)
    report.summary(
        {
            "model": f"{cfg.model.name} ({human(total)} parameters, {cfg.model.dtype})",
            "device": str(model.device),
            "task": f"{cfg.task.family}: {len(examples)} examples / {len(heldout)} held-out prompts",
            "steps": f"up to {cfg.run.steps} x {t.batch_size} examples",
            "run folder": str(out),
            **({"resuming from step": str(start)} if resume else {}),
        }
    )
    with report:
        for step in range(start + 1, cfg.run.steps + 1):
            rows = [examples[i] for i in cursor.next(t.batch_size)]
            T = max(len(p) + len(a) for p, a in rows)
            ids = torch.full((len(rows), T), pad, dtype=torch.long)
            labels = torch.full((len(rows), T), -100, dtype=torch.long)
            attn = torch.zeros((len(rows), T), dtype=torch.long)
            for b, (p, a) in enumerate(rows):
                seq = p + a
                ids[b, : len(seq)] = torch.tensor(seq)
                labels[b, len(p) : len(seq)] = torch.tensor(a)
                attn[b, : len(seq)] = 1
            model.train()
            loss = answer_loss(model, ids, attn, labels, min(len(p) for p, _ in rows))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            metrics: dict[str, float] = {"loss": loss.item(), "grad_norm": float(gnorm), "lr": sched.get_last_lr()[0]}
            stop = t.max_seconds is not None and spent + time.perf_counter() - t_start > t.max_seconds
            if step % cfg.run.eval_every == 0 or step == cfg.run.steps or stop:
                checked = heldout[: cfg.run.eval_size]
                ev = asyncio.run(evaluate(sampler, fmt, family, checked, opts, k=1, sampled=False))
                metrics["heldout_pass@1"] = ev["pass@1"]
                if t.stop_at_pass is not None:
                    hits = hits + 1 if ev["pass@1"] >= t.stop_at_pass else 0
                    stop = stop or hits >= t.stop_checks
            log.log(step, metrics)
            report.step(step, metrics)
            if "heldout_pass@1" in metrics:
                report.evaluation(step, {"greedy pass@1": metrics["heldout_pass@1"]}, len(checked))
                log.plot()
            if stop:
                break
            if cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0:
                save(step)
    save(step)
    final = asyncio.run(evaluate(sampler, fmt, family, heldout, opts, k=1, sampled=False))
    report.evaluation(step, {"greedy pass@1": final["pass@1"]}, len(heldout), "final evaluation")
    model_dir = save_policy(model, tok, out / "model")
    log.plot()
    log.close()
    best.update(
        {
            "heldout_pass@1": final["pass@1"],
            "steps": step,
            "seconds": spent + time.perf_counter() - t_start,
            "model": str(model_dir),
        }
    )
    atomic_write_text(out / RESULT, json.dumps(best, indent=1) + "\n")
    return best


def run(cfg: PretrainConfig, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """`tempering pretrain`: pre-train, say where the model went, and hand the CLI its held-out table."""
    res = pretrain(cfg, resume=resume, overwrite=overwrite)
    print(
        f"saved {res['model']}: held-out pass@1 {res['heldout_pass@1']:.3f} after {res['steps']} steps ({res['seconds']:.0f}s)"
    )
    return {"final": {"heldout_pass@1": res["heldout_pass@1"]}}
