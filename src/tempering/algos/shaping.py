"""Reward shaping applied to episode rewards before credit."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to max_len - cache_len, then linear down to -1 at max_len."""
    if cache_len <= 0:
        return torch.where(lengths > max_len, -1.0, 0.0).float()
    start = max_len - cache_len
    return (-(lengths.float() - start) / cache_len).clamp(min=-1.0, max=0.0)
