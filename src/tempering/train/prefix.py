"""Token log-probs with each shared prompt computed once.

A GRPO batch holds G samples of every prompt, so most of the update's forward (and backward) repeats the
same prompt tokens G times. Here the distinct prefixes (everything before a row's first trained token) go
through the model once, their key/value cache is gathered to the rows that share them, and only the rows'
suffixes are run on top of it. The result equals the plain forward up to float rounding; gradients flow
back through the gathered cache into the shared prefix computation.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from tempering.algos.losses import entropy_from_logits
from tempering.train.batch import TrainBatch


def split_prefixes(batch: TrainBatch) -> tuple[torch.Tensor, list[tuple[int, ...]], torch.Tensor]:
    """(prefix length per row, the distinct prefixes, the prefix index of each row). A row's prefix ends
    before its first trained token (a row with none keeps one token of suffix)."""
    lengths = batch.attention_BT.sum(-1)
    has = batch.mask_BT > 0
    first = torch.where(has.any(-1), has.float().argmax(-1), lengths - 1)
    plen = first.clamp(min=1).minimum((lengths - 1).clamp(min=1))
    keys: dict[tuple[int, ...], int] = {}
    owner = []
    for b in range(batch.size):
        key = tuple(batch.input_ids_BT[b, : int(plen[b])].tolist())
        owner.append(keys.setdefault(key, len(keys)))
    return plen, list(keys), torch.tensor(owner)


def _cache_kwarg(model) -> str:
    """The name under which the causal LM takes its key/value cache (transformers renamed it)."""
    inner = getattr(model, "module", model)  # DDP
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner  # peft
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def shared_prefix_logprobs(model, batch: TrainBatch, temperature: float = 1.0, entropy: bool = False, pad_id: int = 0):
    """Same contract as `update.token_logprobs`: (B, T) log-prob of each token given its prefix (0 at
    position 0 and wherever nothing is predicted), and optionally the entropy. None when no two rows share
    a prefix (the plain forward is then cheaper). `pad_id` fills padding, which is masked out."""
    dev = batch.input_ids_BT.device
    B, T = batch.input_ids_BT.shape
    plen, prefixes, owner = split_prefixes(batch)
    lengths = batch.attention_BT.sum(-1)
    if len(prefixes) == B or int((lengths - plen).max()) == 0:
        return None
    kw = _cache_kwarg(model)
    owner = owner.to(dev)
    P = max(len(p) for p in prefixes)
    # distinct prefixes, left-padded so that every one ends at column P - 1
    pre_ids = torch.full((len(prefixes), P), pad_id, dtype=torch.long, device=dev)
    pre_att = torch.zeros((len(prefixes), P), dtype=torch.long, device=dev)
    for u, p in enumerate(prefixes):
        pre_ids[u, P - len(p) :] = torch.tensor(p, device=dev)
        pre_att[u, P - len(p) :] = 1
    pre_pos = (pre_att.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    pre = model(input_ids=pre_ids, attention_mask=pre_att, position_ids=pre_pos, use_cache=True, **{kw: cache})
    cache.batch_select_indices(owner)
    # each row's suffix, right-padded, positioned after its own prefix
    slen = lengths - plen
    S = int(slen.max())
    cols = torch.arange(S, device=dev)
    src = (plen[:, None] + cols).clamp(max=T - 1)
    suf_att = (cols < slen[:, None]).long()
    suf_ids = batch.input_ids_BT.gather(1, src) * suf_att + pad_id * (1 - suf_att)
    suf_pos = plen[:, None] + cols
    att = torch.cat([pre_att[owner], suf_att], dim=1)
    suf = model(input_ids=suf_ids, attention_mask=att, position_ids=suf_pos, use_cache=True, **{kw: cache})
    # token j of the suffix is predicted by suffix position j - 1, the first by the prefix's last position
    logits = torch.cat([pre.logits[owner, -1:], suf.logits[:, :-1]], dim=1).float()
    if temperature != 1.0:
        logits = logits / temperature
    lp = logits.log_softmax(-1).gather(-1, suf_ids[..., None]).squeeze(-1) * suf_att
    out = torch.zeros((B, T), dtype=lp.dtype, device=dev).scatter_add(1, src, lp)
    ent = None
    if entropy:
        with torch.no_grad():
            e = entropy_from_logits(logits) * suf_att
            ent = torch.zeros((B, T), dtype=e.dtype, device=dev).scatter_add(1, src, e)
    return out, ent
