"""The one training loop: every method and every verb that trains a policy runs here.

`train/build.py` assembles a run's parts (tasks, policy, samplers, method, optimizers, a resume's
checkpoint); the `Trainer` here steps them.

One step: draw prompts -> roll out groups (dynamic sampling refills zero-signal groups) -> score
(the verifier, then the method's scorers) -> credit -> the method's next state -> the one policy
update (unless the method freezes the policy this step) -> the updates of the method's own modules
(a critic) -> log; evaluate and checkpoint on schedule. A method (`train/method.py`) changes only what
it scores, its credit, its loss, its state and the modules it trains besides the policy. With `ranks`
from torchrun the same loop is data-parallel: each rank rolls out its own share of the prompts, the
update's loss normaliser is global, a step's metrics are reduced over ranks once, and rank 0 writes the
run folder.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from tempering.config import anchor_paths
from tempering.envs.base import TaskFamily
from tempering.envs.rewards import TRAINER_STATE
from tempering.errors import UserError
from tempering.evaluation import evaluate
from tempering.metrics import reward_parts
from tempering.models import save_module, save_policy
from tempering.models.chat import ChatFormat
from tempering.progress import Reporter, count_parameters, human, warn
from tempering.rollout.engine import RolloutOptions, RolloutStats
from tempering.rollout.sampler import Sampler
from tempering.runlog import RunLog
from tempering.train.batch import TrainBatch, collate
from tempering.train.build import OwnedModule, assemble, checkpoint_state
from tempering.train.checkpoint import save_checkpoint
from tempering.train.collapse import CollapseRule, CollapseState, check_collapse
from tempering.train.collect import Collector, RankCursor, Rollouts
from tempering.train.config import LoopConfig
from tempering.train.cursor import PromptCursor
from tempering.train.dynamic import DynamicSampling
from tempering.train.method import Credit, Method, MethodSpec, zero_signal_groups
from tempering.train.parallel import DataParallel, Solo
from tempering.train.pipeline import RolloutPipeline
from tempering.train.scoring import Scorer, Scores, per_turn, score
from tempering.train.update import UpdateSettings, policy_update
from tempering.train.world import World
from tempering.types import Episode, Group, Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Weighted = tuple[dict[str, float], float | None]
"""Metrics of a step and the weight their reduction over ranks gives this rank (None: already reduced)."""

COMMON_PLOTS = (
    "reward",
    "reward/*",
    "eval/pass@*",
    "entropy",
    "response_len",
    "frac_zero_std_groups",
    "grad_norm",
    "step_seconds",
)
"""Panels of every run's curves.png (shell-style patterns; the method adds its own `Method.plots`)."""


@dataclass
class StepResult:
    step: int
    metrics: dict[str, float]
    groups: list[Group] = field(default_factory=list)


class NoLog:
    """The run log on ranks other than 0: they write nothing (and read nothing: rank 0 shares what it reads)."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        pass

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        pass

    def plot(self) -> None:
        pass

    def close(self) -> None:
        pass

    def read_metrics(self) -> list[dict[str, Any]]:
        return []


class Trainer:
    """The state of one training run of any method; `step()` advances it by one batch.

    cfg: a verb's config (model, task, rollout, loss, optim, run sections). method: the method's spec
    (`MethodSpec`: its builder `(Context) -> Method` and what it supports). family: overrides `cfg.task`
    (e.g. a DatasetFamily with your reward). world: this process's place in a torchrun launch (None: one
    process); strategy: ddp or fsdp2. A new run refuses a `run.out_dir` that holds a run unless
    `overwrite` (which removes it first). parts: objects the method takes in place of its config's
    (`MethodSpec.parts`).
    """

    def __init__(
        self,
        cfg: LoopConfig,
        method: MethodSpec[Any],
        family: TaskFamily | None = None,
        resume: bool = False,
        world: World | None = None,
        strategy: str = "ddp",
        overwrite: bool = False,
        parts: Mapping[str, Any] | None = None,
    ):
        a = assemble(cfg, method, family, resume, world, strategy, overwrite, parts)
        # the assembled run (`train/build.py: Assembly`), each part the trainer's own field from here on
        self.cfg: LoopConfig = a.cfg
        self.spec: MethodSpec[Any] = a.spec
        self.method: Method = a.method
        self.ranks: Solo | DataParallel = a.ranks
        self.family: TaskFamily = a.family
        self.family_given: bool = a.family_given
        self.train_tasks: list[Task] = a.train_tasks
        self.heldout_tasks: list[Task] = a.heldout_tasks
        self.raw: dict[str, Task] = a.raw
        self.model: PreTrainedModel = a.model
        self.tokenizer: PreTrainedTokenizerBase = a.tokenizer
        self.fmt: ChatFormat = a.fmt
        self.sampler: Sampler = a.sampler
        self.rollout_sampler: Sampler = a.rollout_sampler
        self.opts: RolloutOptions = a.opts
        self.scorers: list[Scorer] = a.scorers
        self.owned: dict[str, OwnedModule] = a.owned
        self.train_model: torch.nn.Module = a.train_model
        self.full_copy: bool = a.full_copy
        self.optimizer: torch.optim.Optimizer = a.optimizer
        self.scheduler: torch.optim.lr_scheduler.LRScheduler = a.scheduler
        self.cursor: PromptCursor | RankCursor = a.cursor
        self.update_gen: torch.Generator = a.update_gen
        self.settings: UpdateSettings = a.settings
        self.resume_step: int | None = a.resume_step
        self.state: dict[str, float] = dict(a.start_state)
        self.step_no = a.start_step
        self.progress: dict[str, float] = dict(a.start_progress)
        """What the early-finish rules count (`run.stop_at_pass`, `run.max_seconds`); saved in checkpoints."""
        self._errors_seen: set[tuple[str, str]] = set()
        self._nonfinite_streak = 0
        self.collapse = CollapseState()
        r = self.cfg.rollout
        self.collector = Collector(
            self.train_tasks,
            self.cursor,
            self.family,
            self.fmt,
            self.opts,
            self.method,
            r.prompts_per_step,
            r.group_size,
            r.on_env_error,
            None
            if self.method.resample_rounds is None
            else DynamicSampling(self.method, r.group_size, self.sampler.pad_id, self.cfg.loss.mask_truncated),
        )
        """One step's groups (`train/collect.py`): called here, or by the rollout pipeline's thread."""
        self.pipeline: RolloutPipeline | None = None
        if r.async_steps:
            self.pipeline = RolloutPipeline(
                self.collector, self.rollout_sampler, r.async_steps, self._drains_after, start=self.step_no
            )
        self.log: RunLog | NoLog = NoLog()
        if self.ranks.is_main:
            self.log = RunLog(
                self.cfg.run.out_dir,
                anchor_paths(self.cfg.model_dump(mode="json")),  # what --resume reads, from any folder
                resume_step=self.resume_step,
                tensorboard=self.cfg.run.tensorboard,
                wandb=self.cfg.run.wandb,
                trackio=self.cfg.run.trackio,
                title=f"{Path(self.cfg.run.out_dir).name} · {self.method.name} · {self.cfg.model.name}",
                plots=[*COMMON_PLOTS, *self.method.plots],
            )
        self.ranks.barrier()  # rank 0 has prepared the run folder

    def _drains_after(self, step: int) -> bool:
        """Steps after which asynchronous rollouts have nothing in flight: evaluations, checkpoints, the end."""
        r = self.cfg.run
        every = [n for n in (r.eval_every, r.checkpoint_every) if n]
        return step >= r.steps or any(step % n == 0 for n in every)

    @property
    def drained(self) -> bool:
        """Nothing is in flight at this step: no rollout pipeline, or one that drains here (`_drains_after`).
        Checkpoints, evaluations on the pipeline's sampler and every stop wait for it."""
        return self.pipeline is None or self.pipeline.drained_at(self.step_no)

    # ---- state -------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """An atomic checkpoint of everything needed to resume exactly (rank 0 writes it). With
        asynchronous rollouts only where the pipeline drains (nothing in flight)."""
        if not self.drained:
            raise UserError(
                f"a checkpoint at step {self.step_no} would miss the batches generated ahead of it "
                f"(rollout.async_steps={self.cfg.rollout.async_steps}); checkpoint at steps where the pipeline "
                "drains: multiples of run.checkpoint_every or run.eval_every, and the last step"
            )
        rngs = self.ranks.gather(self.sampler.generator.get_state())
        rollout_rngs = self.ranks.gather(self.rollout_sampler.generator.get_state())
        path = None
        if self.ranks.is_main:
            path = save_checkpoint(
                Path(self.cfg.run.out_dir),
                self.step_no,
                self.model,
                self.tokenizer,
                checkpoint_state(self, self.step_no, self.state, self.progress, rngs, rollout_rngs),
                max(self.cfg.run.keep_checkpoints, 1),
            )
        self.ranks.barrier()
        return path

    def export(self, path: Path) -> Path:
        """The trained policy as a plain Hugging Face folder (LoRA: merged, and the adapter in `adapter/`)."""
        if self.ranks.is_main:
            if self.cfg.model.lora_rank:
                from tempering.models.lora import merged_copy, save_adapter

                save_policy(merged_copy(self.model), self.tokenizer, path)  # type: ignore[arg-type]
                save_adapter(self.model, self.tokenizer, path / "adapter")
            else:
                save_policy(self.model, self.tokenizer, path)
            for name, own in self.owned.items():
                save_module(own.trainable.module, path / f"{name}.safetensors")
        self.ranks.barrier()
        return path

    # ---- one step ----------------------------------------------------------------------------
    def train_on(
        self, groups: list[Group], trainable: bool = True, scores: Scores | None = None
    ) -> tuple[list[Weighted], dict[str, Any]]:
        """Score, credit and update on this rank's groups: (the step's weighted metrics for `record`,
        per-episode turn advantages and the credit's per-episode values). `scores`: what the method's
        filter scorers already made of the groups (dynamic sampling); the rest of the scorers run here.
        `trainable=False`: the groups only keep this rank's collectives in step (empty loss mask). When no
        rank has anything to train on, the update is skipped (an optimizer step on zero gradients would
        still move the weights)."""
        episodes = [e for g in groups for e in g.episodes]
        batch = collate(episodes, self.sampler.pad_id, self.cfg.loss.mask_truncated)
        if not trainable:
            batch = replace(batch, mask_BT=torch.zeros_like(batch.mask_BT))
        if scores is None:
            scores = score(groups, batch, self.scorers)
        else:
            done = self.method.filter_scorers
            scores = score(groups, batch, [s for s in self.scorers if not any(s is d for d in done)], scores)
        credit = self.method.credit(scores, batch, self.state)
        trained = training_batch(batch, scores, credit)
        local = {"groups": len(groups) if trainable else 0, "loss_tokens": float(trained.mask_BT.sum())}
        counts, reduced = self.ranks.reduce_all([(local, 1.0), (credit.metrics, float(batch.mask_BT.sum()))])
        loss_tokens = counts["loss_tokens"]
        if counts["groups"] == 0 or loss_tokens == 0:  # e.g. rejection fine-tuning kept no episode
            skipped = {"update_skipped": 1.0, "loss_tokens": loss_tokens}
            nothing: dict[str, Any] = {"turn_adv": [], "per_episode": {}}
            return [(skipped, None), (scores.metrics, len(episodes)), (reduced, None)], nothing
        if self.method.next_state is not None:
            self.state = self.method.next_state(self.state, reduced)
        upd: dict[str, float] = {}
        # the method's own modules first (verl's order): a critic on the policy's features trains on the
        # features its values (and their clip anchor) came from, not on the updated policy's
        for name, own in self.owned.items():
            stats = own.trainable.update(own.train_module, own.optimizer, trained, self.settings, own.generator)
            upd |= {f"{name}/{k}": v for k, v in stats.items()}
        step = self.step_no + 1  # the run step this update belongs to, skipped updates counted
        frozen = self.method.freeze_policy is not None and self.method.freeze_policy(self.state, step)
        if not frozen:
            upd |= policy_update(
                self.train_model,
                self.optimizer,
                self.scheduler,
                trained,
                self.settings,
                self.update_gen,
                self.method.loss,
                self.state,
            )
            if self.method.after_update is not None:
                (seen,) = self.ranks.reduce_all([(upd, 1.0)])
                self.state = self.method.after_update(self.state, seen)
            self._sync_sampler()
            if self.pipeline is None and getattr(self.sampler, "sync_check", None) is not None:
                upd["sync/verified"] = 1.0  # the sync after this update was checked (a mismatch raised)
        upd["policy_frozen"] = float(frozen)
        G = self.cfg.rollout.group_size
        assert trained.adv_BT is not None
        zero = zero_signal_groups(trained.adv_BT, trained, G)
        shape = scores.turns.scores_NGK.shape
        adv_NGK = per_turn(trained.adv_BT, trained, shape) / per_turn(trained.mask_BT, trained, shape).clamp(min=1)
        signal = {} if self.method.resample_rounds is not None else {"frac_zero_adv_groups": float(zero.float().mean())}
        weighted: list[Weighted] = [
            ({**scores.metrics, **signal}, len(episodes)),
            ({**reduced, **{f"state/{k}": v for k, v in self.state.items()}}, None),
            (upd, 1.0),
            ({"loss_tokens": loss_tokens}, None),
        ]
        per_episode = {k: v.tolist() for k, v in credit.per_episode.items()} if trainable else {}
        return weighted, {"turn_adv": adv_NGK.reshape(-1, shape[-1]).tolist(), "per_episode": per_episode}

    def record(self, weighted: list[Weighted]) -> dict[str, float]:
        """One step's metrics from (values, weight) pairs in the order they override each other: every
        rank's values of the pairs with a weight reduced in one collective; weight None: already the same
        on every rank."""
        local = [(m, w) for m, w in weighted if w is not None]
        reduced = iter(self.ranks.reduce_all(local))
        out: dict[str, float] = {}
        for m, w in weighted:
            out |= next(reduced) if w is not None else m
        return out

    def _sync_sampler(self) -> None:
        """After an update, FSDP2's full copy of the policy is refreshed, and a sampler with weights of its
        own gets them (vLLM, Ray) and is checked to hold them (`rollout/sync.py`: a mismatch stops the run).
        Asynchronous rollouts load each batch's weights through the pipeline instead, with the same check."""
        if self.full_copy:
            from tempering.models.io import full_state_dict

            self.model.load_state_dict(full_state_dict(self.train_model))
        sync = getattr(self.sampler, "sync_weights", None)
        if self.pipeline is None and sync is not None:
            sync(self.model if self.full_copy else self.train_model, version=self.step_no + 1)

    def _policy_snapshot(self) -> dict[str, torch.Tensor]:
        """The current weights under Hugging Face names, copied (the next update changes the originals)."""
        from tempering.rollout.vllm_sampler import policy_weights

        return {k: v.detach().clone() for k, v in policy_weights(self.model).items()}

    async def next_rollouts(self) -> Rollouts:
        """This step's groups: collected now, or taken from the pipeline once it has the weights of the
        last update (for the batches it samples next)."""
        TRAINER_STATE.global_step, TRAINER_STATE.max_steps = self.step_no, self.cfg.run.steps  # TRL's trainer_state
        if self.pipeline is None:
            stats = RolloutStats()
            r = await self.collector(self.sampler, self.state, stats)
            r.version = self.step_no
            return r
        self.pipeline.publish(self.step_no, self._policy_snapshot, self.state)
        t0 = time.perf_counter()
        r = await asyncio.to_thread(self.pipeline.get, self.step_no + 1)
        r.info.update({"async/staleness": self.step_no - r.version, "async/wait_seconds": time.perf_counter() - t0})
        return r

    async def step(self) -> StepResult:
        c = self.cfg
        t0 = time.perf_counter()
        r = await self.next_rollouts()
        groups, trainable, info, stats = r.groups, r.trainable, r.info, r.stats
        self._check_errors(stats, "training")
        episodes = [e for g in groups for e in g.episodes]
        t1 = time.perf_counter()
        weighted, detail = self.train_on(groups, trainable, r.scores)
        t2 = time.perf_counter()
        self.step_no += 1
        n_tok = [e.num_action_tokens for e in episodes]
        m = {
            "reward": sum(e.reward for e in episodes) / len(episodes),
            "success": sum(e.success for e in episodes) / len(episodes),
            "response_len": sum(n_tok) / len(n_tok),
            "truncated": sum(any(t.truncated for t in e.turns) for e in episodes) / len(episodes),
            "groups": len(groups) if trainable else 0,
            "env_calls": stats.env_calls,
            "env_seconds": stats.env_seconds,
            "env_errors": stats.env_errors,
            "gen_seconds": stats.gen_seconds,
            "update_seconds": t2 - t1,
            "step_seconds": t2 - t0,
            **reward_parts(episodes),
            **info,
        }
        if c.rollout.max_turns > 1:
            m["turns"] = sum(len(e.turns) for e in episodes) / len(episodes)
            for t in range(1, c.rollout.max_turns + 1):
                m[f"acc@{t}"] = sum((e.first_success_turn or 99) <= t for e in episodes) / len(episodes)
            decided = stats.groups_expanded + stats.groups_pruned
            m["groups_expanded_share"] = stats.groups_expanded / decided if decided else 0.0
            m["groups_expanded"], m["groups_pruned"] = stats.groups_expanded, stats.groups_pruned
            m["episodes_pruned"] = stats.episodes_pruned
        if stats.cf_env_calls:
            m["cf_env_calls"] = stats.cf_env_calls
            m["cf_overhead_calls"] = (stats.env_calls + stats.cf_env_calls) / stats.env_calls
            m["cf_overhead_seconds"] = stats.wall_seconds / max(stats.wall_seconds - stats.cf_seconds, 1e-9)
        if stats.greedy_env_calls:  # ReMax's baselines: scored, not trained on
            greedy = [g.greedy for g in groups if g.greedy is not None]
            m["greedy_reward"] = sum(e.reward for e in greedy) / max(len(greedy), 1)
            m["greedy_env_calls"], m["greedy_tokens"] = stats.greedy_env_calls, stats.greedy_tokens
            m["greedy_overhead_tokens"] = (stats.tokens + stats.greedy_tokens) / max(stats.tokens, 1)
            m["greedy_overhead_seconds"] = stats.wall_seconds / max(stats.wall_seconds - stats.greedy_seconds, 1e-9)
        m = self.record([(m, len(episodes)), *weighted])
        self.log.log(self.step_no, m)
        self._check_finite(m)
        if c.run.log_samples:
            self.log.samples(self.step_no, _sample_rows(groups, detail)[: c.run.log_samples])
        return StepResult(self.step_no, m, groups)

    def _check_finite(self, m: dict[str, float]) -> None:
        """An optimizer step whose gradient was NaN or inf was skipped; stop after a few in a row."""
        if not m.get("nonfinite_updates"):
            self._nonfinite_streak = 0
            return
        self._nonfinite_streak += 1
        limit = self.cfg.run.max_nonfinite_steps
        warn(f"step {self.step_no}: the loss or gradient was not finite; the update was skipped")
        if self._nonfinite_streak >= limit:
            raise UserError(
                f"the loss or gradient was not finite in {limit} steps in a row (run.max_nonfinite_steps); the "
                f"weights are those of the last finite update. Lower optim.lr or loss.max_grad_norm, or check the "
                f"rewards and teachers of this run ({self.cfg.run.out_dir}/metrics.jsonl)"
            )

    def _check_errors(self, stats: RolloutStats, phase: str) -> None:
        """Show the first environment error of each kind; stop when their share passes task.max_error_rate
        (errors in user code are not the policy's fault, and a run that learns nothing must not pass)."""
        for err in stats.errors:
            key = (err.kind, err.where)
            if key not in self._errors_seen:
                self._errors_seen.add(key)
                warn(f"an environment raised during {phase} (step {self.step_no + 1}): {err.describe()}")
        calls = stats.env_calls + stats.cf_env_calls + stats.greedy_env_calls
        share = len(stats.errors) / max(calls, 1)
        if share > self.cfg.task.max_error_rate:
            first = stats.errors[0]
            raise UserError(
                f"{len(stats.errors)} of {calls} environment calls raised during {phase} (share {share:.2f} > "
                f"task.max_error_rate={self.cfg.task.max_error_rate}); the first: {first.describe()}. Fix the "
                "environment or reward function, or raise task.max_error_rate to train through rare errors"
            )

    async def evaluate(self, size: int | None = None) -> dict[str, float]:
        """Held-out metrics (rank 0 evaluates; every rank gets its numbers)."""
        out = None
        if self.ranks.is_main:
            if self.pipeline is not None and self.rollout_sampler is self.sampler:  # shared with the pipeline
                if not self.drained:
                    raise UserError(
                        f"evaluating at step {self.step_no} would share the sampler with the rollouts generated "
                        "ahead of it; evaluate where the pipeline drains (run.eval_every, run.checkpoint_every)"
                    )
                self.pipeline.hold(self.step_no, self._policy_snapshot)
            tasks = self.heldout_tasks[:size] if size else self.heldout_tasks
            opts = replace(self.opts, max_turns=self.cfg.run.eval_max_turns or self.opts.max_turns)
            stats = RolloutStats()
            # a stream of its own, seeded by run.seed: every evaluation samples alike, training's stream is
            # left as it was, and `tempering eval RUN` (seeded the same) reproduces the figures
            gen = self.sampler.generator
            training_stream = gen.get_state()
            gen.manual_seed(self.cfg.run.seed)
            try:
                m = await evaluate(self.sampler, self.fmt, self.family, tasks, opts, k=self.cfg.run.eval_k, stats=stats)
            finally:
                gen.set_state(training_stream)
            self._check_errors(stats, "evaluation")
            out = {f"eval/{k}": v for k, v in m.items()} | {"eval/n": len(tasks)}
        shared: dict[str, float] = self.ranks.share(out)
        return shared

    # ---- the loop ----------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """The run reached `run.steps`, or finished early, and exported its final model (a resume has nothing
        to do)."""
        done = self.step_no >= self.cfg.run.steps or bool(self.progress["finished_early"])
        return done and (Path(self.cfg.run.out_dir) / "final" / "config.json").is_file()

    def run(self, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
        """`arun` to the end, from code that runs no event loop (`await trainer.arun()` inside one)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(callbacks))
        raise UserError("Trainer.run() trains to the end itself; inside an event loop, await trainer.arun(callbacks)")

    async def arun(self, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
        """Train to `run.steps` (evaluating and checkpointing on schedule), export, plot. A finished run
        says so and returns its start and final evaluations from its metrics.

        `callbacks`: objects with `on_step_end(step, metrics)` and/or `on_evaluation(step, metrics)`; a true
        return stops the run after that step with a checkpoint (`--resume` continues it), and the history
        then has `stopped_at` instead of `final`; with asynchronous rollouts, at the first step after it where
        the pipeline drains (nothing in flight: evaluation and checkpoint steps)."""
        try:
            for cb in callbacks:
                if not (hasattr(cb, "on_step_end") or hasattr(cb, "on_evaluation")):
                    raise UserError(
                        f"callback {cb!r} has neither on_step_end(step, metrics) nor on_evaluation(step, metrics)"
                    )
            if self.finished:
                if self.ranks.is_main:
                    out = self.cfg.run.out_dir
                    warn(
                        f"{out} is finished (step {self.step_no} of {self.cfg.run.steps}); to train further: "
                        f"--resume {out} run.steps=N (N > {self.step_no})"
                    )
                history: dict[str, Any] = self.ranks.share(self._history() if self.ranks.is_main else None)
                return history
            return await self._run(list(callbacks))
        finally:
            self.close()

    def close(self) -> None:
        """Stop the rollout pipeline and release what the task family holds (`run()` does this)."""
        if self.pipeline is not None:
            self.pipeline.close()
        self.family.close()

    def _history(self) -> dict[str, Any]:
        """The start (step 0) and final evaluations in metrics.jsonl, in that order (the table's columns)."""
        rows = [r for r in self.log.read_metrics() if "eval/pass@1" in r]
        out = {}
        if rows and rows[0]["step"] == 0:
            out["start"] = {k: v for k, v in rows[0].items() if k != "step"}
        if rows:
            out["final"] = {k: v for k, v in rows[-1].items() if k != "step"}
        return out

    def _tell(self, callbacks: list[Any], hook: str, metrics: dict[str, Any]) -> bool:
        """Every callback's `hook(step, metrics)`, each with its own copy; True when one asks to stop
        (rank 0's callbacks decide for all ranks)."""
        asked = [bool(getattr(cb, hook)(self.step_no, dict(metrics))) for cb in callbacks if hasattr(cb, hook)]
        return bool(self.ranks.share(any(asked))) if callbacks else False  # no broadcast per step without any

    async def _run(self, callbacks: list[Any]) -> dict[str, Any]:
        c = self.cfg.run
        history: dict[str, Any] = {}
        self.collapse = CollapseState()  # collapse signs are watched from the start of each `arun`
        report = Reporter(
            c.steps,
            self.method.name,
            start=self.step_no,
            log_every=c.log_every,
            bar=c.progress,
            objective=next(iter(self.method.plots), None),
            quiet=not self.ranks.is_main,
            eval_every=c.eval_every,
            eval_prompts=min(c.eval_size or len(self.heldout_tasks), len(self.heldout_tasks)),
            final_eval_prompts=len(self.heldout_tasks),
            hide=("reward", "success") if self.method.supervised else (),
        )
        report.summary(self.summary())
        asked = False  # by a callback, to stop after this step
        if self.step_no > 0 and "start" in (earlier := self._history() if self.ranks.is_main else {}):
            history["start"] = earlier["start"]  # a resumed run's table starts where the run did
        if self.step_no == 0 and c.eval_on_start:
            t0 = time.perf_counter()
            first = await self.evaluate()  # the whole held-out set, as the final evaluation
            self.log.log(0, first)
            history["start"] = first
            report.evaluation(0, first, len(self.heldout_tasks), "start evaluation", time.perf_counter() - t0)
            asked = self._tell(callbacks, "on_evaluation", first)
        t_run, spent = time.perf_counter(), self.progress["seconds"]
        with report, StopAtStepEnd(enabled=self.ranks.size == 1) as stop:
            while self.step_no < c.steps:
                if asked and self.drained:
                    self.save()
                    self.log.plot()
                    self.log.close()
                    return history | {"stopped_at": self.step_no}
                m = (await self.step()).metrics
                self.progress["seconds"] = spent + time.perf_counter() - t_run
                report.step(self.step_no, m)
                self._watch_collapse(history, entropy=m.get("entropy"))
                asked = self._tell(callbacks, "on_step_end", m) or asked
                if stop.requested and self.drained:
                    self.save()
                    self.log.plot()
                    warn(
                        f"stopped by {stop.requested} after step {self.step_no}, checkpoint written: continue "
                        f"with --resume {c.out_dir}"
                    )
                    raise KeyboardInterrupt
                if c.eval_every and self.step_no % c.eval_every == 0 and self.step_no < c.steps:
                    t0 = time.perf_counter()
                    ev = await self.evaluate(c.eval_size)
                    self._watch_collapse(history, heldout=ev)
                    self.log.log(self.step_no, ev)
                    report.evaluation(self.step_no, ev, int(ev["eval/n"]), seconds=time.perf_counter() - t0)
                    self.log.plot()
                    asked = self._tell(callbacks, "on_evaluation", ev) or asked
                    why = self._reached_target(ev)
                else:
                    why = None
                why = why or self._out_of_time()
                if why:
                    self.progress["finished_early"] = 1.0
                    report.say(f"finishing at step {self.step_no} of {c.steps}: {why}")
                    break
                if c.checkpoint_every and self.step_no % c.checkpoint_every == 0:
                    self.save()
                    self.log.plot()
        final = await self.evaluate()
        self._watch_collapse(history, heldout=final)
        self.log.log(self.step_no, final)
        report.evaluation(self.step_no, final, len(self.heldout_tasks), "final evaluation")
        history["final"] = final
        self._tell(callbacks, "on_evaluation", final)
        if c.keep_checkpoints:
            self.save()
        self.export(Path(c.out_dir) / "final")
        if not c.keep_checkpoints and self.ranks.is_main:  # the final model is all that stays
            shutil.rmtree(Path(c.out_dir) / "checkpoints", ignore_errors=True)
        self.log.plot()
        self.log.close()
        return history

    def _reached_target(self, ev: dict[str, float]) -> str | None:
        """`run.stop_at_pass`: why to finish, when this periodic evaluation makes run.stop_checks in a row at or
        above it."""
        c = self.cfg.run
        if c.stop_at_pass is None:
            return None
        self.progress["hits"] = self.progress["hits"] + 1 if ev["eval/pass@1"] >= c.stop_at_pass else 0
        if self.progress["hits"] < c.stop_checks:
            return None
        return f"held-out pass@1 reached run.stop_at_pass={c.stop_at_pass} at {c.stop_checks} evaluation(s) in a row"

    def _out_of_time(self) -> str | None:
        """`run.max_seconds`: why to finish, when training has run that long (at a step where the rollout
        pipeline drains)."""
        c = self.cfg.run
        over = c.max_seconds is not None and self.progress["seconds"] > c.max_seconds
        return f"training ran past run.max_seconds={c.max_seconds}" if over and self.drained else None

    def _watch_collapse(
        self, history: dict[str, Any], entropy: float | None = None, heldout: dict[str, Any] | None = None
    ) -> None:
        """Warn once per sign of a collapsed policy (train/collapse.py), flagged in metrics.jsonl."""
        c = self.cfg.run
        rule = CollapseRule(c.collapse_entropy, c.collapse_patience, c.collapse_heldout)
        self.collapse, found = check_collapse(self.collapse, rule, self.step_no, entropy, history.get("start"), heldout)
        for sign in found if self.ranks.is_main else []:
            warn(sign.message)
            self.log.log(self.step_no, {f"collapse/{sign.sign}": 1.0})

    def summary(self) -> dict[str, str]:
        """What the run is, printed when it starts."""
        c = self.cfg
        total, trained = count_parameters(self.model)
        device = next(self.model.parameters()).device
        ranks = f" x {self.ranks.size} ranks" if self.ranks.size > 1 else ""
        return {
            "model": f"{c.model.name} ({human(total)} parameters, {human(trained)} trained, {c.model.dtype})",
            "device": f"{device}{ranks}",
            "task": f"{self.family.name or c.task.family}: {len(self.train_tasks)} train / "
            f"{len(self.heldout_tasks)} held-out prompts"
            + (
                f" (all it holds out; task.heldout_size={c.task.heldout_size})"
                if len(self.heldout_tasks) < c.task.heldout_size
                else ""
            ),
            "steps": f"{c.run.steps} x {c.rollout.prompts_per_step} prompts x {c.rollout.group_size} samples",
            "optimizer": f"AdamW, lr {c.optim.lr:g}, {c.optim.warmup_steps} warm-up steps, then {c.optim.schedule}"
            + (f" to {c.optim.min_lr_ratio:g} x lr" if c.optim.schedule != "constant" else ""),
            **({"KL": self._kl_summary(c.loss.kl_coef)} if hasattr(c.loss, "kl_coef") else {}),
            **(
                {"answers": "given (the task's reference answers); the evaluations score the model"}
                if self.method.supervised
                else {}
            ),
            "run folder": str(c.run.out_dir)
            + (f" (resuming from step {self.resume_step})" if self.resume_step is not None else ""),
        }

    def _kl_summary(self, kl_coef: float) -> str:
        c = self.cfg
        if not kl_coef:
            return "none (loss.kl_coef=0: no reference model)"
        where = "in the reward" if getattr(c.loss, "kl_in_reward", False) else "in the loss"
        return f"loss.kl_coef {kl_coef:g} {where}, to the reference: the starting model ({c.model.name})"


class StopAtStepEnd:
    """Ctrl-C (SIGINT) or SIGTERM during training: the step in progress finishes, a checkpoint is
    written, then the run stops (KeyboardInterrupt). A second signal stops at once (the previous
    handlers are back after the first). Off the main thread, and with several ranks (which would have
    to agree on the step), signals keep their usual meaning."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested: str | None = None
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = signal.Signals(signum).name
        self._restore()
        warn(f"{self.requested}: stopping after this step with a checkpoint (again to stop at once)")

    def _restore(self) -> None:
        for sig, h in self.previous.items():
            signal.signal(sig, h if h is not None else signal.SIG_DFL)
        self.previous = {}

    def __enter__(self) -> StopAtStepEnd:
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()


def training_batch(batch: TrainBatch, scores: Scores, credit: Credit) -> TrainBatch:
    """The batch the update trains on: credit's advantages, extras and mask, the reference's log-probs,
    and the rollout correction (the proximal policy's log-probs as the PPO ratio's old ones, weights on the
    advantages)."""
    adv = credit.adv_BT
    mask = credit.mask_BT if credit.mask_BT is not None else batch.mask_BT
    old = None
    if scores.correction_BT is not None:
        assert scores.correction_mask_BT is not None
        adv = adv * scores.correction_BT
        mask = mask * scores.correction_mask_BT
        old = scores.proximal_logp_BT
    return replace(
        batch, adv_BT=adv * mask, mask_BT=mask, extra=credit.extra, ref_logp_BT=scores.ref_logp_BT, old_logp_BT=old
    )


def _sample_rows(groups: list[Group], detail: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per episode, with its turns' advantages, its group's rollout decisions (`Group.info`, and its
    greedy baseline episode where one was made) and the credit's per-episode values (each episode's own, and
    its group's as a list)."""
    rows, j = [], 0
    per = detail["per_episode"]
    for n, g in enumerate(groups):
        own = {k: v[j : j + len(g.episodes)] for k, v in per.items()}
        group = {"index": n, **g.info, **{f"{k}s": v for k, v in own.items()}}
        if g.greedy is not None:
            group["greedy"] = _sample_row(g.greedy, [])
        for i, e in enumerate(g.episodes):
            adv = detail["turn_adv"][j + i] if detail["turn_adv"] else []
            rows.append({**_sample_row(e, adv), **{k: v[i] for k, v in own.items()}, "group": group})
        j += len(g.episodes)
    return rows


def _sample_row(e: Episode, turn_adv: list[float]) -> dict[str, Any]:
    return {
        "task": e.task.id,
        "prompt": e.prompt,
        "turns": [
            {
                "text": t.info.get("text", ""),
                "score": t.score,
                "status": t.status,
                "feedback": t.feedback,
                "advantage": turn_adv[k] if k < len(turn_adv) else 0.0,
            }
            for k, t in enumerate(e.turns)
        ],
        "reward": e.reward,
        "stop_reason": e.stop_reason,
    }
