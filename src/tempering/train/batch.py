"""Collating episodes into padded tensors for the policy update."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from tempering.types import Episode


@dataclass
class TrainBatch:
    """Right-padded token tensors, one row per episode; policy tokens carry `mask_BT` = 1."""

    input_ids_BT: torch.Tensor
    attention_BT: torch.Tensor
    mask_BT: torch.Tensor
    """1 on policy tokens that are trained on (feedback, prompt and padding are 0)."""
    sample_logp_BT: torch.Tensor
    """Log-probs recorded at sampling time (0 off the mask)."""
    turn_BT: torch.Tensor
    """Turn index of each policy token, -1 elsewhere."""
    episode_B: torch.Tensor | None = None
    """Index of the episode each row belongs to (an episode can span several rows)."""
    adv_BT: torch.Tensor | None = None
    old_logp_BT: torch.Tensor | None = None
    ref_logp_BT: torch.Tensor | None = None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    """Method-specific per-token tensors shaped (B, T, ...), e.g. teachers' top-k log-probs for a custom loss."""

    @property
    def size(self) -> int:
        return self.input_ids_BT.shape[0]

    def select(self, idx: torch.Tensor | slice) -> TrainBatch:
        """Rows `idx`, trimmed to the longest remaining sequence."""
        sub: dict[str, Any] = {
            f.name: (getattr(self, f.name)[idx] if getattr(self, f.name) is not None else None)
            for f in fields(self)
            if f.name != "extra"
        }
        attn = self.attention_BT[idx]
        T = int(attn.sum(-1).max()) if attn.numel() else 0
        out = {k: (v[:, :T] if v is not None and v.dim() == 2 else v) for k, v in sub.items()}
        return TrainBatch(**out, extra={k: v[idx][:, :T] for k, v in self.extra.items()})


def collate(episodes: list[Episode], pad_id: int, mask_truncated: bool = False) -> TrainBatch:
    rows, owner = [], []
    for e_idx, e in enumerate(episodes):
        drop = mask_truncated and any(t.truncated for t in e.turns)
        for i, m, lp, tn in e.segments():
            rows.append((i, [0] * len(m) if drop else m, lp, tn))
            owner.append(e_idx)
    T = max(len(r[0]) for r in rows)
    B = len(rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    logp = torch.zeros((B, T), dtype=torch.float32)
    turn = torch.full((B, T), -1, dtype=torch.long)
    for b, (i, m, lp, tn) in enumerate(rows):
        n = len(i)
        ids[b, :n] = torch.tensor(i)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(m, dtype=torch.float32)
        logp[b, :n] = torch.tensor(lp)
        turn[b, :n] = torch.tensor(tn)
    return TrainBatch(ids, attn, mask, logp, turn, episode_B=torch.tensor(owner))


def broadcast_turn_adv(adv_EK: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
    """One advantage per (episode, turn) onto that turn's policy tokens, in every row of the episode."""
    rows = adv_EK.float()[batch.episode_B]
    return rows.gather(1, batch.turn_BT.clamp(min=0)) * batch.mask_BT
