"""A small stand-in for a real model: a random-initialised Qwen2 folder with a byte-level BPE tokenizer
trained here (`tokenizers`) and Qwen's chat template.

It exercises what the character-level tiny models cannot: subword tokens, special tokens, a chat
template with an end-of-turn token, `AutoModelForCausalLM` / `AutoTokenizer` loading, tied
embeddings and grouped-query attention. Nothing is downloaded; the folder loads like any local one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from tempering.models.io import save_policy

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5-Instruct's template without tool calls: ChatML turns, a default system message, and
`<|im_end|>` closing every turn (the end-of-answer token)."""


def bpe_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (Qwen's kind) trained on `corpus`, with Qwen's special tokens and
    chat template; `<|im_end|>` ends an answer and `<|endoftext|>` pads."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN_CHAT_TEMPLATE,
        model_max_length=4096,
    )


def toy_qwen2(
    path: str | Path,
    corpus: Iterable[str],
    vocab_size: int = 512,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
) -> Path:
    """Write a random-initialised Qwen2 model folder (config, safetensors, tokenizer, chat template)."""
    tok = bpe_tokenizer(corpus, vocab_size)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return save_policy(model, tok, path)
