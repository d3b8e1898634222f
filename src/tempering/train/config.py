"""Config sections shared by every verb that trains a policy with the one loop (`train/loop.py`).

Each verb composes its own top-level schema from these sections plus its method's section, and carries
only the keys it reads. Keys that only matter when a switch is on are refused while it is off
(`ignored_unless`), so no value is silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from typing_extensions import Self

from tempering.algos.correction import CORRECTIONS, RENAMED
from tempering.algos.losses import AGG_MODES, CLIP_KEYS, POLICY_LOSSES
from tempering.config import Schema, ignored_unless
from tempering.rollout.engine import FEEDBACK_TEMPLATES, RolloutOptions
from tempering.rollout.ray_workers import RaySection
from tempering.rollout.sampler import SamplingParams
from tempering.rollout.vllm_sampler import VLLMSection
from tempering.train import rules
from tempering.train.update import UpdateSettings

LossAgg = Literal[AGG_MODES]  # type: ignore[valid-type]


class ModelSection(Schema):
    name: str = Field(
        "tiny-s",
        description="Built-in tiny size (tiny-xs/s/m/l/xl), a packaged model (smollm2-135m-instruct, or its Hub id HuggingFaceTB/SmolLM2-135M-Instruct), a .gguf file, a local Hugging Face model folder, or a Hub id already in the local Hugging Face cache (never downloaded).",
    )
    tokenizer: str | None = Field(
        None,
        description="A fresh tiny model's tokenizer: a packaged model or local folder (e.g. smollm2-135m-instruct) "
        "whose tokenizer and chat template it takes, its embedding sized to that vocabulary (default: characters).",
    )
    use_chat_template: bool | None = Field(
        None, description="Apply the tokenizer's chat template (default: when it has one)."
    )
    system_prompt: str | None = Field(None, description="System message for chat-template models.")
    chat_template: str | None = Field(
        None,
        description="A Jinja chat template file that replaces the tokenizer's (e.g. one that renders tools, or a prefix-preserving training template); saved with the trained model.",
    )
    tool_prompt: Literal["template", "system"] = Field(
        "template",
        description="Where a prompt's tools go (task.family=tools): template (the chat template renders tools=; a template that leaves a tool out is refused) or system (tempering writes their schemas into the system message, Hermes' format).",
    )
    device: str = Field("cpu", description="Where the policy runs: cpu, cuda, cuda:N, or auto (a GPU when visible).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Parameter dtype of the policy.")
    lora_rank: int = Field(
        0, ge=0, description="Train LoRA adapters of this rank only (0 = full fine-tuning; needs the peft extra)."
    )
    lora_alpha: float | None = Field(None, description="LoRA scaling numerator (default 2 x rank).")
    lora_targets: list[str] | None = Field(
        None, description="Linear layers to adapt (default: attention and MLP projections)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        ignored_unless(self, "model", ["lora_alpha", "lora_targets"], self.lora_rank > 0, "model.lora_rank > 0")
        return self


class TaskSection(Schema):
    family: str = Field(
        "arithmetic", description="Task family: arithmetic, strings, chain, dataset, code, kernels, gui, ..."
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the family (difficulty knobs, paths)."
    )
    train_size: int = Field(
        20000, gt=0, description="Number of distinct training prompts drawn (the pool cycled through)."
    )
    heldout_size: int = Field(500, gt=0, description="Held-out prompts used for evaluation.")
    data_seed: int = Field(0, description="Seed of the train/held-out draws (independent of the run seed).")
    max_error_rate: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Share of a step's environment calls that may raise (user reward code, verifiers) before the run stops; the first error of each kind is shown.",
    )
    reward_timeout: float | None = Field(
        300.0,
        gt=0,
        description="Seconds a user reward function may take on one batch of answers (task.family=dataset); a call that takes longer is an environment error naming the function (null = no limit).",
    )


class RolloutSection(Schema):
    backend: Literal["hf", "vllm", "ray"] = Field(
        "hf",
        description="Generation: hf (in this process), vllm (GPU; extra 'vllm') or ray (rollout workers; extra 'ray').",
    )
    vllm: VLLMSection = Field(default_factory=VLLMSection, description="vLLM engine options (rollout.backend=vllm).")
    ray: RaySection = Field(default_factory=RaySection, description="Ray rollout workers (rollout.backend=ray).")
    group_size: int = Field(8, ge=1, description="Episodes sampled per prompt (G).")
    prompts_per_step: int = Field(32, ge=1, description="Prompts (groups) per training step.")
    max_new_tokens: int = Field(16, ge=1, description="Token limit of one answer.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0 = off).")
    stop: list[str] = Field(default_factory=list, description="Stop strings besides EOS.")
    max_turns: int = Field(1, ge=1, description="Turn limit K of an episode (1 = single-turn).")
    feedback_template: str = Field(
        "\n{feedback}\n{prompt}",
        description="Text appended after a failed turn ({feedback} = the status message, {prompt} = the first observation).",
    )
    feedback_templates: dict[str, str] = Field(
        default_factory=lambda: dict(FEEDBACK_TEMPLATES),
        description="Status message per verifier status ({feedback} and the step's info keys).",
    )
    max_context_tokens: int = Field(
        1024, ge=8, description="Context window; beyond it older turns are dropped (or the episode stops)."
    )
    drop_old_turns: bool = Field(
        True, description="Drop the oldest turns when the context fills (false: stop with stop_reason=context)."
    )
    turn_context: Literal["tokens", "template"] = Field(
        "tokens",
        description="A later turn's context: tokens (the context so far, the sampled answer and the environment's reply rendered after it: exactly what was sampled, whatever the chat template) or template (the whole conversation re-rendered by the chat template, as a chat server would; where that differs from the tokens held, the training row realigns or forks).",
    )
    fork_threshold_tokens: int = Field(
        1024,
        ge=1,
        description="turn_context=template: a re-rendering that differs from the tokens held only inside the last answer, by fewer tokens than this, realigns the row (those answer tokens become context); otherwise a new row starts (TRL's fork_threshold_tokens).",
    )
    truncate_prompts: bool = Field(
        False,
        description="A prompt too long for the context keeps its last tokens (false: the run refuses the task, naming it).",
    )
    score_range: tuple[float, float] | None = Field(
        None, description="Required verifier score range, e.g. [0, 1] for TCPO (null = any)."
    )
    clamp_scores: bool = Field(False, description="Clamp out-of-range verifier scores instead of failing.")
    on_env_error: Literal["train", "drop"] = Field(
        "train", description="A group with an env_error episode is still trained on, or dropped."
    )
    async_steps: int = Field(
        0,
        ge=0,
        description="Asynchronous rollouts: the next batches are generated during the update, by weights up to this many updates old (0 = synchronous; 1 = one-step off-policy). Needs loss.rollout_correction; drains at evaluations and checkpoints.",
    )
    async_threads: int = Field(
        0,
        ge=0,
        description="Asynchronous rollouts with backend=hf: torch CPU threads of the sampling thread (0 = torch's default); with run.threads, split the cores.",
    )

    @model_validator(mode="after")
    def _check_rollout(self) -> Self:
        rules.rollout_keys(self)
        return self

    def sampling(self) -> SamplingParams:
        return SamplingParams(self.max_new_tokens, self.temperature, self.top_p, self.top_k, list(self.stop))

    def options(self, seed: int = 0) -> RolloutOptions:
        """The rollout engine's options (methods add their own, e.g. LEAP's pruning)."""
        return RolloutOptions(
            sampling=self.sampling(),
            max_turns=self.max_turns,
            max_context_tokens=self.max_context_tokens,
            drop_old_turns=self.drop_old_turns,
            feedback_templates=dict(self.feedback_templates),
            score_range=(self.score_range[0], self.score_range[1]) if self.score_range else None,
            clamp_scores=self.clamp_scores,
            truncate_prompts=self.truncate_prompts,
            turn_context=self.turn_context,
            fork_threshold_tokens=self.fork_threshold_tokens,
        )


class PPOClipSection(Schema):
    """The keys of a PPO-clip loss (a mixin of the `loss` sections whose loss clips the ratio:
    `ClippedUpdateSection`); a loss that does not clip has none of them."""

    clip_low: float = Field(0.2, ge=0, description="PPO clip below 1 (eps_low).")
    clip_high: float = Field(0.28, ge=0, description="PPO clip above 1 (eps_high; DAPO clip-higher).")
    dual_clip: float | None = Field(3.0, description="Dual-clip constant c for negative advantages (null = off).")


class UpdateSection(Schema):
    """The keys every policy update reads, whatever its loss (the `loss` section of a loss that does not
    clip, e.g. RFT's NLL; a PPO-clip loss's is `ClippedUpdateSection`, RL verbs add their credit keys)."""

    loss_agg: LossAgg = Field("token-mean", description="Loss aggregation, normalised over the whole optimizer step.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each batch.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per pass (the batch is split into this many).")
    micro_batch_size: int = Field(256, ge=1, description="Sequences per forward/backward (gradient accumulation).")
    share_prefix: bool = Field(
        True,
        description="Run a prompt shared by a group's samples through the model once per micro-batch (same numbers, less compute).",
    )
    pack: bool = Field(
        False,
        description="Pack each micro-batch's sequences into rows without padding (a continuation attends to its prompt and itself only) and run the output layer in chunks: the same numbers up to float rounding, less compute and memory; for the policy, the reference, in-process teachers and the critic. Refused for a model whose attention takes no block-diagonal mask.",
    )
    norm_scope: Literal["step", "micro_batch"] = Field(
        "step",
        description="Loss normaliser: over the whole optimizer step (ours, the better estimator), or each micro-batch's own mean weighted by its rows (verl's, to replicate verl-trained runs).",
    )
    autocast: Literal["none", "bf16"] = Field(
        "none",
        description="Mixed precision of the update's forward and backward: bf16 autocast (weights, gradients and AdamW stay float32). Refused on a CPU without bf16 instructions, where it is slower.",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    mask_truncated: bool = Field(False, description="Drop answers that hit the token limit from the loss (DAPO).")
    rollout_correction: Literal[CORRECTIONS] = Field(  # type: ignore[valid-type]
        "none",
        description="Behaviour (sampler) / proximal (trainer) mismatch, weights rho = pi_prox / pi_behav on the advantages: "
        "tis (token rho truncated), sequence_truncate, token_mask / sequence_mask (rho, 0 outside the band; TRL), "
        "icepop (two-sided token mask; verl), decoupled (AReaL: rho, 0 outside the band), verl's rejections "
        "token_k1|seq_sum_k1|seq_mean_k1 (ratio band) and token|seq_sum|seq_mean|seq_max _k2|_k3 (divergence above "
        "the cap), bypass (the sampler's log-probs as the old ones, no recomputation), or one of verl's presets "
        "(decoupled_token_is, decoupled_seq_is, decoupled_token_icepop, decoupled_seq_is_rs, decoupled_geo_rs, "
        "decoupled_geo_rs_seq_tis, decoupled_geo_rs_token_tis, bypass_ppo_clip). See algos/correction.py.",
    )
    rollout_correction_cap: float | None = Field(
        None,
        gt=0,
        description="Upper bound of the band: of rho (> 1; .inf = none, TRL's clip_max=None), or of k2 / k3 for those "
        "rejections (required there). Default: the mode's anchor: tis and sequence_truncate 2, token_mask and "
        "sequence_mask 3, icepop 5, token_k1 and seq_sum_k1 2, seq_mean_k1 1.001, decoupled 5.",
    )
    rollout_correction_floor: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Lower bound of rho (default: the mode's anchor: icepop 0.5, token_k1 and seq_sum_k1 0.5, "
        "seq_mean_k1 0.999, the others none).",
    )
    rollout_correction_batch_norm: bool = Field(
        False,
        description="Divide the correction's weights by their mean over the batch (verl's rollout_is_batch_normalize; "
        "a weighting mode only).",
    )

    @field_validator("rollout_correction", mode="before")
    @classmethod
    def _renamed_correction(cls, v: object) -> object:
        if isinstance(v, str) and v in RENAMED:
            raise ValueError(RENAMED[v])
        return v

    @model_validator(mode="after")
    def _check_update(self) -> Self:
        rules.correction_keys(self)
        return self

    def update_settings(self, temperature: float, max_response_len: int) -> UpdateSettings:
        return UpdateSettings(
            ppo_epochs=self.ppo_epochs,
            mini_batches=self.mini_batches,
            micro_batch_size=self.micro_batch_size,
            loss_agg=self.loss_agg,
            max_grad_norm=self.max_grad_norm,
            temperature=temperature or 1.0,
            max_response_len=max_response_len,
            share_prefix=self.share_prefix,
            pack=self.pack,
            norm_scope=self.norm_scope,
            autocast=self.autocast,
        )


class ClippedUpdateSection(UpdateSection, PPOClipSection):
    """The update of a PPO-clip loss (GRPO family, PPO, TU-OPD, Direct-OPD's top-k PPO, distill's
    reverse_kl): the shared keys plus the clip. Without them a loss leaves `UpdateSettings`' clip at its
    defaults, which are these keys' defaults."""

    def update_settings(self, temperature: float, max_response_len: int) -> UpdateSettings:
        s = super().update_settings(temperature, max_response_len)
        s.clip_low, s.clip_high, s.dual_clip = self.clip_low, self.clip_high, self.dual_clip
        return s


class PolicyLossSection(ClippedUpdateSection):
    """The update of a policy-gradient loss chosen from the registry (`algos/losses.py: POLICY_LOSSES`), its
    own settings, the entropy terms and TRL's token masks. A setting the chosen loss does not read is refused."""

    policy_loss: str = Field(
        "ppo_clip",
        description="The policy loss: ppo_clip (verl's vanilla; TRL's grpo/dapo/bnpo/dr_grpo), gspo (sequence ratio, "
        "TRL's), gspo_token (verl's gspo), cispo, sapo, gmpo (verl's geo_mean), dppo_tv, dppo_kl, clip_cov, kl_cov, dro, "
        "vespo (TRL's), or one registered with algos.losses.register_policy_loss. docs/losses.md.",
    )
    sapo_tau_pos: float = Field(1.0, gt=0, description="SAPO: gate temperature of positive advantages.")
    sapo_tau_neg: float = Field(1.05, gt=0, description="SAPO: gate temperature of negative advantages.")
    vespo_k_pos: float = Field(2.0, description="VESPO: gamma weight's power k of non-negative advantages.")
    vespo_lambda_pos: float = Field(3.0, description="VESPO: gamma weight's rate lambda of non-negative advantages.")
    vespo_k_neg: float = Field(3.0, description="VESPO: power k of negative advantages.")
    vespo_lambda_neg: float = Field(2.0, description="VESPO: rate lambda of negative advantages.")
    clip_cov_ratio: float = Field(0.0002, gt=0, le=1, description="Clip-Cov: share of loss tokens taken out.")
    clip_cov_lb: float = Field(1.0, description="Clip-Cov: lower bound of the covariance of a token taken out.")
    clip_cov_ub: float = Field(5.0, description="Clip-Cov: upper bound of the covariance of a token taken out.")
    kl_cov_ratio: float = Field(0.0002, gt=0, le=1, description="KL-Cov: share of loss tokens given the |log r| term.")
    kl_cov_coef: float = Field(0.1, ge=0, description="KL-Cov: coefficient of the |log r| term (verl's ppo_kl_coef).")
    dro_beta: float = Field(
        1.0, gt=0, description="DRO: coefficient of the quadratic log-ratio penalty (ours; verl requires one)."
    )
    entropy_coef: float = Field(
        0.0,
        ge=0,
        description="Entropy bonus: the loss minus this times the policy tokens' entropy, aggregated as the loss "
        "(with loss.entropy_adaptive, the starting coefficient).",
    )
    entropy_adaptive: bool = Field(
        False,
        description="Adapt loss.entropy_coef each update (TRL's use_adaptive_entropy): up by entropy_coef_delta while "
        "the entropy is at or below loss.entropy_target, else down; the bonus applies only below the target.",
    )
    entropy_target: float = Field(0.2, ge=0, description="Adaptive entropy: the target entropy in nats.")
    entropy_coef_min: float = Field(0.0, ge=0, description="Adaptive entropy: the coefficient's lower bound.")
    entropy_coef_max: float = Field(1.0, ge=0, description="Adaptive entropy: the coefficient's upper bound.")
    entropy_coef_delta: float = Field(0.005, ge=0, description="Adaptive entropy: the coefficient's step.")
    entropy_top_quantile: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Train only on the loss tokens in this top share of entropies (TRL's top_entropy_quantile, the "
        "80/20 rule's 0.2; 1 = every token).",
    )
    off_policy_mask_threshold: float | None = Field(
        None,
        ge=0,
        description="DeepSeek-V3.2's off-policy sequence mask (TRL's): a negative-advantage answer whose mean k1 KL "
        "from the sampler's policy passes this leaves the loss (null = off).",
    )

    @model_validator(mode="after")
    def _check_policy_loss(self) -> Self:
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(
                f"loss.policy_loss={self.policy_loss!r} is unknown; choose one of {', '.join(POLICY_LOSSES)}"
            )
        spec = POLICY_LOSSES[self.policy_loss]
        read_by = {k: [n for n, p in POLICY_LOSSES.items() if k in p.params] for k in self.params_of_all()}
        for key, losses in read_by.items():
            if self.policy_loss not in losses:
                ignored_unless(self, "loss", [key], False, "loss.policy_loss=" + "|".join(losses))
        for key in CLIP_KEYS:
            if key not in spec.clips:
                readers = [n for n, p in POLICY_LOSSES.items() if key in p.clips]
                ignored_unless(self, "loss", [key], False, "loss.policy_loss=" + "|".join(readers))
        adaptive = ["entropy_target", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta"]
        ignored_unless(self, "loss", adaptive, self.entropy_adaptive, "loss.entropy_adaptive=true")
        if self.entropy_adaptive and self.entropy_coef_min > self.entropy_coef_max:
            raise ValueError("loss.entropy_coef_min must be <= loss.entropy_coef_max")
        return self

    @classmethod
    def params_of_all(cls) -> list[str]:
        """The loss parameters this section has keys for (every built-in loss's)."""
        return [k for k in cls.model_fields if any(k in p.params for p in POLICY_LOSSES.values())]

    def update_settings(self, temperature: float, max_response_len: int) -> UpdateSettings:
        s = super().update_settings(temperature, max_response_len)
        s.policy_loss = self.policy_loss
        s.loss_params = {
            k: getattr(self, k) for k in POLICY_LOSSES[self.policy_loss].params if k in type(self).model_fields
        }
        s.entropy_coef = self.entropy_coef
        s.entropy_target = self.entropy_target if self.entropy_adaptive else None
        s.entropy_top_quantile = self.entropy_top_quantile
        s.off_policy_mask_threshold = self.off_policy_mask_threshold
        return s


class OptimSection(Schema):
    lr: float = Field(
        1e-6,
        gt=0,
        description="Peak learning rate (AdamW). The default, TRL's and verl's, is safe for a pretrained model; a "
        "tiny model trained from scratch takes about 3e-4.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    schedule: Literal["cosine", "linear", "constant"] = Field(
        "constant", description="Decay after warm-up to min_lr_ratio at the last step (linear: TRL's default)."
    )
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Final lr as a share of the peak (cosine, linear).")

    @model_validator(mode="after")
    def _check(self) -> Self:
        decays = self.schedule != "constant"
        ignored_unless(self, "optim", ["min_lr_ratio"], decays, "optim.schedule=cosine or linear")
        return self


class RunBase(Schema):
    """What every run has: its length, seed, folder, periodic evaluation and output."""

    steps: int = Field(100, ge=0, description="Training steps.")
    seed: int = Field(0, description="Run seed (model init, sampling, data order).")
    out_dir: str = Field("runs/train", description="Run folder (config, metrics, samples, plots, checkpoints).")
    eval_every: int = Field(
        25,
        ge=0,
        description="Evaluate on the held-out split every N steps (0 = only at the end, and at the start with run.eval_on_start).",
    )
    eval_size: int | None = Field(None, ge=1, description="Held-out prompts per periodic evaluation (default: all).")
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = torch's default).")
    tensorboard: bool = Field(True, description="Write TensorBoard event files.")
    wandb: str | None = Field(
        None, description="Also log to this Weights & Biases project (extra 'wandb'; WANDB_MODE=offline works offline)."
    )
    trackio: str | None = Field(
        None,
        description="Also log to this trackio project, local-first (TRACKIO_DIR; `trackio show` opens it; extra 'trackio').",
    )
    progress: bool = Field(True, description="Show a live progress bar on a terminal.")
    log_every: int = Field(
        10,
        ge=0,
        description="When stdout is a file or a pipe, print a plain progress line every N steps (0 = none).",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        ignored_unless(self, "run", ["eval_size"], self.eval_every > 0, "run.eval_every > 0")
        return self


class RunSection(RunBase):
    eval_k: int = Field(8, ge=1, description="Samples per held-out prompt for pass@k.")
    eval_on_start: bool = Field(
        True,
        description="Evaluate the whole held-out set before the first step (off: for runs that share a warm start "
        "evaluated once elsewhere; the history then has no start row).",
    )
    eval_max_turns: int | None = Field(
        None,
        ge=1,
        description="Turn limit at evaluation (default: rollout.max_turns), e.g. to give a single-turn policy feedback turns.",
    )
    checkpoint_every: int = Field(50, ge=0, description="Checkpoint every N steps (0 = only at the end).")
    keep_checkpoints: int = Field(
        2,
        ge=0,
        description="Complete checkpoints kept on disk (0: the latest while training, none once OUT_DIR/final is "
        "written: only the final model stays, and a finished run cannot be trained further with --resume).",
    )
    log_samples: int = Field(4, ge=0, description="Episodes written to samples.jsonl per step.")
    max_nonfinite_steps: int = Field(
        3,
        ge=1,
        description="Stop after this many steps in a row whose loss or gradient was NaN or inf (each is skipped).",
    )
    collapse_entropy: float = Field(
        0.01,
        ge=0,
        description="Warn once (stderr, and `collapse/entropy` in metrics.jsonl) when the sampled answers' mean token "
        "entropy stays below this many nats for run.collapse_patience steps in a row (0 = never).",
    )
    collapse_patience: int = Field(10, ge=1, description="Steps in a row for run.collapse_entropy.")
    collapse_heldout: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Warn once (stderr, and `collapse/heldout` in metrics.jsonl) when an evaluation's held-out pass@1 "
        "falls below this share of the start evaluation's, if the start solved at least 5 prompts (0 = never).",
    )
    stop_at_pass: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Finish early (final evaluation and export) once the periodic evaluations' held-out pass@1 "
        "reaches this run.stop_checks times in a row (None: run all steps).",
    )
    stop_checks: int = Field(
        1,
        ge=1,
        description="Periodic evaluations in a row at or above run.stop_at_pass before finishing (more: the policy "
        "has settled, not spiked).",
    )
    max_seconds: float | None = Field(
        None, gt=0, description="Finish early once training has run this long, resumed runs counted whole."
    )

    @model_validator(mode="after")
    def _check_collapse(self) -> Self:
        ignored_unless(self, "run", ["collapse_patience"], self.collapse_entropy > 0, "run.collapse_entropy > 0")
        ignored_unless(self, "run", ["collapse_heldout"], self.eval_on_start, "run.eval_on_start=true")
        ignored_unless(self, "run", ["stop_checks"], self.stop_at_pass is not None, "run.stop_at_pass")
        ignored_unless(self, "run", ["stop_at_pass"], self.eval_every > 0, "run.eval_every > 0")
        return self


class LoopConfig(Schema):
    """The sections the one training loop reads; every training verb's schema extends it."""

    model: ModelSection = Field(default_factory=ModelSection, description="The policy.")
    task: TaskSection = Field(default_factory=TaskSection, description="Training and held-out tasks.")
    rollout: RolloutSection = Field(default_factory=RolloutSection, description="Sampling and turns.")
    loss: UpdateSection = Field(
        default_factory=UpdateSection,
        description="The policy update (a method whose loss clips the ratio takes `ClippedUpdateSection`).",
    )
    optim: OptimSection = Field(default_factory=OptimSection, description="Optimizer and schedule.")
    run: RunSection = Field(default_factory=RunSection, description="Length, logging, evaluation, checkpoints.")

    def linearity(self) -> rules.Linearity | None:
        """Whether this verb's loss is linear in its advantages, where its config alone decides it (None: the
        built method's loss says, checked by `assemble`)."""
        return None

    @model_validator(mode="after")
    def _check_across(self) -> Self:
        rules.check(self, self.linearity())
        return self
