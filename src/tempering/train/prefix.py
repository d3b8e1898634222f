"""Token log-probs with each shared prompt computed once, on padded or packed micro-batches.

A GRPO batch holds G samples of every prompt, so most of the update's forward (and backward) repeats the
same prompt tokens G times. Here a row's prefix is everything before its first trained token; the
distinct prefixes run once and only the rows' suffixes run per row: padded on the prefixes' gathered
cache (`models.shared_prompt`), or packed without padding (`models.packing`, `loss.pack`). The result
equals the plain forward up to float rounding, gradients included.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from tempering.algos.losses import entropy_from_logits
from tempering.models.packing import Packing, attention_cost, output_layer, pack, packed_states, token_logprobs
from tempering.models.shared_prompt import shared_prompt_forward
from tempering.train.batch import TrainBatch


def split_prefixes(batch: TrainBatch) -> tuple[torch.Tensor, list[tuple[int, ...]], torch.Tensor]:
    """(prefix length per row, the distinct prefixes, the prefix index of each row). A row's prefix ends
    before its first trained token (a row with none keeps one token of suffix)."""
    lengths = batch.attention_BT.sum(-1)
    has = batch.mask_BT > 0
    first = torch.where(has.any(-1), has.float().argmax(-1), lengths - 1)
    plen = first.clamp(min=1).minimum((lengths - 1).clamp(min=1))
    keys: dict[tuple[int, ...], int] = {}
    owner = [keys.setdefault(tuple(row[:n]), len(keys)) for row, n in zip(batch.input_ids_BT.tolist(), plen.tolist())]
    return plen, list(keys), torch.tensor(owner)


def _suffix_logits(
    model: torch.nn.Module, batch: TrainBatch, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Each row's next-token logits over its suffix, (B, S, V) float, with the suffix's positions in the
    batch (B, S), its mask and its token ids; None when no two rows share a prefix (the plain forward is
    then cheaper)."""
    dev = batch.input_ids_BT.device
    B, T = batch.input_ids_BT.shape
    plen, prefixes, owner = split_prefixes(batch)
    slen = batch.attention_BT.sum(-1) - plen
    S = int(slen.max())
    if len(prefixes) == B or S == 0:
        return None
    # each row's suffix, right-padded (padding is masked out, its id does not matter)
    cols = torch.arange(S, device=dev)
    src = (plen[:, None] + cols).clamp(max=T - 1)
    suf_att = (cols < slen[:, None]).long()
    suf_ids = batch.input_ids_BT.gather(1, src) * suf_att
    # suffix token 0 is predicted after the prefix, token j after suffix token j - 1
    first_BV, rest = shared_prompt_forward(model, prefixes, owner.to(dev), suf_ids[:, :-1], suf_att[:, :-1])
    logits = first_BV[:, None] if rest is None else torch.cat([first_BV[:, None], rest], dim=1)
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits, src, suf_att, suf_ids


def shared_prefix_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Same contract as `update.token_logprobs`: (B, T) log-prob of each token given its prefix (0 at
    position 0 and wherever nothing is predicted), and optionally the entropy (with its gradient when
    `entropy_grad`). None when no two rows share a prefix."""
    out = _suffix_logits(model, batch, temperature)
    if out is None:
        return None
    logits, src, suf_att, suf_ids = out
    B, T = batch.input_ids_BT.shape
    lp = logits.log_softmax(-1).gather(-1, suf_ids[..., None]).squeeze(-1) * suf_att
    logp = torch.zeros((B, T), dtype=lp.dtype, device=lp.device).scatter_add(1, src, lp)
    ent = None
    if entropy:
        with nullcontext() if entropy_grad else torch.no_grad():
            e = entropy_from_logits(logits) * suf_att
            ent = torch.zeros((B, T), dtype=e.dtype, device=e.device).scatter_add(1, src, e)
    return logp, ent


def shared_prefix_vocab_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0
) -> torch.Tensor | None:
    """Same contract as `update.vocab_logprobs` on the trained positions: (B, T, V) next-token log-probs,
    each prefix computed once; positions inside a prefix (never trained) are zeros. None when no two rows
    share a prefix."""
    out = _suffix_logits(model, batch, temperature)
    if out is None:
        return None
    logits, src, suf_att, _ = out
    B, T = batch.input_ids_BT.shape
    lp = logits.log_softmax(-1) * suf_att[..., None]
    index = src[..., None].expand_as(lp)
    return torch.zeros((B, T, lp.shape[-1]), dtype=lp.dtype, device=lp.device).scatter_add(1, index, lp)


def pack_batch(batch: TrainBatch, share_prefix: bool = True, attention: float = 0.0) -> tuple[Packing, torch.Tensor]:
    """The batch's rows packed (`models.packing.pack`, with its `attention` cost), and each row's prefix
    length: a row's continuation starts at its first trained token; rows with the same prefix share it
    when `share_prefix`."""
    plen, prefixes, owner = split_prefixes(batch)
    ids, lengths, cut = batch.input_ids_BT.tolist(), batch.attention_BT.sum(-1).tolist(), plen.tolist()
    conts = [row[n:end] for row, n, end in zip(ids, cut, lengths)]
    dev = batch.input_ids_BT.device
    if share_prefix:
        p = pack([list(x) for x in prefixes], owner.tolist(), conts, dev, attention=attention)
    else:
        p = pack([row[:n] for row, n in zip(ids, cut)], list(range(len(ids))), conts, dev, attention=attention)
    return p, plen.to(batch.input_ids_BT.device)


def _unpack(values_N: torch.Tensor, p: Packing, plen: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Per-token values of the packed continuations back at their (row, column) in the batch; 0 elsewhere."""
    out = values_N.new_zeros((*shape, *values_N.shape[1:]))
    return out.index_put((p.row_N, plen[p.row_N] + p.col_N), values_N)


def packed_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    share_prefix: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as `update.token_logprobs` from each row's first trained token on (0 before it): one
    forward of the packed batch, the output layer in chunks (`models.packing.token_logprobs`)."""
    p, plen = pack_batch(batch, share_prefix, attention_cost(model))
    h = packed_states(model, p)
    logp, ent = token_logprobs(output_layer(model), h, p.tok_N, temperature, entropy, entropy_grad)
    shape = tuple(batch.input_ids_BT.shape)
    return _unpack(logp, p, plen, shape), (None if ent is None else _unpack(ent, p, plen, shape))


def packed_vocab_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0, share_prefix: bool = True
) -> torch.Tensor:
    """Same contract as `shared_prefix_vocab_logprobs`, from one forward of the packed batch."""
    p, plen = pack_batch(batch, share_prefix, attention_cost(model))
    logits = output_layer(model)(packed_states(model, p)).float()
    return _unpack((logits / temperature).log_softmax(-1), p, plen, tuple(batch.input_ids_BT.shape))


def packed_values(critic: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """A value model's (B, T) values (`models.value.ValueModel`) from one forward of the packed batch,
    prompts shared; 0 before each row's first trained token."""
    p, plen = pack_batch(batch, attention=attention_cost(critic))
    v_RL = critic(p.ids_RL, p.mask(critic), p.pos_RL)
    return _unpack(v_RL.reshape(-1)[p.src_N], p, plen, tuple(batch.input_ids_BT.shape))
