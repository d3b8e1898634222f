"""TRL's `GRPOConfig` names and the tempering keys that mean the same (`tempering train`): the hint of an
unknown key and `tempering config --from-trl`. docs/from_trl.md is the table in prose."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

SAME: dict[str, str] = {
    "num_generations": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "top_k": "rollout.top_k",
    "use_vllm": "rollout.backend",
    "vllm_mode": "rollout.vllm.mode",
    "vllm_gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization",
    "beta": "loss.kl_coef",
    "epsilon": "loss.clip_low",
    "epsilon_high": "loss.clip_high",
    "delta": "loss.dual_clip",
    "num_iterations": "loss.ppo_epochs",
    "loss_type": "loss.loss_agg",  # and loss.policy_loss for cispo, sapo, vespo
    "scale_rewards": "loss.advantage",
    "mask_truncated_completions": "loss.mask_truncated",
    "use_bias_correction_kl": "loss.kl_bias_correction",
    "max_grad_norm": "loss.max_grad_norm",
    "learning_rate": "optim.lr",
    "lr_scheduler_type": "optim.schedule",
    "warmup_steps": "optim.warmup_steps",
    "weight_decay": "optim.weight_decay",
    "adam_beta1": "optim.betas",
    "adam_beta2": "optim.betas",
    "max_steps": "run.steps",
    "per_device_train_batch_size": "rollout.prompts_per_step",
    "gradient_accumulation_steps": "rollout.prompts_per_step",
    "seed": "run.seed",
    "output_dir": "run.out_dir",
    "save_steps": "run.checkpoint_every",
    "save_total_limit": "run.keep_checkpoints",
    "vllm_importance_sampling_correction": "loss.rollout_correction",
    "bf16": "loss.autocast",
    "importance_sampling_level": "loss.policy_loss",
    "entropy_coef": "loss.entropy_coef",
    "use_adaptive_entropy": "loss.entropy_adaptive",
    "entropy_target": "loss.entropy_target",
    "entropy_coef_min": "loss.entropy_coef_min",
    "entropy_coef_max": "loss.entropy_coef_max",
    "entropy_coef_delta": "loss.entropy_coef_delta",
    "top_entropy_quantile": "loss.entropy_top_quantile",
    "sapo_temperature_pos": "loss.sapo_tau_pos",
    "sapo_temperature_neg": "loss.sapo_tau_neg",
    "vespo_k_pos": "loss.vespo_k_pos",
    "vespo_lambda_pos": "loss.vespo_lambda_pos",
    "vespo_k_neg": "loss.vespo_k_neg",
    "vespo_lambda_neg": "loss.vespo_lambda_neg",
    "multi_objective_aggregation": "loss.advantage",
    "off_policy_mask_threshold": "loss.off_policy_mask_threshold",
}
"""TRL name -> the tempering key with the same meaning (values translated by `VALUES` and `_convert`)."""

DEFAULTS: dict[str, Any] = {
    "max_completion_length": 512,
    "epsilon_high": None,
    "delta": None,
    "lr_scheduler_type": "linear",
    "max_steps": -1,
    "seed": 42,
    "save_steps": 500,
    "use_bias_correction_kl": True,
    "vllm_importance_sampling_correction": True,
    "bf16": None,  # TRL reads None as True unless fp16 is set
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
}
"""GRPOConfig's defaults where they differ from tempering's (the other mapped keys' agree): a TRL config
that leaves them out means these."""

VALUES: dict[str, dict[Any, Any]] = {
    "use_vllm": {True: "vllm", False: "hf"},
    "bf16": {True: "bf16", False: "none", None: "bf16"},
    "vllm_mode": {"colocate": "colocated", "server": "server"},
    "scale_rewards": {"group": "grpo", True: "grpo", "none": "dr_grpo", False: "dr_grpo"},
    "lr_scheduler_type": {
        "constant": "constant",
        "constant_with_warmup": "constant",
        "cosine": "cosine",
        "linear": "linear",
    },
}
"""TRL values spelt differently here; a value not listed has no equivalent."""

ANY = object()
"""`NONE[name][1]`: the key never changes what is trained."""

BATCH = (
    "a step here is rollout.prompts_per_step prompts x rollout.group_size answers, one optimizer step (TRL's "
    "is per_device_train_batch_size x gradient_accumulation_steps x processes answers); set rollout.prompts_per_step"
)
IS_PART = (
    "read with vllm_importance_sampling_correction, which converts to loss.rollout_correction (the mode) with "
    "loss.rollout_correction_cap (clip_max) and loss.rollout_correction_floor (clip_min)"
)
IS_MODES = {
    "token_truncate": "tis",
    "sequence_truncate": "sequence_truncate",
    "token_mask": "token_mask",
    "sequence_mask": "sequence_mask",
}
"""TRL's vllm_importance_sampling_mode -> loss.rollout_correction (the same weights, algos/correction.py)."""
NONE: dict[str, tuple[str, Any]] = {
    "generation_batch_size": (BATCH, (None,)),
    "steps_per_generation": (BATCH + " and loss.mini_batches", (None,)),
    "num_train_epochs": ("tempering counts steps over a cycled task pool: set run.steps", ()),
    "lr_scheduler_kwargs": ("the schedule is optim.schedule with optim.min_lr_ratio", (None, {})),
    "optim": ("the optimizer is AdamW", ("adamw_torch", "adamw_torch_fused")),
    "optim_args": ("the optimizer is AdamW (optim.*)", (None, "")),
    "optim_target_modules": ("the optimizer is AdamW over every trained parameter", (None,)),
    "adam_epsilon": ("AdamW's eps is torch's default", (1e-8,)),
    "label_smoothing_factor": ("no label smoothing in a policy loss", (0.0,)),
    "fp16": ("mixed precision is bf16 autocast (loss.autocast); model.dtype is the parameter dtype", (False,)),
    "neftune_noise_alpha": ("no embedding noise", (None,)),
    "data_seed": ("run.seed orders the tasks (task.data_seed draws them)", (None,)),
    "model_init_kwargs": ("the model loads from model.name with model.dtype and model.device", (None, {})),
    "trust_remote_code": ("models load without remote code", (False,)),
    "router_aux_loss_coef": ("no MoE auxiliary loss", (None,)),
    "disable_dropout": ("no switch for dropout", (False,)),
    "cast_lm_head_to_fp32": ("no switch: model.dtype covers every layer", (False,)),
    "num_generations_eval": ("evaluation samples run.eval_k answers per held-out prompt", (None,)),
    "shuffle_dataset": ("tasks are always drawn in a seeded order", (True,)),
    "min_p": ("sampling has temperature, top_p and top_k only", (None, 0.0)),
    "repetition_penalty": ("sampling has temperature, top_p and top_k only", (1.0,)),
    "generation_kwargs": ("sampling has temperature, top_p and top_k only", (None, {})),
    "chat_template_kwargs": ("the chat template is applied as is (model.use_chat_template)", (None, {})),
    "vllm_structured_outputs_regex": ("no structured outputs", (None,)),
    "reward_weights": ("a task family weighs its reward functions (task.args.reward_weights)", (None,)),
    "sync_ref_model": ("the reference is the starting model throughout", (False,)),
    "ref_model_mixup_alpha": ("only read with sync_ref_model", ANY),
    "ref_model_sync_steps": ("only read with sync_ref_model", ANY),
    "max_tool_calling_iterations": ("multi-turn episodes come from an environment: rollout.max_turns", (None,)),
    "vllm_importance_sampling_mode": (IS_PART, ANY),
    "vllm_importance_sampling_clip_max": (IS_PART, ANY),
    "vllm_importance_sampling_clip_min": (IS_PART, ANY),
    "vllm_importance_sampling_cap": (IS_PART, ANY),
    "logging_steps": ("every step's metrics go to metrics.jsonl (run.log_every is the console line)", ANY),
    "report_to": ("TensorBoard is always written (run.tensorboard); run.wandb=PROJECT mirrors to W&B", ANY),
    "eval_strategy": ("evaluation is on the task's held-out split: run.eval_every, run.eval_size", ANY),
    "eval_steps": ("evaluation is on the task's held-out split: run.eval_every, run.eval_size", ANY),
    "save_strategy": ("checkpoints: run.checkpoint_every", ANY),
}
"""TRL names with no tempering equivalent: (why, the values at which TRL trains as tempering does, or ANY
for keys that never change training)."""

PPO_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo", "luspo")
"""TRL's loss types that clip the ratio (PPO-clip under an aggregation)."""
LOSS_TYPES = (*PPO_TYPES, "cispo", "sapo", "vespo")
AGG_OF = {
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "luspo": "seq-mean-token-sum",
    "cispo": "token-mean",
    "sapo": "seq-mean-token-mean",
    "vespo": "token-mean",
}
"""Each loss type's aggregation (TRL's `_compute_loss`): dapo, cispo and vespo over the step's tokens, bnpo over each
micro-batch's, grpo and sapo per sequence, dr_grpo over a constant, luspo the sum per sequence."""


def _loss_type(c: dict) -> Any:
    return c.get("loss_type", "dapo")


def _adaptive(c: dict) -> bool:
    return c.get("use_adaptive_entropy") is True


NEEDS: dict[str, Callable[[dict], bool]] = {
    "epsilon": lambda c: _loss_type(c) in PPO_TYPES,
    "epsilon_high": lambda c: _loss_type(c) in (*PPO_TYPES, "cispo"),
    "delta": lambda c: _loss_type(c) in PPO_TYPES,
    "sapo_temperature_pos": lambda c: _loss_type(c) == "sapo",
    "sapo_temperature_neg": lambda c: _loss_type(c) == "sapo",
    "vespo_k_pos": lambda c: _loss_type(c) == "vespo",
    "vespo_lambda_pos": lambda c: _loss_type(c) == "vespo",
    "vespo_k_neg": lambda c: _loss_type(c) == "vespo",
    "vespo_lambda_neg": lambda c: _loss_type(c) == "vespo",
    "entropy_target": _adaptive,
    "entropy_coef_min": _adaptive,
    "entropy_coef_max": _adaptive,
    "entropy_coef_delta": _adaptive,
    "scale_rewards": lambda c: c.get("multi_objective_aggregation", "sum_then_normalize") != "normalize_then_sum",
    "vllm_mode": lambda c: c.get("use_vllm") is True,
    "vllm_gpu_memory_utilization": lambda c: c.get("use_vllm") is True,
    "vllm_structured_outputs_regex": lambda c: c.get("use_vllm") is True,
    "vllm_importance_sampling_correction": lambda c: c.get("use_vllm") is True,
    "use_bias_correction_kl": lambda c: bool(c.get("beta")),
    "num_train_epochs": lambda c: c.get("max_steps", -1) <= 0,
    "save_steps": lambda c: c.get("save_strategy", "steps") == "steps",
    "save_total_limit": lambda c: c.get("save_total_limit") is not None,
    "output_dir": lambda c: c.get("output_dir") is not None,
}
"""Keys TRL reads only when another holds a value: otherwise they change nothing, there as here."""

MACHINERY = frozenset(
    [
        "average_tokens_across_devices",
        "bf16_full_eval",
        "fp16_full_eval",
        "tf32",
        "activation_checkpointing",
        "activation_checkpointing_kwargs",
        "gradient_checkpointing",
        "gradient_checkpointing_kwargs",
        "torch_compile",
        "torch_compile_backend",
        "torch_compile_mode",
        "use_liger_kernel",
        "liger_kernel_config",
        "use_cache",
        "torch_empty_cache_steps",
        "auto_find_batch_size",
        "logging_strategy",
        "logging_first_step",
        "log_on_each_node",
        "logging_nan_inf_filter",
        "include_num_input_tokens_seen",
        "log_level",
        "log_level_replica",
        "disable_tqdm",
        "run_name",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "eval_delay",
        "per_device_eval_batch_size",
        "prediction_loss_only",
        "eval_on_start",
        "eval_do_concat_batches",
        "eval_use_gather_object",
        "eval_accumulation_steps",
        "include_for_metrics",
        "batch_eval_metrics",
        "save_only_model",
        "save_on_each_node",
        "enable_jit_checkpoint",
        "push_to_hub",
        "hub_token",
        "hub_private_repo",
        "hub_model_id",
        "hub_strategy",
        "hub_always_push",
        "hub_revision",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "ignore_data_skip",
        "restore_callback_states_from_checkpoint",
        "full_determinism",
        "use_cpu",
        "accelerator_config",
        "parallelism_config",
        "dataloader_drop_last",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_multiprocessing_context",
        "dataloader_in_order",
        "remove_unused_columns",
        "label_names",
        "train_sampling_strategy",
        "length_column_name",
        "ddp_find_unused_parameters",
        "ddp_bucket_cap_mb",
        "ddp_broadcast_buffers",
        "ddp_static_graph",
        "ddp_backend",
        "ddp_timeout",
        "fsdp",
        "fsdp_config",
        "deepspeed",
        "debug",
        "skip_memory_metrics",
        "do_train",
        "do_eval",
        "do_predict",
        "resume_from_checkpoint",
        "local_rank",
        "ds3_gather_for_generation",
        "pad_to_multiple_of",
        "cache_implementation",
        "vllm_model_impl",
        "vllm_enable_sleep_mode",
        "vllm_server_base_url",
        "vllm_server_host",
        "vllm_server_port",
        "vllm_server_timeout",
        "vllm_group_port",
        "vllm_max_model_length",
        "vllm_tensor_parallel_size",
        "log_completions",
        "log_multimodal",
        "num_completions_to_print",
        "log_unique_prompts",
        "log_completions_hub_repo",
        "use_transformers_continuous_batching",
        "transformers_continuous_batching_config",
        "use_transformers_paged",
    ]
)
"""The rest of GRPOConfig: Hub, logging backends, devices, memory savers, dataloaders, DDP/FSDP/DeepSpeed,
evaluation datasets, vLLM server plumbing; none changes what is trained."""

NAMES = frozenset(SAME) | frozenset(NONE) | MACHINERY
"""Every GRPOConfig field this table knows (TRL 1.x)."""

SCRIPT_SAME: dict[str, str] = {
    "model_name_or_path": "model.name",
    "dtype": "model.dtype",
    "dataset_name": "task.args.train",
    "reward_funcs": "task.args.reward",
    "use_peft": "model.lora_rank",
    "lora_r": "model.lora_rank",
    "lora_alpha": "model.lora_alpha",
    "lora_target_modules": "model.lora_targets",
}
"""The arguments of `trl grpo --config` beside GRPOConfig's (its GRPOScriptArguments, ModelConfig and
DatasetMixtureConfig) with a tempering key of the same meaning."""

SCRIPT_NONE: dict[str, tuple[str, Any]] = {
    "dataset_config": ("a Hub dataset is read from a folder saved with save_to_disk (task.args.train)", (None,)),
    "dataset_train_split": ("a saved DatasetDict's train split is read (task.args.train)", ("train",)),
    "dataset_test_split": ("held-out prompts come from the rows (task.heldout_size) or task.args.heldout", ANY),
    "dataset_streaming": ("rows are read whole", (False,)),
    "datasets": ("one dataset per run (task.args.train), or task.family=mixture", ([], None)),
    "streaming": ("rows are read whole", (False,)),
    "test_split_size": ("held-out prompts: task.args.heldout_share", (None,)),
    "reward_model_name_or_path": ("rewards are functions (task.args.reward), not reward models", (None,)),
    "model_revision": ("model.name is one local folder, Hub id or packaged model", ("main",)),
    "lora_dropout": ("LoRA adapters train without dropout", (0.0,)),
    "lora_target_parameters": ("LoRA adapts linear layers only (model.lora_targets)", (None,)),
    "lora_modules_to_save": ("only the adapters train under LoRA", (None,)),
    "use_rslora": ("LoRA scales by lora_alpha / rank", (False,)),
    "use_dora": ("no DoRA", (False,)),
    "load_in_8bit": ("no quantised training", (False,)),
    "load_in_4bit": ("no quantised training", (False,)),
    "bnb_4bit_quant_type": ("only read with load_in_4bit", ANY),
    "use_bnb_nested_quant": ("only read with load_in_4bit", ANY),
    "bnb_4bit_quant_storage": ("only read with load_in_4bit", ANY),
    "lora_task_type": ("a causal language model's adapters", ("CAUSAL_LM",)),
    "attn_implementation": ("the model's attention is transformers' default", ANY),
    "ignore_bias_buffers": ("a DDP option for models with boolean buffers", ANY),
}
"""Script arguments with no tempering equivalent, as `NONE`."""

LORA = (
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_target_parameters",
    "lora_modules_to_save",
    "use_rslora",
    "use_dora",
    "lora_task_type",
)
"""ModelConfig's keys that TRL reads only with use_peft."""
REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")
"""`trl grpo`'s named reward functions that are plain functions of `trl.rewards` (the fourth,
get_soft_overlong_punishment, is built with arguments of the script's own)."""


def _script(name: str, value: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """The tempering keys of one script argument, or _NoEquivalent(why)."""
    key = SCRIPT_SAME[name]
    if name == "dataset_name":
        return {"task.family": "dataset", key: value}
    if name == "reward_funcs":
        if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
            raise ValueError(f"reward_funcs={value!r} is not a list of names")
        out = []
        for f in value:
            if f in REWARDS:
                out.append(f"trl.rewards:{f}")
            elif "." in f:  # a dotted import path, as the script reads it
                module, _, fn = f.rpartition(".")
                out.append(f"{module}:{fn}")
            else:
                raise _NoEquivalent(f"{f} is not one of {', '.join(REWARDS)} nor an import path")
        return {key: out if len(out) > 1 else out[0]}
    if name == "use_peft":
        return {key: trl.get("lora_r", 16)} if value is True else {}
    if name == "lora_r":
        return {}  # read with use_peft
    if name == "lora_target_modules":
        if value == "all-linear":  # every linear layer but the output layer: tempering's default
            return {}
        if not isinstance(value, list):
            raise _NoEquivalent("a list of layer names, or all-linear")
    if name == "dtype":
        if value in ("auto", None):
            raise _NoEquivalent("the checkpoint's own dtype: set model.dtype")
        if value not in ("float32", "bfloat16", "float16"):
            raise _NoEquivalent("no equivalent value")
    return {key: value}


SCRIPT_NEEDS: dict[str, Callable[[dict], bool]] = {
    **{k: (lambda c: c.get("use_peft") is True) for k in LORA},
    **{k: (lambda c: c.get("load_in_4bit") is True) for k in SCRIPT_NONE if k.startswith(("bnb", "use_bnb"))},
}
SCRIPT_DEFAULTS = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
"""ModelConfig's LoRA defaults, which `use_peft: true` alone means."""
SCRIPT_NAMES = frozenset(SCRIPT_SAME) | frozenset(SCRIPT_NONE)
"""Every field of GRPOScriptArguments, ModelConfig and DatasetMixtureConfig (TRL 1.x)."""

RETIRED = {
    "warmup_ratio": "older TRL's; today's warmup_steps below 1 is the ratio, optim.warmup_steps here counts steps"
}
"""Names GRPOConfig no longer has, which TRL users still write."""


def hint(name: str, value: Any, has: Callable[[str], bool]) -> str | None:
    """What to write instead of a TRL name given as a tempering key (`has`: the schema has this key), or None."""
    if name in SAME and has(SAME[name]):
        if name in (
            "adam_beta1",
            "adam_beta2",
            "epsilon_high",
            "max_steps",
            "warmup_steps",
            "entropy_coef_min",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
        ):
            return f"{name!r} is TRL's name for {SAME[name]} (docs/from_trl.md)"
        try:
            keys = _convert(name, value, {name: value})
        except _NoEquivalent as e:
            return f"{name!r} is TRL's name for {SAME[name]}, but {name}={value!r} has none: {e}"
        except ValueError as e:  # a value of the wrong type: the hint says so instead of raising
            return f"{name!r} is TRL's name for {SAME[name]}, and {e}"
        return f"{name!r} is TRL's name: write " + " ".join(f"{k}={_text(v)}" for k, v in keys.items())
    if name in NONE:
        return f"{name!r} is TRL's, with no equivalent here: {NONE[name][0]}"
    if name in MACHINERY:
        return f"{name!r} is an option of TRL's Trainer, with no equivalent here"
    if name in RETIRED:
        return f"{name!r} is {RETIRED[name]}"
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _NoEquivalent(Exception):
    pass


def _lookup(name: str, value: Any) -> Any:
    """VALUES[name][value], telling TRL's True from 1."""
    for k, v in VALUES[name].items():
        if k == value and type(k) is type(value):  # True == 1, but 1 is not TRL's True
            return v
    raise _NoEquivalent("no equivalent value")


def _convert(name: str, value: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """The tempering keys and values of one TRL key, or _NoEquivalent(why)."""
    key = SAME[name]
    if name in VALUES:
        value = _lookup(name, value)
        if name == "lr_scheduler_type" and value in ("cosine", "linear"):
            return {key: value, "optim.min_lr_ratio": 0.0}  # Trainer's decay to 0
    elif name == "epsilon_high" and value is None:
        value = trl.get("epsilon", 0.2)  # TRL: the same as epsilon
    elif name in ("max_steps", "warmup_steps") and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{name}={value!r} is not a number")
    elif name == "max_steps" and value <= 0:
        raise _NoEquivalent("TRL then counts epochs; set run.steps")
    elif name == "save_total_limit" and isinstance(value, int) and value <= 0:
        raise _NoEquivalent("Trainer then keeps every checkpoint; run.keep_checkpoints=0 keeps only the final model")
    elif name == "warmup_steps" and 0 < value < 1:  # Trainer: a share of the training steps
        if trl.get("max_steps", -1) <= 0:
            raise _NoEquivalent("a share of the steps, and max_steps is not set")
        value = math.ceil(trl["max_steps"] * value)
    elif name in ("adam_beta1", "adam_beta2"):
        value = [trl.get("adam_beta1", 0.9), trl.get("adam_beta2", 0.999)]
    elif key == "rollout.prompts_per_step":
        value = _prompts_per_step(trl)
    elif name == "vllm_importance_sampling_correction":
        return _correction(value, trl)
    elif name in LOSSES:
        return LOSSES[name](value, trl)
    elif name == "epsilon_high" and _loss_type(trl) == "cispo":
        return {}  # loss_type=cispo reads it as the ratio's bound
    return {key: value}


def _prompts_per_step(trl: dict[str, Any]) -> int:
    """A TRL step's answers (per_device_train_batch_size x gradient_accumulation_steps, one process) in groups
    of num_generations: the prompts of one step here."""
    batch, accumulate, group = (
        trl.get("per_device_train_batch_size", 8),
        trl.get("gradient_accumulation_steps", 1),
        trl.get("num_generations", 8),
    )
    for name, v in (("per_device_train_batch_size", batch), ("gradient_accumulation_steps", accumulate)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} is not a positive whole number")
    if not isinstance(group, int) or group < 1 or (batch * accumulate) % group:
        raise _NoEquivalent(
            f"a step's {batch * accumulate} answers (per_device_train_batch_size x gradient_accumulation_steps) "
            f"are not whole groups of num_generations={group!r}, as TRL requires"
        )
    return batch * accumulate // group


def _loss(kind: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """loss_type: the aggregation, and the loss where it is not PPO-clip (TRL's `_compute_loss`)."""
    if kind not in LOSS_TYPES:
        raise _NoEquivalent("no equivalent value")
    out: dict[str, Any] = {"loss.loss_agg": AGG_OF[kind]}
    if kind == "bnpo":  # the token mean of each micro-batch
        out["loss.norm_scope"] = "micro_batch"
    if kind == "cispo":  # -sg(min(r, epsilon_high)) A log pi: no lower bound
        high = trl.get("epsilon_high")
        high = trl.get("epsilon", 0.2) if high is None else high
        if not isinstance(high, (int, float)) or high <= 1:
            raise _NoEquivalent(
                f"loss_type=cispo bounds the ratio at epsilon_high={high!r}, which must be above 1 here"
            )
        out |= {"loss.policy_loss": "cispo", "loss.clip_low": 1.0, "loss.clip_high": high - 1.0}
    elif kind in ("sapo", "vespo"):
        out["loss.policy_loss"] = kind
    return out


def _level(level: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """importance_sampling_level: sequence is GSPO's ratio for the PPO-clip loss types."""
    kind = _loss_type(trl)
    if level == "token" or (level == "sequence" and kind == "vespo"):  # VESPO weighs by the sequence itself
        return {}
    if level != "sequence":
        raise _NoEquivalent("no equivalent value")
    if kind not in PPO_TYPES:
        raise _NoEquivalent(
            f"a sequence ratio with loss_type={kind} has no equivalent (GSPO clips it: a PPO-clip type)"
        )
    return {"loss.policy_loss": "gspo"}


def _aggregation(how: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """multi_objective_aggregation: normalize_then_sum is GDPO (each reward function normalised in its group,
    the weighted sum over the batch, eps 1e-4); sum_then_normalize is what scale_rewards says."""
    if how == "sum_then_normalize":
        return {}
    if how != "normalize_then_sum":
        raise _NoEquivalent("no equivalent value")
    return {"loss.advantage": "gdpo", "loss.credit_args": {"eps": 1e-4, "batch_norm": "episodes"}}


def _adaptive_on(on: Any, trl: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(on, bool):
        raise ValueError(f"use_adaptive_entropy={on!r} is not true or false")
    return {"loss.entropy_adaptive": on}


LOSSES: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "loss_type": _loss,
    "importance_sampling_level": _level,
    "multi_objective_aggregation": _aggregation,
    "use_adaptive_entropy": _adaptive_on,
}
"""TRL keys whose value chooses the loss (or credit) and may set several keys."""


def _correction(on: Any, trl: dict[str, Any]) -> dict[str, Any]:
    """TRL's importance sampling of vLLM's samples: its mode and bounds (TRL's defaults: sequence_mask, 3)."""
    if on is False:
        return {"loss.rollout_correction": "none"}
    if on is not True:
        raise ValueError(f"vllm_importance_sampling_correction={on!r} is not true or false")
    mode = trl.get("vllm_importance_sampling_mode", "sequence_mask")
    if mode not in IS_MODES:
        raise _NoEquivalent(f"vllm_importance_sampling_mode={mode!r} is not one of TRL's {', '.join(IS_MODES)}")
    cap = trl.get("vllm_importance_sampling_clip_max", trl.get("vllm_importance_sampling_cap", 3.0))
    if cap is None:  # no upper bound: TRL's uncapped band
        cap = math.inf
    out = {"loss.rollout_correction": IS_MODES[mode], "loss.rollout_correction_cap": cap}
    floor = trl.get("vllm_importance_sampling_clip_min")
    if floor is not None:
        out["loss.rollout_correction_floor"] = floor
    return out


def from_trl(trl: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, list[str]], int]:
    """(tempering `key.sub` -> value, the mapped TRL names, why -> the TRL `name=value`s tempering cannot do,
    how many keys change nothing), TRL's defaults filled in; KeyError naming the keys neither GRPOConfig nor
    `trl grpo`'s script arguments have, ValueError for a value of the wrong type. warmup_ratio (older TRL's)
    is a share of the steps, unless warmup_steps is set."""
    unknown = sorted(k for k in trl if k not in NAMES | SCRIPT_NAMES | {"warmup_ratio"})
    if unknown:
        raise KeyError(", ".join(unknown))
    trl = dict(trl)
    ratio = trl.pop("warmup_ratio", None)  # older TRL's: a share of the steps, as today's warmup_steps below 1
    from_ratio = ratio is not None and not trl.get("warmup_steps")  # else TRL reads warmup_steps alone
    if from_ratio:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise ValueError(f"warmup_ratio={ratio!r} is not a share in [0, 1)")
        trl["warmup_steps"] = ratio
    trl |= {k: v for k, v in DEFAULTS.items() if k not in trl}
    if trl.get("use_peft") is True:
        trl |= {k: v for k, v in SCRIPT_DEFAULTS.items() if k not in trl}
    out: dict[str, Any] = {}
    mapped: list[str] = []
    missing: dict[str, list[str]] = {}
    inert = 0
    needs, none = NEEDS | SCRIPT_NEEDS, NONE | SCRIPT_NONE
    for name, value in trl.items():
        why = None
        if name in needs and not needs[name](trl):
            inert += 1
        elif name in SAME or name in SCRIPT_SAME:
            try:
                out |= _convert(name, value, trl) if name in SAME else _script(name, value, trl)
                mapped.append("warmup_ratio" if name == "warmup_steps" and from_ratio else name)
            except _NoEquivalent as e:
                why = str(e)
        elif name in none and none[name][1] is not ANY and value not in none[name][1]:
            why = none[name][0]
        else:
            inert += 1
        if why is not None:
            missing.setdefault(why, []).append(f"{name}={value!r}")
    if ratio is not None and not from_ratio:
        inert += 1
    if out.get("model.dtype", "float32") != "float32" and out.get("loss.autocast") == "bf16":
        del out["loss.autocast"]  # the weights already compute in their dtype: TRL's bf16 changes nothing
    return out, mapped, missing, inert
