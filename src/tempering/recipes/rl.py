"""`tempering train`: RL with verifiable rewards (GRPO and relatives), single- or multi-turn.

One step: draw prompts -> roll out groups -> shape rewards -> credit (advantage per turn) -> the one
policy update -> log; evaluate and checkpoint on schedule. Methods differ only in `loss.advantage`
(the credit function) and rollout options.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from tempering.algos.advantages import zero_std_groups
from tempering.algos.credit import resolve_credit, turn_tensors
from tempering.algos.leap import dcp_expand
from tempering.algos.losses import kl_estimate
from tempering.algos.shaping import overlong_penalty
from tempering.config import Schema, load_config
from tempering.envs.base import TaskFamily
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.evaluation import evaluate
from tempering.models import load_policy, save_policy
from tempering.models.chat import ChatFormat
from tempering.recipes.config import LossSection, ModelSection, OptimSection, RolloutSection, RunSection, TaskSection
from tempering.rollout.engine import CounterfactualOptions, RolloutOptions, RolloutStats, rollout
from tempering.rollout.sampler import HFSampler
from tempering.runlog import RunLog
from tempering.train.batch import TrainBatch, broadcast_turn_adv, collate
from tempering.train.checkpoint import latest_checkpoint, load_trainer_state, rng_state, save_checkpoint, set_rng_state
from tempering.train.cursor import PromptCursor
from tempering.train.optim import make_optimizer, make_scheduler
from tempering.train.update import LossFn, batch_logprobs, policy_update, ppo_loss
from tempering.types import Group


class TrainConfig(Schema):
    """The RL recipe (`tempering train`)."""

    model: ModelSection = Field(default_factory=ModelSection, description="The policy.")
    task: TaskSection = Field(default_factory=TaskSection, description="Training and held-out tasks.")
    rollout: RolloutSection = Field(default_factory=RolloutSection, description="Sampling and turns.")
    loss: LossSection = Field(default_factory=LossSection, description="Credit and policy loss.")
    optim: OptimSection = Field(default_factory=OptimSection, description="Optimizer and schedule.")
    run: RunSection = Field(default_factory=RunSection, description="Length, logging, evaluation, checkpoints.")


@dataclass
class StepResult:
    step: int
    metrics: dict[str, float]
    groups: list[Group] = field(default_factory=list)


class RLTrainer:
    """Holds the state of one RL run; `step()` advances it by one batch."""

    loss_fn: LossFn = staticmethod(ppo_loss)
    """The policy loss of the update (methods with their own loss, e.g. distillation, replace it)."""

    def __init__(self, cfg: TrainConfig, family: TaskFamily | None = None, resume: bool = False):
        self.credit_fn = resolve_credit(cfg.loss.advantage, cfg.loss.credit_args)
        self.cfg = cfg
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        torch.manual_seed(cfg.run.seed)
        self.family = family or make_family(cfg.task.family, **cfg.task.args)
        self.train_tasks = self.family.tasks("train", cfg.task.train_size, seed=cfg.task.data_seed)
        self.heldout_tasks = self.family.tasks("heldout", cfg.task.heldout_size, seed=cfg.task.data_seed)
        if not self.train_tasks:
            raise UserError(f"task family {cfg.task.family!r} gave no training tasks")
        self.model, self.tokenizer = load_policy(
            cfg.model.name, seed=cfg.run.seed, dtype=cfg.model.dtype, device=cfg.model.device
        )
        if cfg.model.lora_rank:
            from tempering.models.lora import add_lora

            self.model = add_lora(
                self.model, cfg.model.lora_rank, cfg.model.lora_alpha, target_modules=cfg.model.lora_targets
            )
        self.fmt = ChatFormat(
            self.tokenizer, cfg.model.use_chat_template, cfg.rollout.feedback_template, cfg.model.system_prompt
        )
        self.sampler = HFSampler(self.model, self.tokenizer, seed=cfg.run.seed)
        if cfg.rollout.backend == "vllm":
            from tempering.rollout.vllm_sampler import make_vllm_sampler

            self.sampler = make_vllm_sampler(
                self.model, self.tokenizer, cfg.run.out_dir, cfg.run.seed, cfg.rollout.vllm
            )
        elif cfg.rollout.backend == "ray":
            from tempering.rollout.ray_workers import RaySampler

            r = cfg.rollout.ray
            self.sampler = RaySampler(
                self.model,
                self.tokenizer,
                r.num_workers,
                cfg.run.seed,
                r.num_cpus_per_worker,
                r.num_gpus_per_worker,
                address=r.address,
            )
        self.train_model = self.model
        """The module the update runs on: `model` itself, or its DDP/FSDP form in data-parallel training."""
        self.ref_model = None
        if cfg.loss.kl_coef > 0:  # beta = 0 never loads or runs a reference model
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = make_optimizer(self.model, cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.betas)
        self.scheduler = make_scheduler(
            self.optimizer, cfg.optim.warmup_steps, cfg.run.steps, cfg.optim.schedule, cfg.optim.min_lr_ratio
        )
        self.cursor = PromptCursor(len(self.train_tasks), cfg.run.seed)
        self.update_gen = torch.Generator().manual_seed(cfg.run.seed + 1)
        self.step_no = 0
        self.opts = rollout_options(cfg)
        self.settings = cfg.loss.update_settings(
            cfg.rollout.temperature, cfg.rollout.max_new_tokens * cfg.rollout.max_turns
        )
        resume_step = None
        if resume:
            resume_step = self._load(latest_checkpoint(Path(cfg.run.out_dir)))
            if hasattr(self.sampler, "sync_weights"):  # the sampler's own copy still has the starting weights
                self.sampler.sync_weights(self.model)
        self.log = self.open_log(resume_step)

    def open_log(self, resume_step: int | None) -> RunLog:
        """The run folder's writer (data-parallel ranks other than 0 write nothing)."""
        c = self.cfg
        return RunLog(c.run.out_dir, c.model_dump(mode="json"), resume_step=resume_step, tensorboard=c.run.tensorboard)

    # ---- state -------------------------------------------------------------------------------
    def _generators(self) -> dict[str, torch.Generator]:
        return {"sampler": self.sampler.generator, "update": self.update_gen}

    def save(self) -> Path:
        state = {
            "step": self.step_no,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "cursor": self.cursor.state_dict(),
            "rng": rng_state(self._generators()),
            "ref_model": self.ref_model.state_dict() if self.ref_model is not None else None,
            **self.extra_state(),
        }
        return save_checkpoint(
            Path(self.cfg.run.out_dir), self.step_no, self.model, self.tokenizer, state, self.cfg.run.keep_checkpoints
        )

    def extra_state(self) -> dict[str, Any]:
        """Method state saved with each checkpoint besides the model, optimizer, cursor and RNGs."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` saved."""

    def _load(self, ckpt: Path) -> int:
        from safetensors.torch import load_file

        if self.cfg.model.lora_rank:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, load_file(ckpt / "model" / "adapter_model.safetensors"))
        else:
            self.model.load_state_dict(load_file(ckpt / "model" / "model.safetensors"), strict=False)
        s = load_trainer_state(ckpt)
        self.optimizer.load_state_dict(s["optimizer"])
        self.scheduler.load_state_dict(s["scheduler"])
        self.cursor.load_state_dict(s["cursor"])
        set_rng_state(s["rng"], self._generators())
        if self.ref_model is not None and s.get("ref_model") is not None:
            self.ref_model.load_state_dict(s["ref_model"])
        self.step_no = s["step"]
        self.load_extra_state(s)
        return self.step_no

    def export(self, path: Path) -> Path:
        """The trained policy as a plain Hugging Face folder (LoRA: merged, and the adapter in `adapter/`)."""
        if self.cfg.model.lora_rank:
            from tempering.models.lora import merged_copy, save_adapter

            save_policy(merged_copy(self.model), self.tokenizer, path)
            save_adapter(self.model, self.tokenizer, path / "adapter")
            return path
        return save_policy(self.model, self.tokenizer, path)

    # ---- one step ----------------------------------------------------------------------------
    async def _collect(self, stats: RolloutStats) -> tuple[list[Group], dict[str, float]]:
        c = self.cfg
        need = c.rollout.prompts_per_step
        tasks = [self.train_tasks[i] for i in self.cursor.next(need)]
        groups = await rollout(
            self.sampler, self.fmt, tasks, self.family.make_env, c.rollout.group_size, self.opts, stats
        )
        self._shape(groups)
        info = {"frac_zero_std_groups": float(zero_std_groups(turn_tensors(groups).rewards_NG).float().mean())}
        if c.loss.dynamic_sampling:
            kept = [g for g in groups if not _all_equal(g)]
            rounds = 0
            while len(kept) < need and rounds < c.loss.max_resample_rounds:
                rounds += 1
                more = [self.train_tasks[i] for i in self.cursor.next(need)]
                extra = await rollout(
                    self.sampler, self.fmt, more, self.family.make_env, c.rollout.group_size, self.opts, stats
                )
                self._shape(extra)
                kept += [g for g in extra if not _all_equal(g)]
            info["resample_rounds"] = rounds
            groups = kept[:need] if kept else groups
        return groups, info

    def _shape(self, groups: list[Group]) -> None:
        c = self.cfg
        if c.loss.overlong_cache > 0:
            for g in groups:
                lengths = torch.tensor([float(e.num_action_tokens) for e in g.episodes])
                pen = overlong_penalty(lengths, c.rollout.max_new_tokens * c.rollout.max_turns, c.loss.overlong_cache)
                for e, p in zip(g.episodes, pen.tolist()):
                    e.reward += p

    def credit(self, groups: list[Group], batch: TrainBatch) -> torch.Tensor:
        adv_NGK = self.credit_fn(turn_tensors(groups))
        return broadcast_turn_adv(adv_NGK.reshape(-1, adv_NGK.shape[-1]), batch)

    async def step(self) -> StepResult:
        c = self.cfg
        t0 = time.perf_counter()
        stats = RolloutStats()
        groups, info = await self._collect(stats)
        if c.rollout.on_env_error == "drop":
            kept = [g for g in groups if not any(e.stop_reason == "env_error" for e in g.episodes)]
            info["groups_dropped_env_error"] = len(groups) - len(kept)
            groups = kept or groups
        episodes = [e for g in groups for e in g.episodes]
        batch = collate(episodes, self.sampler.pad_id, c.loss.mask_truncated)
        if self.ref_model is not None:
            batch.ref_logp_BT = batch_logprobs(
                self.ref_model, batch, c.loss.micro_batch_size, self.settings.temperature
            )
            if c.loss.kl_in_reward:
                kl = (kl_estimate(batch.sample_logp_BT, batch.ref_logp_BT, "k1") * batch.mask_BT).sum(-1)
                for e, k in zip(episodes, kl.tolist()):
                    e.reward -= c.loss.kl_coef * k
                info["kl_ref_in_reward"] = float(kl.mean())
        batch.adv_BT = self.credit(groups, batch)
        if c.loss.rollout_correction != "none":  # the sampler is not exactly the trainer's policy (vLLM)
            from tempering.rollout.vllm_sampler import apply_rollout_correction

            trainer_logp = batch_logprobs(self.model, batch, c.loss.micro_batch_size, self.settings.temperature)
            info.update(
                apply_rollout_correction(batch, trainer_logp, c.loss.rollout_correction, c.loss.rollout_correction_cap)
            )
        t1 = time.perf_counter()
        upd = policy_update(
            self.train_model,
            self.optimizer,
            self.scheduler,
            batch,
            self.settings,
            self.update_gen,
            loss_fn=self.loss_fn,
        )
        if hasattr(self.sampler, "sync_weights"):  # a sampler with its own copy of the weights (vLLM, Ray, FSDP)
            self.sampler.sync_weights(self.train_model)
        t2 = time.perf_counter()
        self.step_no += 1
        n_tok = [e.num_action_tokens for e in episodes]
        m = {
            "reward": sum(e.reward for e in episodes) / len(episodes),
            "success": sum(e.success for e in episodes) / len(episodes),
            "response_len": sum(n_tok) / len(n_tok),
            "truncated": sum(any(t.truncated for t in e.turns) for e in episodes) / len(episodes),
            "env_calls": stats.env_calls,
            "env_seconds": stats.env_seconds,
            "env_errors": stats.env_errors,
            "gen_seconds": stats.gen_seconds,
            "update_seconds": t2 - t1,
            "step_seconds": t2 - t0,
            **info,
            **upd,
        }
        if c.rollout.max_turns > 1:
            m["turns"] = sum(len(e.turns) for e in episodes) / len(episodes)
            for t in range(1, c.rollout.max_turns + 1):
                m[f"acc@{t}"] = sum((e.first_success_turn or 99) <= t for e in episodes) / len(episodes)
            decided = stats.groups_expanded + stats.groups_pruned
            m["groups_expanded_share"] = stats.groups_expanded / decided if decided else 0.0
            m["episodes_pruned"] = stats.episodes_pruned
        if stats.cf_env_calls:
            m["cf_env_calls"] = stats.cf_env_calls
            m["cf_overhead_calls"] = (stats.env_calls + stats.cf_env_calls) / stats.env_calls
            m["cf_overhead_seconds"] = stats.wall_seconds / max(stats.wall_seconds - stats.cf_seconds, 1e-9)
        self.log.log(self.step_no, m)
        if c.run.log_samples:
            self.log.samples(self.step_no, [_sample_row(e) for e in episodes[: c.run.log_samples]])
        return StepResult(self.step_no, m, groups)

    async def evaluate(self, size: int | None = None) -> dict[str, float]:
        tasks = self.heldout_tasks[:size] if size else self.heldout_tasks
        opts = replace(self.opts, max_turns=self.cfg.run.eval_max_turns or self.opts.max_turns)
        m = await evaluate(self.sampler, self.fmt, self.family, tasks, opts, k=self.cfg.run.eval_k)
        return {f"eval/{k}": v for k, v in m.items()}

    # ---- the loop ----------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        c = self.cfg.run
        from tempering.progress import progress_bar

        history: dict[str, Any] = {}
        if self.step_no == 0:
            first = await self.evaluate()  # the whole held-out set, as the final evaluation
            self.log.log(0, first)
            history["start"] = first
        with progress_bar(c.steps, "train", enabled=c.progress, start=self.step_no) as bar:
            while self.step_no < c.steps:
                r = await self.step()
                live = {"reward": r.metrics["reward"], "success": r.metrics["success"]}
                if c.eval_every and self.step_no % c.eval_every == 0 and self.step_no < c.steps:
                    ev = await self.evaluate(c.eval_size)
                    self.log.log(self.step_no, ev)
                    live["heldout"] = ev["eval/pass@1"]
                if c.checkpoint_every and self.step_no % c.checkpoint_every == 0:
                    self.save()
                bar.update(live)
        final = await self.evaluate()
        self.log.log(self.step_no, final)
        history["final"] = final
        self.save()
        self.export(Path(self.cfg.run.out_dir) / "final")
        self.log.plot(
            [
                "reward",
                "eval/pass@1",
                "eval/pass@1_sampled",
                "kl_ref",
                "entropy",
                "response_len",
                "approx_kl",
                "step_seconds",
            ]
        )
        self.log.close()
        return history


def rollout_options(cfg: TrainConfig) -> RolloutOptions:
    r = cfg.rollout
    keep = None
    if r.prune == "dcp":

        def keep(g: Group) -> list[bool]:
            n_fail = sum(not e.success for e in g.episodes)
            ok = bool(dcp_expand(torch.tensor([n_fail]), len(g.episodes), r.dcp_min_fail, r.dcp_max_fail)[0])
            return [ok] * len(g.episodes)

    cf = None
    if r.counterfactual_turns > 0:
        cf = CounterfactualOptions(
            r.counterfactual_turns, r.counterfactual_samples, r.counterfactual_select, cfg.run.seed
        )
    return RolloutOptions(
        sampling=r.sampling(),
        max_turns=r.max_turns,
        max_context_tokens=r.max_context_tokens,
        drop_old_turns=r.drop_old_turns,
        feedback_templates=dict(r.feedback_templates),
        continue_after_turn1=keep,
        score_range=tuple(r.score_range) if r.score_range else None,
        clamp_scores=r.clamp_scores,
        counterfactual=cf,
    )


def _all_equal(g: Group) -> bool:
    r = g.rewards
    return max(r) == min(r)


def _sample_row(e) -> dict[str, Any]:
    return {
        "task": e.task.id,
        "prompt": e.prompt,
        "turns": [
            {"text": t.info.get("text", ""), "score": t.score, "status": t.status, "feedback": t.feedback}
            for t in e.turns
        ],
        "reward": e.reward,
        "stop_reason": e.stop_reason,
    }


def train(cfg: TrainConfig | dict, family: TaskFamily | None = None, resume: bool = False) -> dict[str, Any]:
    """Run the RL recipe from Python; `family` overrides `cfg.task` (e.g. a DatasetFamily with your reward)."""
    if isinstance(cfg, dict):
        from tempering.config import build

        cfg = build(TrainConfig, cfg)
    trainer = RLTrainer(cfg, family=family, resume=resume)
    return asyncio.run(trainer.run())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tempering train", description="RL with verifiable rewards (GRPO family, multi-turn)."
    )
    p.add_argument("config", nargs="?", help="YAML config (see examples/); omit for the defaults")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. loss.advantage=rloo run.steps=50")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run exactly from its latest checkpoint")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    a = p.parse_args(argv)
    config, overrides = a.config, list(a.overrides)
    if config and "=" in config and not config.endswith((".yaml", ".yml")):
        config, overrides = None, [config] + overrides
    if a.resume:
        run_dir = Path(a.resume)
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
        cfg = load_config(TrainConfig, run_dir / "config.yaml", overrides + [f"run.out_dir={run_dir}"])
    else:
        cfg = load_config(TrainConfig, config, overrides)
    if a.print_config:
        import yaml

        print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        return 0
    hist = train(cfg, resume=bool(a.resume))
    from tempering.progress import print_eval_table

    print_eval_table(hist, title=f"held-out results ({cfg.run.out_dir})")
    return 0
