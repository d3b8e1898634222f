"""The RL recipe on several processes: each rank rolls out its own share of the prompts, the update is
data-parallel (DDP or FSDP2) with a global loss normaliser, and rank 0 writes the run folder.

Every rank draws the same global prompt order and keeps every `world.size`-th prompt, so groups stay
whole on one rank (group-relative credit needs no communication) and the data cursor, saved by rank 0,
resumes every rank.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tempering.distributed.parallel import DataParallel, full_state_dict, wrap_model
from tempering.distributed.world import World
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.recipes.rl import RLTrainer, TrainConfig
from tempering.train.cursor import PromptCursor
from tempering.train.optim import make_optimizer, make_scheduler


class RankCursor:
    """A shared `PromptCursor` of which this rank keeps every `size`-th prompt."""

    def __init__(self, inner: PromptCursor, world: World):
        self.inner, self.world = inner, world

    def next(self, n: int) -> list[int]:
        return self.inner.next(n)[self.world.rank :: self.world.size]

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.inner.load_state_dict(s)


class FullCopySync:
    """Under FSDP2 the trainer keeps a full copy of the sharded policy (`RLTrainer.model`: sampled from,
    evaluated, saved). After every update this refreshes the copy, then passes it on to a sampler that
    has weights of its own (vLLM); everything else is the wrapped sampler's."""

    def __init__(self, sampler, full_model: torch.nn.Module):
        self.sampler, self.full_model = sampler, full_model

    def sync_weights(self, train_model: torch.nn.Module) -> None:
        self.full_model.load_state_dict(full_state_dict(train_model))
        if hasattr(self.sampler, "sync_weights"):
            self.sampler.sync_weights(self.full_model)

    def __getattr__(self, name: str):
        return getattr(self.sampler, name)


class RankLog:
    """The run log as every rank sees it: metrics are combined over ranks (a collective), and only
    rank 0 writes."""

    def __init__(self, log, dp: DataParallel):
        self.inner, self.dp = log, dp

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        combined = self.dp.average(metrics)
        if self.inner is not None:
            self.inner.log(step, combined)

    def __getattr__(self, name: str):  # samples, plot, close: rank 0's writer, a no-op elsewhere
        if self.inner is None:
            return lambda *a, **k: None
        return getattr(self.inner, name)


class DataParallelRLTrainer(RLTrainer):
    """`RLTrainer` with the update spread over the ranks of `world` (launched by torchrun)."""

    def __init__(
        self,
        cfg: TrainConfig,
        world: World,
        strategy: str = "ddp",
        family: TaskFamily | None = None,
        resume: bool = False,
    ):
        check_config(cfg, world, strategy, resume)
        self.world = world
        self.strategy = strategy
        self.dp = DataParallel(world)
        self._rank_rngs: list[torch.Tensor] | None = None
        if not world.is_main:  # one progress bar, from rank 0
            cfg = cfg.model_copy(deep=True)
            cfg.run.progress = False
        super().__init__(cfg, family=family, resume=resume)
        self.cursor = RankCursor(self.cursor, world)
        if self._rank_rngs is None:  # fresh run: a different sampling stream per rank
            self.sampler.generator.manual_seed(cfg.run.seed * 1000 + world.rank)
        if self.ref_model is not None:
            self.ref_model.to(world.device)
        if strategy == "ddp":
            self.train_model = wrap_model(self.model, "ddp", world)  # shares the weights the sampler reads
            self.optimizer.load_state_dict(self.optimizer.state_dict())  # a resumed state follows the weights' device
        else:
            self.model.to(world.device)
            self.train_model = wrap_model(copy.deepcopy(self.model), "fsdp2", world)
            self.optimizer = make_optimizer(self.train_model, cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.betas)
            self.scheduler = make_scheduler(
                self.optimizer, cfg.optim.warmup_steps, cfg.run.steps, cfg.optim.schedule, cfg.optim.min_lr_ratio
            )
            self.sampler = FullCopySync(self.sampler, self.model)
        self.settings.data_parallel = self.dp
        dist.barrier()  # rank 0 has prepared the run folder

    # ---- the run folder is rank 0's -----------------------------------------------------------
    def open_log(self, resume_step: int | None):
        return RankLog(super().open_log(resume_step) if self.world.is_main else None, DataParallel(self.world))

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "rank_sampler_rng": self._rank_rngs}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        rngs = state.get("rank_sampler_rng")
        if not rngs or len(rngs) != self.world.size:
            raise UserError(
                f"this checkpoint was written by {len(rngs or [])} rank(s) and {self.world.size} were "
                f"started; resume with --nproc-per-node (x nodes) = {len(rngs or [])}"
            )
        self._rank_rngs = rngs
        self.sampler.generator.set_state(rngs[self.world.rank])

    def save(self) -> Path | None:
        rngs: list[Any] = [None] * self.world.size
        dist.all_gather_object(rngs, self.sampler.generator.get_state())
        self._rank_rngs = rngs
        path = super().save() if self.world.is_main else None
        dist.barrier()
        return path

    def export(self, path: Path) -> Path:
        if self.world.is_main:
            super().export(path)
        dist.barrier()
        return path

    async def evaluate(self, size: int | None = None) -> dict[str, float]:
        """Rank 0 evaluates; every rank gets its numbers."""
        box = [await super().evaluate(size) if self.world.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def check_config(cfg: TrainConfig, world: World, strategy: str, resume: bool) -> None:
    """What a data-parallel run cannot do, before any work starts."""
    n = cfg.rollout.prompts_per_step
    if n % world.size:
        fits = [k for k in range(1, n + 1) if n % k == 0]
        raise UserError(
            f"rollout.prompts_per_step={n} does not split over {world.size} ranks; make it a multiple of "
            f"{world.size}, or start a number of processes that divides it ({', '.join(map(str, fits))})"
        )
    if cfg.loss.dynamic_sampling:
        raise UserError(
            "loss.dynamic_sampling refills each rank's batch separately and is not supported with "
            "data-parallel training yet; set loss.dynamic_sampling=false"
        )
    if strategy == "fsdp2" and resume:
        raise UserError(
            "--resume is supported with --strategy ddp; an fsdp2 checkpoint keeps full model weights but "
            "not the sharded optimizer state: start a new run from checkpoints/step_N/model"
        )
