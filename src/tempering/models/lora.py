"""LoRA through `peft`: train low-rank adapters only, merge them for generation, save them as peft does.

    model = add_lora(model, rank=8)            # base weights frozen; only lora_A / lora_B train
    merged = merged_copy(model)                # a plain model with W + BA, for a sampler or vLLM
    save_adapter(model, tokenizer, "out/adapter")   # adapter_config.json + adapter_model.safetensors

Needs the `peft` extra: `pip install 'tempering[peft]'`.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path

import torch

from tempering.errors import UserError

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Linear layers of Llama-style decoders (also the built-in tiny models)."""


def _peft():
    try:
        import peft
    except ImportError as e:
        raise UserError("LoRA needs peft: pip install 'tempering[peft]'") from e
    return peft


def add_lora(
    model: torch.nn.Module,
    rank: int = 8,
    alpha: float | None = None,
    dropout: float = 0.0,
    target_modules: tuple[str, ...] | list[str] | None = None,
):
    """Wrap `model` with fresh LoRA adapters (B = 0, so the output is unchanged) and freeze the rest.

    rank: adapter rank r. alpha: scaling numerator (default 2 r; the update is alpha / r * B A).
    target_modules: names of the linear layers to adapt (default: those of `DEFAULT_TARGETS` present).
    """
    peft = _peft()
    if rank < 1:
        raise UserError(f"LoRA rank must be >= 1, got {rank}")
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    targets = list(target_modules) if target_modules else [t for t in DEFAULT_TARGETS if t in names]
    missing = [t for t in targets if t not in names]
    if missing or not targets:
        raise UserError(
            f"LoRA target modules {missing or targets} are not linear layers of this model; "
            f"its linear layers are: {', '.join(sorted(names))}"
        )
    cfg = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, cfg)


def trainable_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Counts of trainable and all parameters."""
    return {
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in model.parameters()),
    }


def merged_copy(model) -> torch.nn.Module:
    """A plain model with the adapters folded into the base weights (the training model is untouched)."""
    return copy.deepcopy(model).merge_and_unload()


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """Base-model weights with the adapters merged, under the base model's parameter names: what a
    generation engine that knows nothing of LoRA loads after each update."""
    return merged_copy(model).state_dict()


def save_adapter(model, tokenizer, path: str | Path) -> Path:
    """The adapters in peft's format (loadable with `PeftModel.from_pretrained`), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_adapter(base_model: torch.nn.Module, path: str | Path, trainable: bool = False):
    """`base_model` with the adapters saved at `path`."""
    peft = _peft()
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise UserError(f"{path} holds no peft adapter (no adapter_config.json); give a folder save_adapter wrote")
    return peft.PeftModel.from_pretrained(base_model, path, is_trainable=trainable)
