import os

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """A fresh tiny-xs model and the character tokenizer."""
    from tempering.models import char_tokenizer, tiny_model

    return tiny_model("tiny-xs", seed=0), char_tokenizer()


@pytest.fixture(scope="session")
def pretrained_dir(tmp_path_factory):
    """A tiny-xs model warm-started on small sums (a few seconds), so RL sees non-zero rewards."""
    from tempering.config import build
    from tempering.recipes.pretrain import PretrainConfig, pretrain

    out = tmp_path_factory.mktemp("pretrain")
    cfg = build(
        PretrainConfig,
        {
            "model": {"name": "tiny-xs"},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 30},
                "train_size": 800,
                "heldout_size": 60,
            },
            "train": {"lr": 3e-3, "batch_size": 32, "max_new_tokens": 4},
            "run": {"steps": 250, "eval_every": 250, "eval_size": 30, "out_dir": str(out), "progress": False},
        },
    )
    res = pretrain(cfg)
    return res["model"]
