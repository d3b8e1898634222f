"""`tempering cuda-agent`: CUDA Agent's training recipe as one staged pipeline.

    pretrain (ours)  -> warmup        -> rft                 -> critic_pretrain      -> rl
    supervised warm     single-turn     rejection fine-       value pre-training      multi-turn agentic RL:
    start of a tiny     RL (GRPO)       tuning on the         (PPO, policy frozen)    PPO with GAE (gamma 1,
    model                               agent's own good                              lambda 0.95, clip
                                        trajectories                                  0.2 / 0.28), or GRPO

Each stage is a run of its own verb (`pretrain`, `train`, `rft`, `ppo`) in a folder of the pipeline's
run folder (`1_pretrain`, `2_warmup`, ...), starting from the previous stage's `final/` model; the critic
pre-trained in `4_critic_pretrain` starts the PPO critic of `5_rl`. A finished stage is reused when the
pipeline runs again (its `stage.json` records a digest of its config and of every stage before it, so a
changed config is refused instead of silently reusing stale weights); an interrupted one resumes with
`--resume`. Every stage can be switched off, so each ablation is one flag: `rft.enabled=false`,
`critic_pretrain.enabled=false`, `rl.algorithm=grpo` (the critic-free variant: GRPO after RFT, our
deviation for small compute; critic pre-training is skipped then). After each stage the held-out problems
are evaluated with the paper's columns (`report.json`): correct, faster than eager, faster than
torch.compile (the CUDA Agent reward of each episode's submission: >= 1, >= 2, = 3) and the mean reward.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, model_validator

from tempering.config import Schema, as_config, build, ignored_unless
from tempering.envs.base import TaskFamily
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.methods import ppo, rft, rl
from tempering.methods.ppo import PPOConfig
from tempering.methods.pretrain import PretrainConfig, PretrainOptim, PretrainRollout, PretrainRun, pretrain
from tempering.methods.rft import RFTConfig
from tempering.methods.rl import RLLossSection, TrainConfig
from tempering.models import load_policy
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import rollout
from tempering.rollout.sampler import HFSampler
from tempering.runlog import atomic_write_text
from tempering.train.config import (
    LoopConfig,
    ModelSection,
    OptimSection,
    RolloutSection,
    RunSection,
    TaskSection,
    UpdateSection,
)
from tempering.train.loop import Trainer
from tempering.train.method import MethodSpec
from tempering.train.stages import Done, Stage, Stages
from tempering.types import Episode

STAGES = ("pretrain", "warmup", "rft", "critic_pretrain", "rl")
L = TypeVar("L", bound=LoopConfig)
S = TypeVar("S", bound=Schema)


class PretrainStage(Schema):
    """Supervised warm start on the tasks' answers (ours: the embedded tiny models start from scratch; the
    paper starts from a pretrained LLM). Switch it off when `model.name` is a trained model."""

    enabled: bool = Field(True, description="Run this stage.")
    steps: int = Field(200, ge=1, description="Optimizer steps.")
    lr: float = Field(1e-3, gt=0, description="Learning rate.")
    batch_size: int = Field(64, ge=1, description="Examples per step.")


class StageSection(Schema):
    enabled: bool = Field(True, description="Run this stage (false: the next stage starts where the last one ended).")
    steps: int = Field(20, ge=1, description="Training steps of this stage.")
    lr: float | None = Field(None, gt=0, description="Policy learning rate of this stage (default optim.lr).")


class RFTStage(StageSection, rft.RFTSection):
    """Rejection fine-tuning on the agent's own multi-turn trajectories (the filter keys of `tempering rft`)."""


class CriticPretrainStage(Schema):
    enabled: bool = Field(True, description="Pre-train the critic before PPO (skipped when rl.algorithm=grpo).")
    steps: int = Field(4, ge=1, description="Steps of value pre-training (the policy frozen).")


class RLStage(StageSection):
    algorithm: Literal["ppo", "grpo"] = Field(
        "ppo", description="Multi-turn agentic RL: PPO with the critic (the paper) or critic-free GRPO (our deviation)."
    )


class CudaAgentRun(RunSection):
    out_dir: str = Field("runs/cuda_agent", description="Pipeline folder: one sub-folder per stage, report.json.")

    @model_validator(mode="after")
    def _check_steps(self):
        # compared with the default, not `model_fields_set`: a run's own config.yaml (read by --resume) writes it
        if self.steps != type(self).model_fields["steps"].default:
            raise ValueError("run.steps is set per stage in cuda-agent: use warmup.steps, rft.steps, ... instead")
        return self


SKETCH_PROBLEMS = ["11_add", "13_scale_shift", "34_residual_relu", "01_relu", "12_mul_add"]
"""The embedded default's problems: three to train on, two held out (by the family's split), all of them
element-wise chains whose sketches can beat eager PyTorch on a CPU."""


def _default_task() -> TaskSection:
    args = {"problem_names": SKETCH_PROBLEMS, "answer_keys": ["tail", "unroll", "vec"]}
    return TaskSection(family="kernel_sketch_agent", args=args, train_size=200, heldout_size=2)


def _default_rollout() -> RolloutSection:
    return RolloutSection(group_size=4, prompts_per_step=4, max_new_tokens=40, max_turns=3)


class CudaAgentConfig(Schema):
    """CUDA Agent's staged recipe (`tempering cuda-agent`); the shared sections apply to every stage."""

    model: ModelSection = Field(default_factory=ModelSection, description="The starting policy.")
    task: TaskSection = Field(
        default_factory=_default_task, description="Kernel tasks (a family whose reward is cuda_agent)."
    )
    rollout: RolloutSection = Field(
        default_factory=_default_rollout,
        description="Sampling and turns of the agent stages (the warm-up is single-turn).",
    )
    loss: ppo.PPOLossSection = Field(
        default_factory=ppo.PPOLossSection, description="The policy update (PPO clip 0.2 / 0.28) and GAE."
    )
    critic: ppo.CriticSection = Field(default_factory=ppo.CriticSection, description="PPO's critic.")
    optim: OptimSection = Field(
        default_factory=lambda: OptimSection(lr=3e-4),
        description="Optimizer and schedule of every stage (lr 3e-4: the embedded default trains the tiny-s its "
        "pretrain stage builds; about 1e-6 for a pretrained model).",
    )
    run: CudaAgentRun = Field(default_factory=CudaAgentRun, description="Seed, folder, evaluation, checkpoints.")
    pretrain: PretrainStage = Field(default_factory=PretrainStage, description="Supervised warm start (ours).")
    warmup: StageSection = Field(
        default_factory=lambda: StageSection(steps=8), description="Single-turn RL warm-up (GRPO)."
    )
    rft: RFTStage = Field(
        default_factory=lambda: RFTStage(steps=4), description="Rejection fine-tuning on agent trajectories."
    )
    critic_pretrain: CriticPretrainStage = Field(
        default_factory=CriticPretrainStage, description="Value pre-training (PPO with the policy frozen)."
    )
    rl: RLStage = Field(default_factory=lambda: RLStage(steps=12), description="Multi-turn agentic RL.")

    @model_validator(mode="after")
    def _check(self):
        if self.critic.pretrain_steps:
            raise ValueError(
                "critic.pretrain_steps is the critic_pretrain stage in cuda-agent: set critic_pretrain.steps"
            )
        if self.critic.init:
            raise ValueError("critic.init is the critic_pretrain stage's critic in cuda-agent; leave it unset")
        ppo_keys = ["gamma", "lam", "whiten_advantages"]
        ignored_unless(self.loss, "loss", ppo_keys, self.rl.algorithm == "ppo", "rl.algorithm=ppo")
        if self.rl.algorithm != "ppo" and self.critic != ppo.CriticSection():
            raise ValueError("critic.* has no effect unless rl.algorithm=ppo; remove it, or set rl.algorithm=ppo")
        if self.rollout.max_turns < 2:
            raise ValueError("rollout.max_turns is the agent stages' turn limit: give it at least 2")
        return self


def cuda_agent_columns(episodes: list[Episode]) -> dict[str, float]:
    """The paper's columns over episodes whose reward is CUDA Agent's {-1, 1, 2, 3} (-1: no correct
    submission): correct (>= 1), faster than eager (>= 2), faster than torch.compile (3), mean reward."""
    n = max(len(episodes), 1)
    r = [e.reward for e in episodes]
    return {
        "correct_rate": sum(x >= 1 for x in r) / n,
        "faster_than_eager_rate": sum(x >= 2 for x in r) / n,
        "faster_than_compile_rate": sum(x >= 3 for x in r) / n,
        "reward_mean": sum(r) / n,
        "episodes": len(episodes),
    }


def stage_config(schema: type[L], **sections: Schema) -> L:
    """A stage's config from typed sections, each read again as the stage verb's own section class
    (`RLRolloutSection` from a `RolloutSection`, say): what a section was given is kept, the rest defaults."""
    return build(schema, {k: s.model_dump(exclude_unset=True) for k, s in sections.items()})


class Pipeline:
    """The stages of one cuda-agent run folder (see the module docstring)."""

    def __init__(self, cfg: CudaAgentConfig, family: TaskFamily):
        self.cfg, self.family = cfg, family
        self.root = Path(cfg.run.out_dir)
        self.report_path = self.root / "report.json"
        self.report: dict[str, Any] = json.loads(self.report_path.read_text()) if self.report_path.is_file() else {}

    def stages(self) -> list[Stage[Any]]:
        return [
            Stage("pretrain", self.pretrain, partial(pretrain, family=self.family), self.evaluate),
            Stage("warmup", self.warmup, self.trained, self.evaluate),
            Stage("rft", self.rft, self.trained, self.evaluate),
            Stage("critic_pretrain", self.critic_pretrain, self.trained),
            Stage("rl", self.rl, self.trained, self.evaluate),
        ]

    def policy(self, last: Done | None) -> ModelSection:
        """The policy a stage starts from: the last stage's, or the one critic pre-training started from."""
        if last is None:
            name = self.cfg.model.name
        elif last.name == "critic_pretrain":
            name = last.config.model.name
        else:
            name = last.final
        return self.cfg.model.model_copy(update={"name": name})

    def run_section(self, name: str, steps: int) -> RunSection:
        out_dir = str(self.root / f"{STAGES.index(name) + 1}_{name}")
        return RunSection(**self.cfg.run.model_dump(exclude={"out_dir", "steps"}), steps=steps, out_dir=out_dir)

    def optim(self, lr: float | None) -> OptimSection:
        return self.cfg.optim.model_copy(update={"lr": lr}) if lr else self.cfg.optim

    def loss(self, section: type[S], **keys: Any) -> S:
        """The keys of `loss` that a stage's update `section` has (not GAE's), with `keys`."""
        fields = set(section.model_fields) - {"gamma", "lam", "whiten_advantages"} - set(keys)
        return section(**self.cfg.loss.model_dump(include=fields, exclude_unset=True), **keys)

    def pretrain(self, last: Done | None) -> PretrainConfig | None:
        c, p = self.cfg, self.cfg.pretrain
        if not p.enabled:
            return None
        run = PretrainRun(
            steps=p.steps,
            seed=c.run.seed,
            out_dir=str(self.root / "1_pretrain"),
            eval_every=0,
            progress=c.run.progress,
            tensorboard=c.run.tensorboard,
        )
        return stage_config(
            PretrainConfig,
            model=self.policy(last),
            task=c.task,
            rollout=PretrainRollout(prompts_per_step=p.batch_size, max_new_tokens=c.rollout.max_new_tokens),
            optim=PretrainOptim(lr=p.lr, warmup_steps=min(50, p.steps // 5)),
            run=run,
        )

    def warmup(self, last: Done | None) -> TrainConfig | None:
        """Single-turn GRPO."""
        c, w = self.cfg, self.cfg.warmup
        if not w.enabled:
            return None
        return stage_config(
            TrainConfig,
            model=self.policy(last),
            task=c.task,
            rollout=c.rollout.model_copy(update={"max_turns": 1}),
            loss=self.loss(RLLossSection, advantage="grpo"),
            optim=self.optim(w.lr),
            run=self.run_section("warmup", w.steps),
        )

    def rft(self, last: Done | None) -> RFTConfig | None:
        c, r = self.cfg, self.cfg.rft
        if not r.enabled:
            return None
        return stage_config(
            RFTConfig,
            model=self.policy(last),
            task=c.task,
            rollout=c.rollout,
            loss=self.loss(UpdateSection),
            optim=self.optim(r.lr),
            run=self.run_section("rft", r.steps),
            rft=rft.RFTSection(**r.model_dump(exclude={"enabled", "steps", "lr"})),
        )

    def critic_pretrain(self, last: Done | None) -> PPOConfig | None:
        """Value pre-training (PPO with the policy frozen); only before PPO."""
        c = self.cfg
        if c.rl.algorithm != "ppo" or not c.critic_pretrain.enabled:
            return None
        steps = c.critic_pretrain.steps
        return stage_config(
            PPOConfig,
            model=self.policy(last),
            task=c.task,
            rollout=c.rollout,
            loss=c.loss,
            critic=c.critic.model_copy(update={"pretrain_steps": steps}),
            optim=c.optim,
            run=self.run_section("critic_pretrain", steps),
        )

    def rl(self, last: Done | None) -> PPOConfig | TrainConfig:
        """Multi-turn PPO, its critic the pre-trained one when there is one; or GRPO."""
        c = self.cfg
        shared = {"model": self.policy(last), "task": c.task, "rollout": c.rollout, "optim": self.optim(c.rl.lr)}
        run = self.run_section("rl", c.rl.steps)
        if c.rl.algorithm == "grpo":
            return stage_config(TrainConfig, **shared, loss=self.loss(RLLossSection, advantage="grpo"), run=run)
        critic = c.critic
        if last is not None and last.name == "critic_pretrain":
            critic = critic.model_copy(update={"init": str(Path(last.final) / "critic.safetensors")})
        return stage_config(PPOConfig, **shared, loss=c.loss, critic=critic, run=run)

    def trained(self, cfg: LoopConfig, resume: bool, overwrite: bool) -> dict[str, Any]:
        return Trainer(cfg, self.method(cfg), family=self.family, resume=resume, overwrite=overwrite).run()

    def evaluate(self, done: Done) -> None:
        """The paper's columns for the stage's model on the held-out problems (`run.eval_k` episodes each)."""
        self.columns(done.name, done.final)

    def columns(self, name: str, model: str) -> None:
        if name in self.report:
            return
        c = self.cfg
        policy, tok = load_policy(model, seed=c.run.seed, device=c.model.device)
        sampler = HFSampler(policy, tok, seed=c.run.seed)
        fmt = ChatFormat(tok, c.model.use_chat_template, c.rollout.feedback_template, c.model.system_prompt)
        tasks = self.family.tasks("heldout", c.task.heldout_size, seed=c.task.data_seed)
        groups = asyncio.run(
            rollout(sampler, fmt, tasks, self.family.make_env, c.run.eval_k, c.rollout.options(c.run.seed))
        )
        self.report[name] = {"model": model, **cuda_agent_columns([e for g in groups for e in g.episodes])}
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.report_path, json.dumps(self.report, indent=2) + "\n")

    def run(self, stages: Stages) -> dict[str, Any]:
        self.columns("start", self.cfg.model.name)
        done = stages.run(self.stages())
        model = self.policy(done[-1] if done else None).name
        return {"model": model, "report": str(self.report_path), **{k: v for k, v in self.report.items()}}

    @staticmethod
    def method(cfg: LoopConfig) -> MethodSpec[Any]:
        if isinstance(cfg, PPOConfig):
            return ppo.SPEC
        if isinstance(cfg, RFTConfig):
            return rft.SPEC
        return rl.SPEC


def cuda_agent(
    cfg: CudaAgentConfig | dict, family: TaskFamily | None = None, resume: bool = False, overwrite: bool = False
) -> dict[str, Any]:
    """Run the pipeline (`resume`: reusing finished stages, continuing an interrupted one); `family`
    overrides `cfg.task` and is shared by every stage (so a memoising kernel family verifies each distinct
    kernel once for the whole pipeline)."""
    cfg = as_config(CudaAgentConfig, cfg)
    family = family or make_family(cfg.task.family, **cfg.task.args)
    if getattr(family, "reward", None) != "cuda_agent":
        raise UserError(
            f"cuda-agent reports CUDA Agent's columns from the {{-1, 1, 2, 3}} reward; task family "
            f"{cfg.task.family!r} has reward={getattr(family, 'reward', None)!r}: set task.args.reward=cuda_agent"
        )
    stages = Stages(Path(cfg.run.out_dir), cfg, resume, overwrite)
    try:
        return Pipeline(cfg, family).run(stages)
    finally:
        family.close()


def run(cfg: CudaAgentConfig, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """`tempering cuda-agent`: the pipeline, and the held-out columns after each stage for the CLI's table."""
    out = cuda_agent(cfg, resume=resume, overwrite=overwrite)
    return {
        stage: {k: v for k, v in cols.items() if k != "episodes" and isinstance(v, (int, float))}
        for stage, cols in out.items()
        if isinstance(cols, dict)
    }
