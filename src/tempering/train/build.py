"""Assembling one run: everything the loop (`train/loop.py: Trainer`) steps, built once.

`assemble` checks the config against the method, prepares the run folder, loads the tasks, the policy
and its samplers, builds the method, wraps the models for data parallelism, makes the optimizers and,
on a resume, restores the newest checkpoint into all of them. The loop then owns only what changes from
step to step. `checkpoint_state` and `restore` are the two halves of a checkpoint, kept side by side.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from tempering.envs.base import TaskFamily
from tempering.envs.registry import make_family, set_reward_timeout
from tempering.errors import UserError
from tempering.models import load_policy
from tempering.models.chat import ChatFormat
from tempering.models.io import resolve_device
from tempering.models.packing import check_packing
from tempering.progress import warn
from tempering.rollout.engine import RolloutOptions, check_feedback_templates
from tempering.rollout.sampler import HFSampler, Sampler
from tempering.runlog import prepare_run_dir
from tempering.train.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    rng_state,
    set_rng_state,
)
from tempering.train.collect import RankCursor
from tempering.train.config import LoopConfig
from tempering.train.cursor import PromptCursor
from tempering.train.method import Context, Method, MethodSpec, Trainable
from tempering.train.optim import make_optimizer, make_scheduler
from tempering.train.parallel import DataParallel, Solo, wrap_model
from tempering.train.rules import Linearity, linear_loss, refuse
from tempering.train.scoring import RolloutCorrection, Scorer
from tempering.train.update import UpdateSettings, check_autocast
from tempering.train.world import World
from tempering.types import Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

NO_PROGRESS = {"seconds": 0.0, "hits": 0.0, "finished_early": 0.0}
"""A new run's count for the early-finish rules: seconds trained, evaluations in a row at run.stop_at_pass."""


@dataclass
class OwnedModule:
    """A method's trainable module as the loop runs it (`train/method.py: Trainable`)."""

    trainable: Trainable
    train_module: torch.nn.Module
    """The module the update runs on: the trainable's module, or its DDP form."""
    optimizer: torch.optim.Optimizer
    generator: torch.Generator


@dataclass
class Assembly:
    """One run as `assemble` builds it, the fields the `Trainer` takes over; `start_state` and `start_step`
    are where training starts (a resume's checkpoint), the loop keeps the current ones."""

    cfg: LoopConfig
    spec: MethodSpec[Any]
    ranks: Solo | DataParallel
    family: TaskFamily
    family_given: bool
    """The family came from Python, not from `cfg.task` (a resume must be given it again)."""
    train_tasks: list[Task]
    heldout_tasks: list[Task]
    raw: dict[str, Task]
    """Examples by id as the family made them (before the method's student prompt)."""
    model: PreTrainedModel
    """The policy the samplers read, evaluated and saved (under FSDP2 a full copy of the sharded `train_model`)."""
    tokenizer: PreTrainedTokenizerBase
    fmt: ChatFormat
    sampler: Sampler
    rollout_sampler: Sampler
    """What the rollout stage samples with: `sampler`, or (asynchronous rollouts in this process) a
    sampler with a copy of the weights of its own."""
    opts: RolloutOptions
    method: Method
    scorers: list[Scorer]
    owned: dict[str, OwnedModule]
    """The method's own trainable modules (a critic), by name."""
    train_model: torch.nn.Module
    """The module the update runs on: `model` itself, or its DDP/FSDP form in data-parallel training."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    cursor: PromptCursor | RankCursor
    update_gen: torch.Generator
    settings: UpdateSettings
    start_state: dict[str, float]
    start_step: int = 0
    start_progress: dict[str, float] = field(default_factory=lambda: dict(NO_PROGRESS))
    """What the early-finish rules had counted (`Trainer.progress`)."""
    resume_step: int | None = None
    full_copy: bool = False
    """FSDP2: `model` is a full copy of the sharded `train_model`, refreshed after every update."""


class Checkpointed(Protocol):
    """What a checkpoint saves besides the policy's weights: an `Assembly` (restored into) or the
    `Trainer` that took its fields over (saved from)."""

    method: Method
    family: TaskFamily
    family_given: bool
    sampler: Sampler
    rollout_sampler: Sampler
    owned: dict[str, OwnedModule]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    cursor: PromptCursor | RankCursor
    update_gen: torch.Generator


def generators(r: Checkpointed) -> dict[str, torch.Generator]:
    """Every random stream a checkpoint saves, by name."""
    gens = {
        "sampler": r.sampler.generator,
        "update": r.update_gen,
        **{f"owned/{name}": own.generator for name, own in r.owned.items()},
    }
    if r.rollout_sampler is not r.sampler:
        gens["rollout_sampler"] = r.rollout_sampler.generator
    return gens


def family_record(r: Checkpointed) -> dict[str, Any]:
    cls = type(r.family)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "from_config": not r.family_given}


def assemble(
    cfg: LoopConfig,
    spec: MethodSpec[Any],
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
    parts: Mapping[str, Any] | None = None,
) -> Assembly:
    """The parts of a run of `spec` (the arguments of `Trainer`); every refusal comes before any model loads."""
    spec.check(cfg, parts or {})
    ranks: Solo | DataParallel = Solo() if world is None else DataParallel(world)
    check_parallel(cfg, ranks.size, strategy, resume)
    out = Path(cfg.run.out_dir)
    if resume and (out / "final" / "config.json").is_file() and not list_checkpoints(out):
        raise UserError(
            f"{out} finished and kept no checkpoint (run.keep_checkpoints=0), so it cannot be resumed; train its "
            f"model further in a new run: model.name={out / 'final'} run.out_dir=NEW_DIR"
        )
    if resume and (out / "config.yaml").is_file() and not list_checkpoints(out):
        if ranks.is_main:
            warn(
                f"{cfg.run.out_dir} has no complete checkpoint (the run stopped before its first, "
                f"run.checkpoint_every={cfg.run.checkpoint_every}): starting it again from step 0"
            )
        resume, overwrite = False, True
    if ranks.is_main:
        prepare_run_dir(out, resume, overwrite)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    torch.manual_seed(cfg.run.seed)
    family_given = family is not None
    family = family or make_family(cfg.task.family, **cfg.task.args)
    set_reward_timeout(family, cfg.task.reward_timeout)
    train_tasks = family.tasks("train", cfg.task.train_size, seed=cfg.task.data_seed)
    heldout_tasks = family.tasks("heldout", cfg.task.heldout_size, seed=cfg.task.data_seed)
    if not train_tasks:
        raise UserError(f"task family {cfg.task.family!r} gave no training tasks")
    if not heldout_tasks:  # evaluations (the start's, the final one) would report an empty table
        raise UserError(
            f"task family {family.name or cfg.task.family!r} gave {len(train_tasks)} training and no held-out tasks; "
            "evaluation needs at least one: give more rows (a share of at least 2 distinct prompts is held out), "
            "or a held-out set of its own (task.args.heldout)"
        )
    template = cfg.rollout.feedback_template
    if not family.reads_feedback_template and template != type(cfg.rollout).model_fields["feedback_template"].default:
        raise UserError(
            f"rollout.feedback_template has no effect with task family {family.name or cfg.task.family!r}: "
            "its environments answer in messages of their own; remove it"
        )
    check_feedback_templates(cfg.rollout.feedback_templates, family.template_keys(), family.name or cfg.task.family)
    device = str(world.device) if world is not None else cfg.model.device
    check_autocast(cfg.loss.autocast, resolve_device(device))
    model, tokenizer = load_model(cfg, device)
    if cfg.loss.pack:
        check_packing(model)
    if family.feedback_template is not None and "feedback_template" not in cfg.rollout.model_fields_set:
        cfg = cfg.model_copy(deep=True)  # the family's own template, recorded in the run's config
        cfg.rollout.feedback_template = family.feedback_template
    fmt = ChatFormat(
        tokenizer,
        cfg.model.use_chat_template,
        cfg.rollout.feedback_template,
        cfg.model.system_prompt,
        cfg.model.tool_prompt,
    )
    check_turns(cfg, family, fmt)
    sampler = make_sampler(cfg, model, tokenizer)
    opts = cfg.rollout.options(cfg.run.seed)
    ctx = Context(
        cfg=cfg,
        model=model,
        tokenizer=tokenizer,
        fmt=fmt,
        family=family,
        train_tasks=train_tasks,
        heldout_tasks=heldout_tasks,
        raw={t.id: t for t in train_tasks + heldout_tasks},
        sampler=sampler,
        opts=opts,
        ranks=ranks,
        resume=resume,
        parts=dict(parts or {}),
        load_start=lambda: load_model(cfg, device, lora=False)[0].eval().requires_grad_(False),
    )
    method = spec.build(ctx)
    refuse(linear_loss, cfg, Linearity(method.loss.linear, f"the {method.name} loss"))
    opts = replace(opts, **method.rollout)
    if method.student_prompt is not None:
        build = method.student_prompt
        train_tasks = [replace(t, prompt=build(t)) for t in train_tasks]
        heldout_tasks = [replace(t, prompt=build(t)) for t in heldout_tasks]
    check_context(cfg, model, fmt, train_tasks + heldout_tasks)
    optimizer = make_optimizer(model, cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.betas)
    p = Assembly(
        cfg=cfg,
        spec=spec,
        ranks=ranks,
        family=family,
        family_given=family_given,
        train_tasks=train_tasks,
        heldout_tasks=heldout_tasks,
        raw=ctx.raw,
        model=model,
        tokenizer=tokenizer,
        fmt=fmt,
        sampler=sampler,
        rollout_sampler=sampler,
        opts=opts,
        method=method,
        scorers=scorers_of(cfg, method, model),
        owned=owned_modules(cfg, method),
        train_model=model,
        optimizer=optimizer,
        scheduler=make_scheduler_for(cfg, optimizer),
        cursor=PromptCursor(len(train_tasks), cfg.run.seed),
        update_gen=torch.Generator().manual_seed(cfg.run.seed + 1),
        settings=cfg.loss.update_settings(cfg.rollout.temperature, cfg.rollout.max_new_tokens * cfg.rollout.max_turns),
        start_state=dict(method.state),
    )
    if isinstance(ranks, DataParallel):
        go_parallel(p, ranks, strategy)
    p.rollout_sampler = rollout_sampler_for(p)
    if resume:
        resume_from(p, latest_checkpoint(out, warn=warn))
    return p


def scorers_of(cfg: LoopConfig, method: Method, model: PreTrainedModel) -> list[Scorer]:
    """The method's scorers, then the rollout correction when the config asks for one."""
    scorers = list(method.scorers)
    loss = cfg.loss
    if loss.rollout_correction != "none":  # the method's loss is linear (`train/rules.py: linear_loss`)
        scorers.append(
            RolloutCorrection(
                model,
                loss.rollout_correction,
                loss.rollout_correction_cap,
                loss.micro_batch_size,
                cfg.rollout.temperature or 1.0,
                loss.rollout_correction_floor,
                loss.rollout_correction_batch_norm,
                loss.pack,
            )
        )
    return scorers


def owned_modules(cfg: LoopConfig, method: Method) -> dict[str, OwnedModule]:
    """The method's own trainable modules, each with its optimizer and random stream."""
    return {
        name: OwnedModule(
            tr,
            tr.module,
            make_optimizer(tr.module, tr.lr, tr.weight_decay, tr.betas),
            torch.Generator().manual_seed(cfg.run.seed + 2 + i),
        )
        for i, (name, tr) in enumerate(sorted(method.trainables.items()))
    }


def resume_from(p: Assembly, ckpt: Path) -> None:
    """A resume: the checkpoint restored into the parts, and a sampler with weights of its own given them."""
    p.resume_step = restore(p, ckpt)
    if p.cfg.run.steps < p.start_step:
        raise UserError(
            f"run.steps={p.cfg.run.steps} is below the step {p.cfg.run.out_dir} has reached ({p.start_step}); "
            f"resume with run.steps >= {p.start_step}"
        )
    if hasattr(p.sampler, "sync_weights"):  # the sampler's own copy still has the starting weights
        p.sampler.sync_weights(p.train_model, version=p.start_step)


def load_model(cfg: LoopConfig, device: str, lora: bool = True) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy and its tokenizer as `cfg.model` names them (with its LoRA adapter unless `lora` is off)."""
    c = cfg.model
    model, tok = load_policy(c.name, seed=cfg.run.seed, dtype=c.dtype, device=device, tokenizer=c.tokenizer)
    if c.chat_template is not None:
        path = Path(c.chat_template).expanduser()
        if not path.is_file():
            raise UserError(f"model.chat_template={c.chat_template}: no such file; give a Jinja chat template file")
        tok.chat_template = path.read_text()
    if lora and c.lora_rank:
        from tempering.models.lora import add_lora

        model = add_lora(model, c.lora_rank, c.lora_alpha, target_modules=c.lora_targets)
    return model, tok


def check_turns(cfg: LoopConfig, family: TaskFamily, fmt: ChatFormat) -> None:
    """Refuse multi-turn settings that would do nothing, or that this model cannot honour."""
    tools = getattr(family, "offers_tools", False)
    turns = max(cfg.rollout.max_turns, cfg.run.eval_max_turns or 1)
    if tools and turns < 2:
        raise UserError(
            f"task.family={cfg.task.family} with rollout.max_turns={cfg.rollout.max_turns}: each answer is a turn, "
            "so no tool result would ever reach the model; set rollout.max_turns=2 or more"
        )
    if cfg.model.tool_prompt != "template" and not (tools and fmt.use_chat_template):
        why = "its prompts offer no tools" if not tools else "the model has no chat template (tools go in as text)"
        raise UserError(
            f"model.tool_prompt={cfg.model.tool_prompt} has no effect with task.family={cfg.task.family}: {why}; "
            "remove it"
        )
    if cfg.rollout.turn_context == "template" and not fmt.use_chat_template:
        raise UserError(
            f"rollout.turn_context=template re-renders each conversation with the chat template, and {cfg.model.name} "
            "has none (or model.use_chat_template=false); use rollout.turn_context=tokens"
        )


def check_context(cfg: LoopConfig, model: PreTrainedModel, fmt: ChatFormat, tasks: list[Task]) -> None:
    """Every task's prompt leaves room for an answer, within the model's own context (checked when the
    tasks are loaded; observations that only `reset()` knows are checked when they arrive)."""
    r = cfg.rollout
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit is not None and r.max_context_tokens > limit:
        raise UserError(
            f"rollout.max_context_tokens={r.max_context_tokens} is beyond the model's context ({limit} "
            f"positions, {cfg.model.name}); set rollout.max_context_tokens <= {limit}"
        )
    if r.truncate_prompts:
        return
    budget = r.max_context_tokens - r.max_new_tokens
    long = [t.id for t in tasks if t.prompt and len(fmt.prompt_ids(t.prompt)) > budget]
    if long:
        raise UserError(
            f"{len(long)} task prompt(s) leave no room for an answer of rollout.max_new_tokens={r.max_new_tokens} "
            f"within rollout.max_context_tokens={r.max_context_tokens} (e.g. {', '.join(long[:5])}); raise "
            "max_context_tokens, shorten the prompts, or set rollout.truncate_prompts=true"
        )


def make_sampler(cfg: LoopConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Sampler:
    """The sampler `rollout.backend` names: in process (HF), a vLLM server, or Ray workers."""
    if cfg.rollout.backend == "vllm":
        from tempering.rollout.vllm_sampler import make_vllm_sampler

        return make_vllm_sampler(model, tokenizer, cfg.run.out_dir, cfg.run.seed, cfg.rollout.vllm)
    if cfg.rollout.backend == "ray":
        from tempering.rollout.ray_workers import RaySampler

        r = cfg.rollout.ray
        return RaySampler(
            model,
            tokenizer,
            r.num_workers,
            cfg.run.seed,
            r.num_cpus_per_worker,
            r.num_gpus_per_worker,
            address=r.address,
        )
    return HFSampler(model, tokenizer, seed=cfg.run.seed, threads=cfg.run.threads, dtype=sampling_dtype(cfg))


def sampling_dtype(cfg: LoopConfig) -> torch.dtype | None:
    """bf16 weights for sampling when the update computes in bf16 (`loss.autocast=bf16`); else the model's."""
    return torch.bfloat16 if cfg.loss.autocast == "bf16" else None


def rollout_sampler_for(p: Assembly) -> Sampler:
    """Asynchronous rollouts with the in-process sampler: a sampler of their own, on a frozen copy of
    the policy, with its own torch threads, continuing the sampling stream the trainer's had."""
    if not p.cfg.rollout.async_steps or not isinstance(p.sampler, HFSampler):
        return p.sampler
    if p.cfg.model.lora_rank:
        from tempering.models.lora import merged_copy

        copy_ = merged_copy(p.model)
    else:
        copy_ = copy.deepcopy(p.model)
    own = HFSampler(
        copy_.eval().requires_grad_(False),
        p.tokenizer,
        threads=p.cfg.rollout.async_threads,
        dtype=sampling_dtype(p.cfg),
    )
    own.generator.set_state(p.sampler.generator.get_state())
    return own


def make_scheduler_for(cfg: LoopConfig, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    o = cfg.optim
    return make_scheduler(optimizer, o.warmup_steps, cfg.run.steps, o.schedule, o.min_lr_ratio)


def go_parallel(p: Assembly, dp: DataParallel, strategy: str) -> None:
    """Each rank rolls out its own share with its own sampling stream; the update is DDP or FSDP2."""
    assert isinstance(p.cursor, PromptCursor)
    p.cursor = RankCursor(p.cursor, dp.rank, dp.size)
    p.sampler.generator.manual_seed(p.cfg.run.seed * 1000 + dp.rank)
    if strategy == "ddp":
        p.train_model = wrap_model(p.model, "ddp", dp.world)  # shares the weights the sampler reads
    else:
        p.train_model = wrap_model(copy.deepcopy(p.model), "fsdp2", dp.world)
        o = p.cfg.optim
        p.optimizer = make_optimizer(p.train_model, o.lr, o.weight_decay, o.betas)
        p.scheduler = make_scheduler_for(p.cfg, p.optimizer)
        p.full_copy = True
        # every forward of a sharded model is a collective: ranks must run the same forwards, and a
        # shared-prompt forward (two passes) on one rank beside a plain one elsewhere would deadlock
        p.settings.share_prefix = False
    for own in p.owned.values():  # a method's own modules are small or replicated: DDP either way
        own.train_module = wrap_model(own.trainable.module, "ddp", dp.world)
    p.settings.data_parallel = dp


# ---- checkpoints -------------------------------------------------------------------------------
def checkpoint_state(
    r: Checkpointed,
    step: int,
    state: Mapping[str, float],
    progress: Mapping[str, float],
    rngs: list[torch.Tensor],
    rollout_rngs: list[torch.Tensor],
) -> dict[str, Any]:
    """What a checkpoint holds besides the policy's weights (`restore` reads it back)."""
    return {
        "step": step,
        "optimizer": r.optimizer.state_dict(),
        "scheduler": r.scheduler.state_dict(),
        "cursor": r.cursor.state_dict(),
        "rng": rng_state(generators(r)),
        "rank_sampler_rng": rngs,
        "rank_rollout_rng": rollout_rngs,
        "method": r.method.name,
        "method_state": dict(state),
        "progress": dict(progress),
        "owned": {
            name: {"module": own.trainable.module.state_dict(), "optimizer": own.optimizer.state_dict()}
            for name, own in r.owned.items()
        },
        "task_family": family_record(r),
    }


def restore(p: Assembly, ckpt: Path) -> int:
    """Load checkpoint `ckpt` into the parts (weights, optimizers, cursor, random streams, the method's
    state and modules); returns its step."""
    from safetensors.torch import load_file

    if p.cfg.model.lora_rank:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(p.model, load_file(ckpt / "model" / "adapter_model.safetensors"))
    else:
        p.model.load_state_dict(load_file(ckpt / "model" / "model.safetensors"), strict=False)
    s = load_trainer_state(ckpt)
    check_family(p, s.get("task_family"))
    p.optimizer.load_state_dict(s["optimizer"])
    p.scheduler.load_state_dict(s["scheduler"])
    p.cursor.load_state_dict(s["cursor"])
    set_rng_state(s["rng"], generators(p))
    rngs = s.get("rank_sampler_rng") or []
    if isinstance(p.ranks, DataParallel):
        if len(rngs) != p.ranks.size:
            raise UserError(
                f"this checkpoint was written by {len(rngs)} rank(s) and {p.ranks.size} were started; "
                f"resume with --nproc-per-node (x nodes) = {len(rngs)}"
            )
        p.sampler.generator.set_state(rngs[p.ranks.rank])
        if p.rollout_sampler is not p.sampler:
            p.rollout_sampler.generator.set_state(s["rank_rollout_rng"][p.ranks.rank])
    p.start_state = {**p.start_state, **s.get("method_state", {})}
    p.start_progress = {**NO_PROGRESS, **s.get("progress", {})}
    saved = s.get("owned", {})
    if set(saved) != set(p.owned):
        raise UserError(
            f"{ckpt} holds the modules {sorted(saved) or 'none'} and the {p.method.name} method trains "
            f"{sorted(p.owned) or 'none'}; resume with the config the run was started with"
        )
    for name, own in p.owned.items():
        own.trainable.module.load_state_dict(saved[name]["module"])
        own.optimizer.load_state_dict(saved[name]["optimizer"])
    p.start_step = s["step"]
    return p.start_step


def check_family(p: Assembly, saved: dict[str, Any] | None) -> None:
    """A resume trains on what the run trained on, or refuses."""
    if saved is None:
        return
    here = family_record(p)
    if not saved["from_config"] and not p.family_given:
        raise UserError(
            f"this run trained on a task family given from Python ({saved['class']}), which its config cannot "
            "rebuild; resume it from Python with the same family: trainer(cfg, family=..., resume=True)"
        )
    if saved["class"] != here["class"]:
        raise UserError(
            f"this run trained on {saved['class']} and the resume would train on {here['class']}; resume with "
            "the run's own task family"
        )


# ---- refusals before any work ------------------------------------------------------------------
def check_parallel(cfg: LoopConfig, size: int, strategy: str, resume: bool) -> None:
    """What a data-parallel run cannot do, before any work starts."""
    if size == 1:
        return
    n = cfg.rollout.prompts_per_step
    if n % size:
        fits = [k for k in range(1, n + 1) if n % k == 0]
        raise UserError(
            f"rollout.prompts_per_step={n} does not split over {size} ranks; make it a multiple of "
            f"{size}, or start a number of processes that divides it ({', '.join(map(str, fits))})"
        )
    if strategy == "fsdp2" and resume:
        raise UserError(
            "--resume is supported with --strategy ddp; an fsdp2 checkpoint keeps full model weights but "
            "not the sharded optimizer state: start a new run from checkpoints/step_N/model"
        )
