"""Models: the built-in tiny family, its character tokenizer, and loading/saving HF folders."""

from tempering.models.io import load_module, load_policy, save_module, save_policy
from tempering.models.tiny import TINY_SIZES, tiny_config, tiny_model
from tempering.models.tokenizer import char_tokenizer

__all__ = [
    "TINY_SIZES",
    "char_tokenizer",
    "load_module",
    "load_policy",
    "save_module",
    "save_policy",
    "tiny_config",
    "tiny_model",
]
