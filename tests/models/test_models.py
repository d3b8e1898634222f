import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from tempering.errors import UserError
from tempering.models import TINY_SIZES, char_tokenizer, load_policy, save_policy, tiny_model


def test_tokenizer_round_trip_is_one_token_per_char():
    tok = char_tokenizer()
    s = "123+456=\n rev:abc"
    ids = tok.encode(s, add_special_tokens=False)
    assert len(ids) == len(s)
    assert tok.decode(ids) == s
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == s


def test_tiny_sizes_grow():
    n = [sum(p.numel() for p in tiny_model(s).parameters()) for s in ("tiny-xs", "tiny-s", "tiny-m")]
    assert n[0] < n[1] < n[2]


def test_saved_folder_is_a_plain_hf_checkpoint(tmp_path):
    model, tok = tiny_model("tiny-xs", seed=3), char_tokenizer()
    out = save_policy(model, tok, tmp_path / "m")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    m2 = AutoModelForCausalLM.from_pretrained(out)
    t2 = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([t2.encode("12+3=")])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, m2(ids).logits, atol=1e-6)
    # overwriting is atomic too: no leftover temporary folders
    save_policy(model, tok, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_random_hf_models_from_configs_load_as_policies(tmp_path, arch):
    tok = char_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=tok.eos_token_id,
    )
    model = Qwen2ForCausalLM(Qwen2Config(**common)) if arch == "qwen2" else LlamaForCausalLM(LlamaConfig(**common))
    save_policy(model, tok, tmp_path / arch)
    m, t = load_policy(str(tmp_path / arch))
    assert m.config.model_type == arch and len(t) == len(tok)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(
        UserError, match="neither a built-in model .*smollm2-135m-instruct.*, a .gguf file nor a folder"
    ):
        load_policy(str(tmp_path / "nope"))
    assert "tiny-s" in TINY_SIZES


def test_device_and_dtype_options():
    from tempering.models.io import resolve_device

    m, _ = load_policy("tiny-xs", dtype="bfloat16", device="cpu")
    assert next(m.parameters()).dtype == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA GPU"):
            resolve_device("cuda")
        assert resolve_device("auto").type == "cpu"
    with pytest.raises(UserError, match="unknown dtype"):
        load_policy("tiny-xs", dtype="int3")
