"""Collating episodes into padded tensors for the policy update."""

from __future__ import annotations

from dataclasses import dataclass, fields

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
    adv_BT: torch.Tensor | None = None
    old_logp_BT: torch.Tensor | None = None
    ref_logp_BT: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.input_ids_BT.shape[0]

    def select(self, idx: torch.Tensor | slice) -> TrainBatch:
        """Rows `idx`, trimmed to the longest remaining sequence."""
        sub = {f.name: (getattr(self, f.name)[idx] if getattr(self, f.name) is not None else None) for f in fields(self)}
        T = int(sub["attention_BT"].sum(-1).max()) if sub["attention_BT"].numel() else 0
        return TrainBatch(**{k: (v[:, :T] if v is not None else None) for k, v in sub.items()})


def collate(episodes: list[Episode], pad_id: int, mask_truncated: bool = False) -> TrainBatch:
    rows = [e.flatten() for e in episodes]
    T = max(len(r[0]) for r in rows)
    B = len(rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    logp = torch.zeros((B, T), dtype=torch.float32)
    turn = torch.full((B, T), -1, dtype=torch.long)
    for b, (e, (i, m, lp, tn)) in enumerate(zip(episodes, rows)):
        n = len(i)
        ids[b, :n] = torch.tensor(i)
        attn[b, :n] = 1
        if not (mask_truncated and any(t.truncated for t in e.turns)):
            mask[b, :n] = torch.tensor(m, dtype=torch.float32)
        logp[b, :n] = torch.tensor(lp)
        turn[b, :n] = torch.tensor(tn)
    return TrainBatch(ids, attn, mask, logp, turn)


def broadcast_episode_adv(adv_B: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
    """One advantage per episode onto every one of its policy tokens."""
    return adv_B[:, None].float() * batch.mask_BT


def broadcast_turn_adv(adv_BK: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
    """One advantage per (episode, turn) onto that turn's policy tokens."""
    idx = batch.turn_BT.clamp(min=0)
    return adv_BK.float().gather(1, idx) * batch.mask_BT
