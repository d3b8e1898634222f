"""The built-in tiny model family: small Llama models over the character tokenizer.

They train on the built-in synthetic tasks in seconds to minutes on a CPU, so every recipe runs on a
fresh machine with no download. Sizes share the tokenizer, so a small model can teach a larger one; a
tiny size can also take a real model's tokenizer (`model.tokenizer`), to teach that model.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tempering.errors import UserError
from tempering.models.tokenizer import char_tokenizer

# name -> (hidden, layers, heads, intermediate)
TINY_SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny-xs": (64, 2, 4, 256),
    "tiny-s": (128, 2, 4, 512),
    "tiny-m": (192, 4, 6, 768),
    "tiny-l": (256, 6, 8, 1024),
    "tiny-xl": (384, 6, 6, 1536),  # 14M parameters: the long-completion regime, where generation dominates
}


def tiny_config(size: str = "tiny-s", max_positions: int = 1024, tokenizer=None) -> LlamaConfig:
    """`tokenizer`: another model's tokenizer, to which the embedding is sized (a small model that can
    teach or be compared with that model token for token); default the character tokenizer."""
    if size not in TINY_SIZES:
        raise UserError(f"unknown tiny model size {size!r}; choose one of {sorted(TINY_SIZES)}")
    hidden, layers, heads, inter = TINY_SIZES[size]
    tok = tokenizer if tokenizer is not None else char_tokenizer()
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
        # transformers 5's dataclass signature omits rope_theta, which it still takes (into rope_parameters)
        rope_theta=10000.0,  # type: ignore[call-arg]
    )


def tiny_model(size: str = "tiny-s", seed: int = 0, tokenizer=None) -> LlamaForCausalLM:
    """A freshly initialised tiny model; deterministic from `seed`."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_config(size, tokenizer=tokenizer))
