"""verl's PPO / GRPO trainer config (`verl.trainer.main_ppo`'s Hydra keys) as tempering's: `tempering config
--from-verl`. A config is a YAML file (verl's `ppo_trainer.yaml`, or the flattened `_generated_ppo_trainer.yaml`)
and/or the `key=value` overrides of a launch script; keys left out take verl's defaults (`DEFAULTS`).
docs/from_verl.md is the table in prose."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from typing import Any

import yaml

A, R, M = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "actor_rollout_ref.model."

DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.gamma": 1.0,
    "algorithm.lam": 1.0,
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_penalty": "kl",
    "algorithm.kl_ctrl.type": "fixed",
    "algorithm.kl_ctrl.kl_coef": 0.001,
    A + "clip_ratio": 0.2,
    A + "clip_ratio_c": 3.0,
    A + "loss_agg_mode": "token-mean",
    A + "policy_loss.loss_mode": "vanilla",
    A + "entropy_coeff": 0,
    A + "use_kl_loss": False,
    A + "kl_loss_coef": 0.001,
    A + "kl_loss_type": "low_var_kl",
    A + "ppo_epochs": 1,
    A + "ppo_mini_batch_size": 256,
    A + "grad_clip": 1.0,
    A + "optim.lr": 1e-6,
    A + "optim.weight_decay": 0.01,
    A + "optim.lr_warmup_steps": -1,
    A + "optim.lr_warmup_steps_ratio": 0.0,
    A + "optim.lr_scheduler_type": "constant",
    A + "optim.min_lr_ratio": 0.0,
    R + "n": 1,
    R + "temperature": 1.0,
    R + "top_p": 1.0,
    R + "top_k": -1,
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "data.prompt_key": "prompt",
    "data.truncation": "error",
    "trainer.total_epochs": 30,
    "trainer.total_training_steps": None,
    "trainer.save_freq": -1,
    "trainer.test_freq": -1,
    "custom_reward_function.name": "compute_score",
}
"""verl's defaults (verl/trainer/config/*.yaml) of the keys converted here: a config that leaves them out means these."""

ESTIMATORS = {
    "grpo": "grpo",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    "grpo_passk": "grpo_passk",
    "gdpo": "gdpo",
}
"""verl's adv_estimator -> loss.advantage (the same functions: benchmarks/losses_parity.py); gae is `tempering ppo`."""

LOSS_MODES = {
    "vanilla": "ppo_clip",
    "gspo": "gspo_token",
    "cispo": "cispo",
    "sapo": "sapo",
    "geo_mean": "gmpo",
    "dppo_tv": "dppo_tv",
    "dppo_kl": "dppo_kl",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
}
"""verl's policy_loss.loss_mode -> loss.policy_loss (docs/losses.md)."""

NONE: dict[str, tuple[str, tuple]] = {
    "algorithm.use_pf_ppo": ("no preference-feedback reweighting", (False,)),
    "algorithm.kl_ctrl.type": ("the KL coefficient is fixed", ("fixed",)),
    "data.filter_overlong_prompts": (
        "a prompt longer than the context is refused (or cut: rollout.truncate_prompts)",
        (False,),
    ),
    "data.reward_fn_key": ("the reward reads data_source", ("data_source",)),
    "data.return_raw_chat": ("prompts are rendered by the policy's chat template", ()),
    "reward_model.enable": ("no reward model: rewards come from the task family's functions", (False, None)),
    "custom_reward_function.reward_kwargs": ("reward functions get the row's columns, no extra keywords", ({}, None)),
    M + "custom_chat_template": ("the model's own chat template is used", (None,)),
    M + "exclude_modules": ("LoRA adapts model.lora_targets", (None,)),
    R + "over_sample_rate": ("no over-sampling", (0, 0.0)),
    R + "ignore_eos": ("answers stop at the end-of-turn token", (False,)),
    R + "do_sample": ("training samples", (True,)),
    R + "multi_turn.tool_config_path": ("tools come from task.family=tools", (None,)),
    R + "multi_turn.interaction_config_path": ("multi-turn feedback comes from the task family", (None,)),
    A + "use_prefix_grouper": ("a group's shared prompt runs once per micro-batch (loss.share_prefix)", (False,)),
    A + "freeze_vision_tower": ("text models only", (False,)),
    A + "loss_scale_factor": ("the loss is normalised by loss.loss_agg", (None,)),
    A + "optim.optimizer": ("the optimizer is AdamW", ("AdamW", "adamw")),
    A + "optim.num_cycles": ("cosine decays over one half-cycle", (0.5,)),
    "algorithm.rollout_correction.rollout_rs": (
        "rejection sampling here is loss.rollout_correction=token_k1|seq_sum_k1|... (docs/losses.md)",
        (None,),
    ),
    "algorithm.rollout_correction.bypass_mode": ("set loss.rollout_correction=bypass", (False,)),
    "algorithm.rollout_correction.loss_type": ("the loss is loss.policy_loss", ("ppo_clip",)),
    "trainer.val_only": ("`tempering eval RUN` evaluates without training", (False,)),
    "data.tool_config_path": ("tools come from task.family=tools", (None,)),
    "algorithm.rollout_correction.rollout_is_batch_normalize": (
        "set loss.rollout_correction_batch_norm with a weighting mode",
        (False,),
    ),
}
"""verl keys with no tempering equivalent: (why, the values at which verl trains as tempering does; empty:
any value, the key changes nothing here)."""

MACHINERY = re.compile(
    r"(fsdp_config|megatron|profiler|checkpoint\.|_offload|offload_|ulysses|micro_batch|dynamic_bsz|max_token_len|"
    r"use_remove_padding|gradient_checkpointing|activation_offload|use_torch_compile|use_fused_kernels|"
    r"fused_kernel|use_liger|use_shm|entropy_from_logits|entropy_checkpointing|calculate_|sum_pi_squared|"
    r"tensor_model_parallel|data_parallel|expert_parallel|pipeline_model_parallel|engine_kwargs|cudagraph|"
    r"max_num_|enable_chunked_prefill|enable_prefix_caching|enforce_eager|free_cache_engine|load_format|"
    r"layered_summon|disable_log_stats|scheduling_policy|logprobs_mode|prometheus|quantization|mtp|tiled_mlp|"
    r"router_replay|agent\.|trace\.|skip_|checkpoint_engine|dtype|strategy|_target_|nccl|hybrid_engine|"
    r"trust_remote_code|external_lib|override_config|hf_config_path|tokenizer_path|tokenizer$|dataloader|"
    r"image_|video_|multi_modal|custom_cls|sampler\.|datagen|use_legacy|ray_wait|esi_|resume_|"
    r"default_hdfs_dir|del_local_ckpt|balance_batch|nnodes|n_gpus_per_node|device$|rollout_data_dir|"
    r"validation_data_dir|log_val_generations|experiment_name|project_name|train_max_samples|val_max_samples|"
    r"val_batch_size|return_raw_input_ids|return_full_prompt|shuffle|validation_shuffle|data_loader_seed|"
    r"\.seed$|mode$|prompt_length|response_length|rollout_n|val_kwargs|apply_chat_template_kwargs|"
    r"max_model_len|gpu_memory_utilization|multi_turn\.(max_user_turns|max_parallel_calls|"
    r"max_tool_response_length|tool_response_truncate_side|use_inference_chat_template|"
    r"tokenization_sanity_check_mode|format|num_repeat_rollouts)|overlong|lora_adapter_path|"
    r"total_training_steps$|warmup_style|override_optimizer_config|optimizer_impl|clip_grad|routing_replay|"
    r"wake_up|kl_ctrl\.(horizon|target_kl)|pf_ppo\.|rollout_rs_threshold|enable_resource_pool|max_critic_ckpt)"
)
"""Keys of the converted sections that only decide how verl computes (sharding, kernels, memory, engines,
logging names): none changes what is trained. (Some, e.g. the response length, are read through others.)"""

SECTIONS = ("algorithm.", "data.", A, R, M, "custom_reward_function.", "trainer.", "reward_model.enable")
"""What is converted: the algorithm, data, actor, rollout and model keys, the reward and the run's length,
logging and checkpoints. The critic (PPO) and reference sections are read where they matter."""


class VerlConfigError(ValueError):
    """A file or override that is not a verl config."""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as `a.b.c` keys (lists are values); Hydra's `defaults` list is dropped."""
    out: dict[str, Any] = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        if key == "defaults":
            continue
        if isinstance(v, dict) and v:
            out |= flatten(v, key + ".")
        else:
            out[key] = v
    return out


def script_overrides(text: str) -> list[str]:
    """The `key=value` overrides of a launch script (`python3 -m verl.trainer.main_ppo key=value ... $@`),
    environment variables expanded as the shell would."""
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if "verl.trainer.main_ppo" in ln or "=" in ln]
    out = []
    for ln in lines:
        try:
            words = shlex.split(ln, comments=True)
        except ValueError:
            continue
        out += [os.path.expandvars(w) for w in words if re.match(r"^\+{0,2}[A-Za-z_][\w.]*\.[\w.]*=", w)]
    return out


def parse_override(text: str) -> tuple[str, Any]:
    key, _, value = text.lstrip("+").partition("=")
    try:
        parsed = yaml.safe_load(value) if value != "" else None
    except yaml.YAMLError:
        parsed = value
    return key, parsed


_REF = re.compile(r"^\$\{(?:oc\.select:)?\s*([\w.]+)\s*(?:,\s*(.*))?\}$")


def resolve(flat: dict[str, Any]) -> dict[str, Any]:
    """`${key}` and `${oc.select:key,default}` values replaced by what they point at (relative `${.x}` and
    other resolvers stay as written)."""

    def value(v: Any, depth: int = 0) -> Any:
        m = _REF.match(v) if isinstance(v, str) else None
        if not m or depth > 8:
            return v
        if m.group(1) in flat:
            return value(flat[m.group(1)], depth + 1)
        return yaml.safe_load(m.group(2)) if m.group(2) is not None else v

    out = {k: value(v) for k, v in flat.items()}
    for k, v in out.items():  # interpolations inside a string (checkpoints/${trainer.project_name}/...)
        if isinstance(v, str) and "${" in v and not _REF.match(v):
            out[k] = re.sub(r"\$\{([\w.]+)\}", lambda m: str(out.get(m.group(1), m.group(0))), v)
    return out


class Conversion:
    """What `convert` made of a verl config: the verb, tempering's keys, and the report's parts."""

    def __init__(self) -> None:
        self.verb = "train"
        self.keys: dict[str, Any] = {}
        self.mapped: list[str] = []
        self.defaults: list[str] = []
        self.missing: dict[str, list[str]] = {}
        self.inert = 0
        self.unread: list[str] = []

    def set(self, key: str, value: Any, *sources: str) -> None:
        self.keys[key] = value
        self.mapped += [s for s in sources if s not in self.mapped]

    def none(self, why: str, *names: str) -> None:
        self.missing.setdefault(why, []).extend(n for n in names if n not in self.missing.get(why, []))


def convert(config: dict[str, Any]) -> Conversion:
    """tempering's keys for a flat verl config (`flatten` + overrides), verl's defaults filled in."""
    given = resolve(config)
    c = {**DEFAULTS, **given}
    out = Conversion()
    out.defaults = sorted(k for k in DEFAULTS if k not in given)
    read: set[str] = set()

    def get(key: str) -> Any:
        read.add(key)
        return c.get(key)

    def text(*keys: str) -> str:
        return ", ".join(f"{k}={c.get(k)!r}" for k in keys)

    # the algorithm: the estimator (or PPO's critic) and the KL
    est = get("algorithm.adv_estimator")
    by_std = get("algorithm.norm_adv_by_std_in_grpo")
    if est == "gae":
        out.verb = "ppo"
        out.set("loss.gamma", float(get("algorithm.gamma")), "algorithm.gamma")
        out.set("loss.lam", float(get("algorithm.lam")), "algorithm.lam")
        out.mapped.insert(0, "algorithm.adv_estimator")
        if "critic.optim.lr" in c:
            out.set("critic.lr", float(get("critic.optim.lr")), "critic.optim.lr")
        if "critic.cliprange_value" in c:
            out.set("critic.value_clip", float(get("critic.cliprange_value")), "critic.cliprange_value")
        if c.get("trainer.critic_warmup"):
            out.set("critic.pretrain_steps", int(get("trainer.critic_warmup")), "trainer.critic_warmup")
    elif est in ESTIMATORS:
        name = ESTIMATORS[est]
        if est == "grpo" and by_std is False:
            name = "dr_grpo"
        out.set("loss.advantage", name, "algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo")
        if est == "grpo_passk" and by_std is False:
            out.set("loss.credit_args", {"scale_by_std": False}, "algorithm.norm_adv_by_std_in_grpo")
        read.update({"algorithm.gamma", "algorithm.lam"})
    else:
        out.none("no equivalent estimator (loss.advantage lists tempering's)", f"algorithm.adv_estimator={est!r}")
    in_reward, as_loss = get("algorithm.use_kl_in_reward"), get(A + "use_kl_loss")
    if in_reward and as_loss:
        out.none(
            "tempering takes the KL to the reference either in the reward or as a loss term, not both",
            text("algorithm.use_kl_in_reward", A + "use_kl_loss"),
        )
    elif in_reward:
        if get("algorithm.kl_penalty") != "kl":
            out.none("the KL in the reward is k1 (verl's kl)", text("algorithm.kl_penalty"))
        out.set("loss.kl_in_reward", True, "algorithm.use_kl_in_reward")
        out.set("loss.kl_coef", float(get("algorithm.kl_ctrl.kl_coef")), "algorithm.kl_ctrl.kl_coef")
    elif as_loss:
        kind = get(A + "kl_loss_type")
        if kind in ("kl", "k1", "mse", "k2", "low_var_kl", "k3", "abs"):
            out.set("loss.kl_estimator", kind, A + "kl_loss_type")
        else:
            out.none("no equivalent KL estimator (k1, k2, k3, abs)", text(A + "kl_loss_type"))
        out.set("loss.kl_coef", float(get(A + "kl_loss_coef")), A + "use_kl_loss", A + "kl_loss_coef")
    read.update({"algorithm.kl_penalty", "algorithm.kl_ctrl.kl_coef", A + "kl_loss_coef", A + "kl_loss_type"})

    # the actor's loss and update
    low = c.get(A + "clip_ratio_low", c[A + "clip_ratio"])
    high = c.get(A + "clip_ratio_high", c[A + "clip_ratio"])
    read.update({A + "clip_ratio", A + "clip_ratio_low", A + "clip_ratio_high"})
    mode = get(A + "policy_loss.loss_mode")
    if mode not in LOSS_MODES:
        out.none("no equivalent policy loss (docs/losses.md lists tempering's)", text(A + "policy_loss.loss_mode"))
    elif out.verb == "ppo" and mode != "vanilla":
        out.none("tempering ppo trains PPO-clip", text(A + "policy_loss.loss_mode"))
    else:
        if mode != "vanilla":
            out.set("loss.policy_loss", LOSS_MODES[mode], A + "policy_loss.loss_mode")
        if mode not in ("sapo", "clip_cov", "kl_cov"):
            out.set("loss.clip_low", float(low), A + "clip_ratio_low")
            out.set("loss.clip_high", float(high), A + "clip_ratio_high")
        if mode in ("vanilla", "dppo_tv", "dppo_kl"):
            out.set("loss.dual_clip", float(get(A + "clip_ratio_c")), A + "clip_ratio_c")
        if mode == "sapo":
            out.set("loss.sapo_tau_pos", float(c.get(A + "tau_pos", 1.0)), A + "tau_pos")
            out.set("loss.sapo_tau_neg", float(c.get(A + "tau_neg", 1.05)), A + "tau_neg")
        for verl_key, ours in (
            ("clip_cov_ratio", "clip_cov_ratio"),
            ("clip_cov_lb", "clip_cov_lb"),
            ("clip_cov_ub", "clip_cov_ub"),
            ("kl_cov_ratio", "kl_cov_ratio"),
            ("ppo_kl_coef", "kl_cov_coef"),
        ):
            key = A + "policy_loss." + verl_key
            read.add(key)
            if mode == ("clip_cov" if verl_key.startswith("clip_cov") else "kl_cov") and key in c:
                out.set("loss." + ours, float(c[key]), key)
    read.update({A + "tau_pos", A + "tau_neg", A + "clip_ratio_c"})
    agg = get(A + "loss_agg_mode")
    out.set("loss.loss_agg", agg, A + "loss_agg_mode")
    entropy = float(get(A + "entropy_coeff") or 0)
    if entropy and out.verb == "ppo":
        out.none("tempering ppo has no entropy bonus", text(A + "entropy_coeff"))
    elif entropy:
        out.set("loss.entropy_coef", entropy, A + "entropy_coeff")
    out.set("loss.ppo_epochs", int(get(A + "ppo_epochs")), A + "ppo_epochs")
    batch, mini = int(get("data.train_batch_size")), int(get(A + "ppo_mini_batch_size"))
    if batch % mini:
        out.none("the batch splits into whole mini-batches", text("data.train_batch_size", A + "ppo_mini_batch_size"))
    else:
        out.set("loss.mini_batches", batch // mini, A + "ppo_mini_batch_size")
    out.set("loss.max_grad_norm", float(c.get(A + "optim.clip_grad", c[A + "grad_clip"])), A + "grad_clip")
    read.update({A + "grad_clip", A + "optim.clip_grad"})

    # the optimizer
    out.set("optim.lr", float(get(A + "optim.lr")), A + "optim.lr")
    out.set("optim.weight_decay", float(get(A + "optim.weight_decay")), A + "optim.weight_decay")
    if A + "optim.betas" in c:
        out.set("optim.betas", [float(b) for b in get(A + "optim.betas")], A + "optim.betas")
    steps = c.get("trainer.total_training_steps")
    warm, ratio = int(get(A + "optim.lr_warmup_steps") or -1), float(get(A + "optim.lr_warmup_steps_ratio") or 0)
    if warm > 0:
        out.set("optim.warmup_steps", warm, A + "optim.lr_warmup_steps")
    elif ratio > 0 and steps:
        out.set("optim.warmup_steps", int(ratio * steps), A + "optim.lr_warmup_steps_ratio")
    elif ratio > 0:
        out.none(
            "a share of the steps, and trainer.total_training_steps is not set", text(A + "optim.lr_warmup_steps_ratio")
        )
    schedule = c.get(A + "optim.warmup_style") or get(A + "optim.lr_scheduler_type")
    if schedule in ("constant", "cosine"):
        out.set("optim.schedule", schedule, A + "optim.lr_scheduler_type")
        if schedule == "cosine":
            out.set("optim.min_lr_ratio", float(get(A + "optim.min_lr_ratio")), A + "optim.min_lr_ratio")
    else:
        out.none("no equivalent schedule (constant, cosine)", text(A + "optim.lr_scheduler_type"))
    read.add(A + "optim.min_lr_ratio")

    # the rollout
    n = int(get(R + "n"))
    if n > 1 or out.verb == "ppo":
        out.set("rollout.group_size", n, R + "n")
    else:
        out.none("a group of one has no baseline here; set rollout.group_size", text(R + "n"))
    out.set("rollout.prompts_per_step", batch, "data.train_batch_size")
    out.set("rollout.temperature", float(get(R + "temperature")), R + "temperature")
    out.set("rollout.top_p", float(get(R + "top_p")), R + "top_p")
    top_k = int(get(R + "top_k"))
    out.set("rollout.top_k", max(top_k, 0), R + "top_k")
    response = int(c.get(R + "response_length") or get("data.max_response_length"))
    out.set("rollout.max_new_tokens", response, "data.max_response_length")
    prompt = int(c.get(R + "prompt_length") or get("data.max_prompt_length"))
    out.set("rollout.max_context_tokens", prompt + response, "data.max_prompt_length")
    engine = c.get(R + "name")
    read.add(R + "name")
    if engine in ("vllm", "hf"):
        out.set("rollout.backend", engine, R + "name")
        if engine == "vllm" and R + "gpu_memory_utilization" in c:
            out.set(
                "rollout.vllm.gpu_memory_utilization",
                float(c[R + "gpu_memory_utilization"]),
                R + "gpu_memory_utilization",
            )
    elif engine not in (None, "???"):
        out.none("generation is hf (this process), vllm or ray workers", text(R + "name"))
    if c.get(R + "multi_turn.enable"):
        turns = c.get(R + "multi_turn.max_assistant_turns")
        if turns:
            out.set("rollout.max_turns", int(turns), R + "multi_turn.enable", R + "multi_turn.max_assistant_turns")
        else:
            out.none("set rollout.max_turns", text(R + "multi_turn.max_assistant_turns"))
    read.update({R + "multi_turn.enable", R + "multi_turn.max_assistant_turns"})
    truncation = get("data.truncation")
    if truncation == "left":
        out.set("rollout.truncate_prompts", True, "data.truncation")
    elif truncation != "error":
        out.none("a prompt too long keeps its last tokens (left) or is refused (error)", text("data.truncation"))

    # the data and the reward
    files = {"train": get("data.train_files"), "heldout": get("data.val_files")}
    for split, value in files.items():
        value = value[0] if isinstance(value, list) and len(value) == 1 else value
        if isinstance(value, str):
            out.set(f"task.args.{split}", value, f"data.{'train' if split == 'train' else 'val'}_files")
        elif value is not None:
            out.none("one file per split (a mixture of families weighs several)", f"data.{split}_files={value!r}")
    if "task.args.train" in out.keys:
        out.keys = {"task.family": "dataset", **out.keys}
        if get("data.prompt_key") != "prompt":
            out.set("task.args.prompt_column", c["data.prompt_key"], "data.prompt_key")
        path = get("custom_reward_function.path")
        if path:
            out.set(
                "task.args.reward",
                f"{path}:{get('custom_reward_function.name')}",
                "custom_reward_function.path",
                "custom_reward_function.name",
            )
        else:
            out.none(
                "verl's built-in scorers by data_source: give task.args.reward (math, or your compute_score file)",
                "custom_reward_function.path=None",
            )
    read.update({"data.prompt_key", "custom_reward_function.path", "custom_reward_function.name"})

    # the model
    if M + "path" in c:
        out.set("model.name", str(get(M + "path")), M + "path")
    rank = int(c.get(M + "lora_rank") or 0)
    read.update({M + "lora_rank", M + "lora_alpha", M + "target_modules"})
    if rank:
        out.set("model.lora_rank", rank, M + "lora_rank")
        out.set("model.lora_alpha", float(c.get(M + "lora_alpha", 16)), M + "lora_alpha")
        targets = c.get(M + "target_modules", "all-linear")
        if isinstance(targets, list):
            out.set("model.lora_targets", targets, M + "target_modules")

    is_level = get("algorithm.rollout_correction.rollout_is")
    if is_level in ("token", "sequence"):
        cap = float(get("algorithm.rollout_correction.rollout_is_threshold") or 2.0)
        mode = "tis" if is_level == "token" else "sequence_truncate"
        out.set("loss.rollout_correction", mode, "algorithm.rollout_correction.rollout_is")
        out.set("loss.rollout_correction_cap", cap, "algorithm.rollout_correction.rollout_is_threshold")
    elif is_level is not None:
        out.none(
            "truncated importance weights are token (tis) or sequence", text("algorithm.rollout_correction.rollout_is")
        )
    read.add("algorithm.rollout_correction.rollout_is_threshold")

    # the run: length, evaluation, checkpoints, logging
    if steps:
        out.set("run.steps", int(steps), "trainer.total_training_steps")
    else:
        out.none(
            "tempering counts steps over a cycled task pool: set run.steps (epochs x rows / data.train_batch_size)",
            text("trainer.total_epochs"),
        )
    read.update({"trainer.total_training_steps", "trainer.total_epochs"})
    out.set("run.checkpoint_every", max(int(get("trainer.save_freq")), 0), "trainer.save_freq")
    out.set("run.eval_every", max(int(get("trainer.test_freq")), 0), "trainer.test_freq")
    if "trainer.val_before_train" in c:
        out.set("run.eval_on_start", bool(get("trainer.val_before_train")), "trainer.val_before_train")
    keep = c.get("trainer.max_actor_ckpt_to_keep")
    read.add("trainer.max_actor_ckpt_to_keep")
    if keep:
        out.set("run.keep_checkpoints", int(keep), "trainer.max_actor_ckpt_to_keep")
    if c.get("trainer.default_local_dir"):
        out.set("run.out_dir", str(get("trainer.default_local_dir")), "trainer.default_local_dir")
    loggers = c.get("trainer.logger") or []
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    read.add("trainer.logger")
    project = c.get("trainer.project_name") or "tempering"
    for lg in loggers:
        if lg in ("wandb", "trackio"):
            out.set(f"run.{lg}", project, "trainer.logger", "trainer.project_name")
        elif lg == "tensorboard":
            out.set("run.tensorboard", True, "trainer.logger")
        elif lg != "console":
            out.none(
                "logs go to metrics.jsonl, TensorBoard, W&B (run.wandb) and trackio (run.trackio)",
                f"trainer.logger={lg!r}",
            )

    # what is left of the converted sections
    for key, value in sorted(c.items()):
        if key in read or key in out.mapped or not key.startswith(SECTIONS):
            continue
        if key in NONE:
            if value not in NONE[key][1] and NONE[key][1]:
                out.none(NONE[key][0], f"{key}={value!r}")
            else:
                out.inert += 1
        elif MACHINERY.search(key) or key.startswith("critic.") or key.startswith("trainer.critic"):
            out.inert += 1
        else:
            out.unread.append(key)
    return out


def load(paths: list[str], read: Callable[[str], str]) -> dict[str, Any]:
    """The flat config of YAML files and launch scripts (`.sh`), later ones overriding earlier ones."""
    flat: dict[str, Any] = {}
    for path in paths:
        text = read(path)
        if path.endswith(".sh"):
            overrides = script_overrides(text)
            if not overrides:
                raise VerlConfigError(f"{path} holds no key=value overrides of verl.trainer.main_ppo")
            flat |= dict(parse_override(o) for o in overrides)
            continue
        try:
            tree = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise VerlConfigError(f"{path} is not YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(tree, dict):
            raise VerlConfigError(f"{path} must hold a mapping of verl's config sections at the top level")
        flat |= flatten(tree)
    if not any(k.startswith(("algorithm.", "actor_rollout_ref.", "data.", "trainer.")) for k in flat):
        raise VerlConfigError(
            f"{', '.join(paths)} holds none of verl's sections (algorithm, actor_rollout_ref, data, trainer)"
        )
    return flat
