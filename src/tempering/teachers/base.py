"""The teacher interface: score the student's own tokens, without gradients.

A teacher receives, for each sequence, its own prompt (which may carry privileged context the student
never saw) and the student's continuation (sampled actions, plus feedback in multi-turn episodes).
It returns, at every continuation position, the log-prob of the student's token and optionally the
log-probs of given candidate ids (e.g. the student's top-k), its own top-k, or its full distribution.
Everything comes back right-padded over the continuation: position c of row b is response token c.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch


@dataclass
class TeacherScores:
    """A teacher's view of a batch of continuations, right-padded to C positions."""

    token_logp_BC: torch.Tensor
    """Log-prob of each continuation token given everything before it (0 on padding)."""
    mask_BC: torch.Tensor
    """1 on real continuation positions."""
    cand_logp_BCK: torch.Tensor | None = None
    """Log-probs of the requested candidate ids at each position (when candidates were given)."""
    cand_found_BCK: torch.Tensor | None = None
    """1 where the candidate's log-prob is exact; 0 where a backend could only bound it (server top-N)."""
    top_ids_BCK: torch.Tensor | None = None
    """The teacher's own k most likely ids at each position (when top_k > 0)."""
    top_logp_BCK: torch.Tensor | None = None
    """Their log-probs."""
    full_logp_BCV: torch.Tensor | None = None
    """The whole next-token distribution (in-process teachers only, when asked)."""


class Teacher(abc.ABC):
    """Anything that scores token ids: an in-process model or a remote server."""

    name: str = "teacher"
    tokenizer: object
    """Its tokenizer; must match the student's vocabulary (see `check_vocab`)."""
    supports_full: bool = False
    """Whether `full=True` (the whole distribution at every position) is available."""

    @abc.abstractmethod
    def score(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        candidates_BCK: torch.Tensor | None = None,
        top_k: int = 0,
        full: bool = False,
    ) -> TeacherScores:
        """Score `responses[b]` after `prompts[b]`; `candidates_BCK` are ids to score at each position."""


def pad_right(rows: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (ids, mask) of a list of id lists."""
    C = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), C), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), C), dtype=torch.float32)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[b, : len(r)] = 1.0
    return ids, mask


def place(values_BC: torch.Tensor, offsets: list[int], T: int) -> torch.Tensor:
    """Put right-padded continuation values (B, C, ...) at batch positions offset_b.. of a (B, T, ...) tensor.

    A student batch row is prompt_b + continuation_b, so continuation position c sits at
    offset_b + c = len(prompt_b) + c; everything else is 0.
    """
    B, C = values_BC.shape[:2]
    out = values_BC.new_zeros((B, T, *values_BC.shape[2:]))
    for b, off in enumerate(offsets):
        n = min(C, T - off)
        out[b, off : off + n] = values_BC[b, :n]
    return out


def take(values_BT: torch.Tensor, offsets: list[int], C: int) -> torch.Tensor:
    """The inverse of `place`: continuation positions of each row, right-padded to C."""
    B, T = values_BT.shape[:2]
    out = values_BT.new_zeros((B, C, *values_BT.shape[2:]))
    for b, off in enumerate(offsets):
        n = min(C, T - off)
        out[b, :n] = values_BT[b, off : off + n]
    return out
