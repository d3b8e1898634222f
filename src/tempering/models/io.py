"""Loading and saving models as plain Hugging Face folders."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from tempering.errors import UserError
from tempering.models import gguf
from tempering.models.tiny import TINY_SIZES, tiny_model
from tempering.models.tokenizer import char_tokenizer

hf_logging.disable_progress_bar()  # per-shard bars would drown the run's own progress bar


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """`auto` (a CUDA GPU when one is visible, else the CPU), `cpu`, `cuda` or `cuda:N`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"model.device={name} but no CUDA GPU is visible on this machine; use model.device=cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UserError(f"model.device={name!r} is not a device; use auto, cpu, cuda or cuda:N") from e


def load_policy(
    name_or_path: str,
    seed: int = 0,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    tokenizer: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model and its tokenizer: a built-in tiny size (fresh weights), a packaged model
    (`smollm2-135m-instruct`), a `.gguf` file (both converted once, `models/gguf.py`) or a local
    Hugging Face folder. `tokenizer` (tiny sizes only): the model whose tokenizer a fresh tiny model
    uses, its embedding sized to that vocabulary."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise UserError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
        dtype = DTYPES[dtype]
    device = resolve_device(device) if isinstance(device, str) else device
    if name_or_path in TINY_SIZES:
        tok = model_folder_tokenizer(tokenizer) if tokenizer else char_tokenizer()
        # PreTrainedModel.to is a functools.wraps of Module.to, whose stub mypy does not bind to the instance
        model = tiny_model(name_or_path, seed=seed, tokenizer=tok).to(device=device, dtype=dtype)  # type: ignore[call-arg]
        model.config._name_or_path = name_or_path  # what a LoRA adapter names as its base
        return model, tok
    if tokenizer:
        raise UserError(
            f"model.tokenizer={tokenizer} sets the tokenizer of a fresh tiny model, and model.name={name_or_path} "
            "brings its own; remove model.tokenizer, or use a tiny size (tiny-xs/s/m/l/xl)"
        )
    path = model_folder(name_or_path)
    try:
        tok = _tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as e:
        raise UserError(f"could not load the model in {path}: {e}") from e
    return model.to(device), tok  # type: ignore[arg-type]  # functools.wraps stub, as above


def model_folder(name_or_path: str) -> Path:
    """The Hugging Face folder of a packaged model, a `.gguf` file or a local folder."""
    path = Path(gguf.resolve(name_or_path)).expanduser().resolve()  # an adapter records its base by absolute path
    if not (path / "config.json").is_file():
        raise UserError(
            f"model {name_or_path!r} is neither a built-in model ({', '.join([*TINY_SIZES, *gguf.PACKAGED])}), "
            "a .gguf file nor a folder with config.json; give a local Hugging Face model folder "
            "(models are never downloaded)"
        )
    return path


def model_folder_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of a packaged model, a `.gguf` file or a local Hugging Face folder."""
    path = model_folder(name_or_path)
    try:
        return _tokenizer(path)
    except (OSError, ValueError) as e:
        raise UserError(f"could not load the tokenizer in {path}: {e}") from e


def _tokenizer(path: Path) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def save_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Write a Hugging Face folder atomically: into a temp folder beside it, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def save_module(module: torch.nn.Module, path: str | Path) -> Path:
    """A module's weights as one safetensors file, written atomically (a method's critic, say)."""
    from safetensors.torch import save_model

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        save_model(module, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_module(module: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """Load weights written by `save_module` into `module` (every key must match)."""
    from safetensors.torch import load_model

    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"no weights file {path}; give the .safetensors file a run exported (RUN/final/NAME.safetensors)"
        )
    missing, unexpected = load_model(module, path, strict=False)
    if missing or unexpected:
        raise UserError(
            f"{path} does not fit this module (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}); "
            "it was exported by a run with another model or critic kind"
        )
    return module


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded weights on every rank (a collective under FSDP2; a plain state dict otherwise)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # the options make every value a full tensor; torch annotates the general state-dict value type
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)))


def load_frozen(model: Any, tokenizer: Any, device: str, threads: int):
    """A model for inference in a worker process: a module, or a folder every node can read (loaded
    where the worker runs), on `device`, with gradients off."""
    torch.set_num_threads(max(1, threads))
    if isinstance(model, (str, Path)):
        model, tokenizer = load_policy(str(model))
    return model.to(device).eval().requires_grad_(False), tokenizer
