"""Padding-free forwards: a micro-batch's sequences packed into a few rows, and the output layer in chunks.

Each sequence is a prefix (its tokens are context only) and a continuation (every token is predicted).
Sequences that share a prefix form one unit: the prefix once, then each continuation, which attends to
the prefix and to itself only, its position ids going on from the prefix's end (a group's G samples pay
for their prompt once). Units are packed into rows, a unit longer than a row split over several (each
with its prefix). The rows' attention is a 4D mask in the model's attention implementation's format
(sdpa: boolean, eager: additive), and costs the square of the row's length whatever the mask, so the
rows' length trades that against prefixes repeated and padding (`pack`'s cost model).

The output layer then runs on exactly the positions that predict a continuation token, in chunks of a
bounded number of logits: the log-probs of the given tokens and the entropies come out without a
full-vocabulary float32 tensor for the whole micro-batch, and the backward recomputes each chunk's
logits instead of keeping them (one more pass of the output layer's matmul).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tempering.errors import UserError

MAX_LOGITS = 1 << 24
"""Logits (positions x vocabulary) computed at once by the chunked output layer: 64 MB in float32."""

MASK_IMPLEMENTATIONS = ("sdpa", "eager")
"""Attention implementations that take the packed rows' 4D mask."""


@dataclass
class Packing:
    """Packed rows (R, L) and where each predicted token's state is."""

    ids_RL: torch.Tensor
    pos_RL: torch.Tensor
    unit_RL: torch.Tensor
    """The unit (prefix and its continuations in this row) of each token; padding: a unit of its own."""
    seg_RL: torch.Tensor
    """-1 on a prefix, else the continuation's index in the batch."""
    src_N: torch.Tensor
    """Flat index (into R x L) of the state that predicts each continuation token."""
    row_N: torch.Tensor
    """The sequence (batch row) of each predicted token."""
    col_N: torch.Tensor
    """Its index in that sequence's continuation."""
    tok_N: torch.Tensor
    """The predicted token."""

    def mask(self, model) -> torch.Tensor:
        """(R, 1, L, L) attention mask: causal, within a unit, a continuation seeing its prefix and itself."""
        u, s = self.unit_RL, self.seg_RL
        L = u.shape[1]
        causal = torch.ones((L, L), dtype=torch.bool, device=u.device).tril()
        seen = (u[:, :, None] == u[:, None, :]) & ((s[:, None, :] == -1) | (s[:, :, None] == s[:, None, :])) & causal
        if attention_implementation(model) == "eager":  # additive, in the model's float type
            dtype = next(model.parameters()).dtype
            zero = torch.zeros((), dtype=dtype, device=u.device)
            return torch.where(seen, zero, torch.finfo(dtype).min)[:, None]
        return seen[:, None]


def pack(
    prefixes: Sequence[Sequence[int]],
    owner: Sequence[int],
    continuations: Sequence[Sequence[int]],
    device: torch.device | str = "cpu",
    pad_id: int = 0,
    attention: float = 0.0,
) -> Packing:
    """Pack sequences `prefixes[owner[b]] + continuations[b]`, each distinct prefix (non-empty) once per row
    it lands in. The rows' length is the one of a few (the longest sequence times a power of 2, up to the
    longest prefix with all its continuations) that minimises the rows' tokens times
    (1 + `attention` x length): a dense attention over a row of L tokens costs about `attention` x L
    tokens' matmuls each (`attention_cost`)."""
    units: dict[int, list[int]] = {}
    for b, o in enumerate(owner):
        units.setdefault(o, []).append(b)
    size = lambda o, rows: len(prefixes[o]) + sum(len(continuations[b]) for b in rows)
    widths, widest = [max(size(o, [b]) for b, o in enumerate(owner))], max(size(o, r) for o, r in units.items())
    while widths[-1] < widest:
        widths.append(min(2 * widths[-1], widest))
    cost = lambda bins: len(bins) * _longest(bins) * (1 + attention * _longest(bins))
    bins = min((_bins(units, prefixes, continuations, w) for w in widths), key=cost)
    R, L = len(bins), _longest(bins)
    ids, pos, unit, seg = ([list[int]() for _ in range(R)] for _ in range(4))
    src, row, col, tok = list[int](), list[int](), list[int](), list[int]()
    for r, (_, placed) in enumerate(bins):
        for k, (o, seqs, _) in enumerate(placed):
            p = prefixes[o]
            last = r * L + len(ids[r]) + len(p) - 1  # the prefix's last state predicts each first token
            ids[r] += p
            pos[r] += range(len(p))
            unit[r] += [k] * len(p)
            seg[r] += [-1] * len(p)
            for b in seqs:
                c, start = continuations[b], r * L + len(ids[r])
                src += [last, *range(start, start + len(c) - 1)][: len(c)]
                row += [b] * len(c)
                col += range(len(c))
                tok += c
                ids[r] += c
                pos[r] += range(len(p), len(p) + len(c))
                unit[r] += [k] * len(c)
                seg[r] += [b] * len(c)
        n = L - len(ids[r])  # padding: each token a unit of its own, seeing only itself
        ids[r] += [pad_id] * n
        pos[r] += [0] * n
        unit[r] += range(len(placed), len(placed) + n)
        seg[r] += [-1] * n
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)
    return Packing(t(ids), t(pos), t(unit), t(seg), t(src), t(row), t(col), t(tok))


def _bins(units: dict[int, list[int]], prefixes, continuations, width: int) -> list[list]:
    """Units (a prefix and its sequences) split into pieces of at most `width` tokens (each with its
    prefix), then placed first fit, longest first, into rows of `width`: [tokens used, pieces]."""
    pieces: list[tuple[int, list[int], int]] = []  # (prefix, its sequences, tokens)
    for o, rows in units.items():
        size, cur = len(prefixes[o]), list[int]()
        for b in rows:
            if cur and size + len(continuations[b]) > width:
                pieces.append((o, cur, size))
                size, cur = len(prefixes[o]), list[int]()
            cur.append(b)
            size += len(continuations[b])
        pieces.append((o, cur, size))
    bins: list[list] = []
    for piece in sorted(pieces, key=lambda p: -p[2]):
        for bin_ in bins:
            if bin_[0] + piece[2] <= width:
                bin_[0] += piece[2]
                bin_[1].append(piece)
                break
        else:
            bins.append([piece[2], [piece]])
    return bins


def _longest(bins: list[list]) -> int:
    return max(b[0] for b in bins)


def attention_cost(model) -> float:
    """A dense attention's cost per token and per key, in tokens of the model's matmuls (`pack`'s
    `attention`): 4 x the attention width FLOPs per key, at about half the matmuls' rate on a CPU
    (measured: sdpa with a mask, head dimension 64), against 2 x a layer's weights."""
    c = inner(model).config
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    h, attn = c.hidden_size, heads * head_dim
    layer = h * (2 * attn + 2 * kv * head_dim) + 3 * h * c.intermediate_size
    return 2 * 4 * attn / (2 * layer)


def inner(model) -> Any:
    """The causal LM itself, under DDP's and peft's wrappers."""
    inner = getattr(model, "module", model)  # DDP
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner  # peft


def output_layer(model) -> Any:
    """The model's output layer (its LM head)."""
    return inner(model).get_output_embeddings()


def attention_implementation(model) -> str:
    return str(getattr(inner(model).config, "_attn_implementation", None) or "eager")


def packed_states(model, p: Packing, hidden_states: bool = False) -> torch.Tensor:
    """(N, H) final hidden states (after the last norm) that predict each continuation token, from one
    forward of the packed rows through `model` (its wrappers' hooks run); the output layer runs on one
    position per row only. `hidden_states`: the last decoder layer's output instead (what
    `output_hidden_states` gives, before the norm)."""
    params = inspect.signature(inner(model).forward).parameters
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    kw = dict(input_ids=p.ids_RL, attention_mask=p.mask(model), position_ids=p.pos_RL, use_cache=False, **keep)
    if hidden_states:
        h = model(**kw, output_hidden_states=True).hidden_states[-1]
    else:
        got: list[torch.Tensor] = []
        hook = inner(model).get_decoder().register_forward_hook(lambda m, a, out: got.append(out[0]))
        try:
            model(**kw)
        finally:
            hook.remove()
        h = got[0]
    return h.reshape(-1, h.shape[-1])[p.src_N]


def token_logprobs(
    head: torch.nn.Linear,
    h_NH: torch.Tensor,
    tok_N: torch.Tensor,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(tok | state) for each state, float32, through the output layer `head` in chunks of at most
    `MAX_LOGITS` logits, with a gradient (to the states and the head); and the entropies, with a gradient
    only when `entropy_grad` (an entropy bonus)."""
    if not isinstance(head, torch.nn.Linear):
        raise TypeError(f"the chunked output layer needs a plain linear layer, not {type(head).__name__}")
    chunk = max(1, MAX_LOGITS // head.out_features)
    logp, ent = _ChunkedLogprobs.apply(
        h_NH, head.weight, head.bias, tok_N, temperature, chunk, entropy or entropy_grad, entropy_grad
    )
    return logp, (ent if entropy or entropy_grad else None)


class _ChunkedLogprobs(torch.autograd.Function):
    """Token log-probs through a linear output layer, a chunk of states at a time; the backward
    recomputes each chunk's logits from the saved states and log-normalisers (and entropies, whose
    gradient d H / d z_j = -p_j (log p_j + H) it adds when asked)."""

    @staticmethod
    def forward(ctx, h, weight, bias, tok, temperature, chunk, entropy, entropy_grad):
        dev = h.device.type
        ctx.autocast = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        N = h.shape[0]
        logp = torch.empty(N, dtype=torch.float32, device=h.device)
        lse = torch.empty_like(logp)
        ent = torch.zeros_like(logp)
        for i in range(0, N, chunk):
            z = _logits(h[i : i + chunk], weight, bias, temperature)
            lse[i : i + chunk] = z.logsumexp(-1)
            logp[i : i + chunk] = z.gather(-1, tok[i : i + chunk, None]).squeeze(-1) - lse[i : i + chunk]
            if entropy:
                z.sub_(lse[i : i + chunk, None])
                ent[i : i + chunk] = -(z.exp() * z).sum(-1)
        ctx.save_for_backward(h, weight, bias, tok, lse, ent)
        ctx.temperature, ctx.chunk, ctx.entropy_grad = temperature, chunk, entropy_grad
        if not entropy_grad:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        h, weight, bias, tok, lse, ent = ctx.saved_tensors
        on, dtype = ctx.autocast
        grad_h = torch.zeros_like(h) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        grad_b = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        with torch.autocast(h.device.type, dtype, enabled=on):
            for i in range(0, h.shape[0], ctx.chunk):
                hc, g = h[i : i + ctx.chunk], g_logp[i : i + ctx.chunk].float()
                z = _logits(hc, weight, bias, ctx.temperature)
                # d log p(tok) / d logits = onehot(tok) - softmax, through the temperature
                lp = z.sub_(lse[i : i + ctx.chunk, None])
                if ctx.entropy_grad:
                    ge = g_ent[i : i + ctx.chunk, None].float()
                    dz = lp.exp() * (-g[:, None] - ge * (lp + ent[i : i + ctx.chunk, None]))
                else:
                    dz = lp.exp_().mul_(-g[:, None])
                dz.scatter_add_(-1, tok[i : i + ctx.chunk, None], g[:, None])
                dz.div_(ctx.temperature)
                if grad_h is not None:
                    grad_h[i : i + ctx.chunk] = (dz @ weight).to(h.dtype)
                if grad_w is not None:
                    grad_w += (dz.t() @ hc).to(weight.dtype)
                if grad_b is not None:
                    grad_b += dz.sum(0).to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None


def _logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    z = torch.nn.functional.linear(h, weight, bias).float()
    return z / temperature if temperature != 1.0 else z


def check_packing(model, what: str = "the policy") -> None:
    """Refuse a model that cannot take packed rows: an attention implementation without a 4D mask, or one
    whose packed log-probs are not its own (a post-processed or adapted output layer, a custom forward),
    checked on a short packed batch against plain forwards."""
    m = inner(model)
    name = type(m).__name__
    impl = attention_implementation(m)
    way_out = "set loss.pack=false (padded micro-batches)"
    if impl not in MASK_IMPLEMENTATIONS:
        raise UserError(
            f"loss.pack: {what} ({name}, attention implementation {impl!r}) takes no block-diagonal attention "
            f"mask; load it with one of {', '.join(MASK_IMPLEMENTATIONS)} or {way_out}"
        )
    if m in _PACKS:
        return
    head = output_layer(m)
    if not isinstance(head, torch.nn.Linear):
        raise UserError(f"loss.pack: {what} ({name}) has an output layer of type {type(head).__name__}; {way_out}")
    V = head.out_features
    prefix, conts = [1 % V, 2 % V, 3 % V], [[4 % V, 5 % V], [6 % V, 7 % V, 8 % V]]
    dev = head.weight.device
    was = m.training
    m.eval()
    try:
        with torch.no_grad():
            p = pack([prefix], [0, 0], conts, device=dev)
            got, _ = token_logprobs(head, packed_states(m, p), p.tok_N)
            want = []
            for c in conts:
                ids = torch.tensor([prefix + c], device=dev)
                lp = m(input_ids=ids).logits[0, len(prefix) - 1 : -1].float().log_softmax(-1)
                want.append(lp.gather(-1, ids[0, len(prefix) :, None]).squeeze(-1))
            want_N = torch.stack([want[b][j] for b, j in zip(p.row_N.tolist(), p.col_N.tolist())])
    finally:
        m.train(was)
    if not torch.allclose(got, want_N, atol=1e-4, rtol=1e-4):
        raise UserError(
            f"loss.pack: {what} ({name}) gives other log-probs on packed rows than on its own (its attention or "
            f"output layer does not take the packed layout); {way_out}"
        )
    _PACKS.add(m)


_PACKS: weakref.WeakSet = weakref.WeakSet()
"""Models that passed `check_packing`."""
