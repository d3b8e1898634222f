"""A lean forward for sampling from a Llama-family causal LM (Llama, Qwen2, Mistral): a few fused matmuls per
layer into a static key/value cache.

Per layer, one matmul for the query, key and value projections and one for the MLP's gate and up
projections (fewer, larger products, which run closer to a CPU's peak with a decode step's few rows), the
key/value cache written in place, and none of the per-call work of a general forward (mask building,
cache bookkeeping, output records). The math is the model's own: its rotary embedding module, its norms'
epsilon, its activation; `FusedDecoder.of` checks it against the model's forward once, and a model it
does not reproduce keeps the general forward.

The fused weights are copies, refreshed from the model before each batch (`refresh`), in float32 or in
bf16 (`dtype`): sampling in bf16 reads half the bytes and, on a CPU with AVX512-BF16 or AMX, multiplies
faster, at the price of log-probs that differ from the trainer's by bf16's rounding (what rollout
correction weighs).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

MODEL_TYPES = ("llama", "qwen2", "mistral")
"""Architectures whose layers are exactly what `step` computes (no sliding window, no q/k norms)."""


class KVCache:
    """Keys and values of every layer, (B, KV heads, capacity, head dim), and how many positions are written;
    the same `batch_select_indices` as transformers' caches."""

    def __init__(self, layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int, dtype, device):
        shape = (layers, rows, kv_heads, capacity, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.length = 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.k, self.v = self.k[:, indices], self.v[:, indices]


class FusedDecoder:
    """`forward(ids, attn, pos, cache)`: next-token logits (float32) after the last of `ids` (B, T), with
    `attn` (B, cached + T) the rows' padding mask over every position so far and `pos` (B, T) their
    position ids, writing the T new keys and values into `cache` (`new_cache`)."""

    def __init__(self, model, dtype: torch.dtype | None = None):
        self.model = model
        c = model.config
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.dtype = dtype or next(model.parameters()).dtype
        self.layers = list(model.model.layers)
        self.weights: list[dict[str, Any]] = []

    @classmethod
    def of(cls, model, dtype: torch.dtype | None = None) -> FusedDecoder | None:
        """The lean forward of `model`, or None where it would not be the model's own (another architecture,
        adapters, a sliding window, or logits that differ from the model's on a short check)."""
        c = getattr(model, "config", None)
        if c is None or c.model_type not in MODEL_TYPES or getattr(c, "use_sliding_window", False):
            return None
        if c.model_type == "mistral" and getattr(c, "sliding_window", None):
            return None
        inner = getattr(model, "model", None)
        linear = lambda m: type(m) is torch.nn.Linear
        for layer in getattr(inner, "layers", None) or [None]:
            a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            if not all(linear(getattr(a, n, None)) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
                return None
            if not all(linear(getattr(m, n, None)) for n in ("gate_proj", "up_proj", "down_proj")):
                return None
        if not linear(model.get_output_embeddings()):
            return None
        if not cls(model)._reproduces():  # in the model's own type
            return None
        return cls(model, dtype)

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the model's current weights into the fused layout (in place after the first time)."""
        cat = lambda *ws: torch.cat([w.detach() for w in ws]).to(self.dtype)
        fresh = []
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            qkv_bias = None if a.q_proj.bias is None else cat(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias)
            fresh.append(
                {
                    "qkv": cat(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight),
                    "qkv_bias": qkv_bias,
                    "o": a.o_proj.weight.detach().to(self.dtype),
                    "o_bias": None if a.o_proj.bias is None else a.o_proj.bias.detach().to(self.dtype),
                    "gate_up": cat(m.gate_proj.weight, m.up_proj.weight),
                    "gate_up_bias": None if m.gate_proj.bias is None else cat(m.gate_proj.bias, m.up_proj.bias),
                    "down": m.down_proj.weight.detach().to(self.dtype),
                    "down_bias": None if m.down_proj.bias is None else m.down_proj.bias.detach().to(self.dtype),
                    "norm_in": layer.input_layernorm.weight.detach().to(self.dtype),
                    "norm_post": layer.post_attention_layernorm.weight.detach().to(self.dtype),
                }
            )
        if len(self.weights) == len(fresh):
            for old, new in zip(self.weights, fresh):
                for k, w in new.items():
                    if w is not None:
                        old[k].copy_(w)
        else:
            self.weights = fresh
        head = self.model.get_output_embeddings()
        self.head = head.weight.detach().to(self.dtype)
        self.head_bias = None if head.bias is None else head.bias.detach().to(self.dtype)
        self.norm = self.model.model.norm.weight.detach().to(self.dtype)
        self.embed = self.model.get_input_embeddings().weight

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), rows, self.kv_heads, capacity, self.head_dim, self.dtype, self.embed.device)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: KVCache) -> torch.Tensor:
        B, T = ids.shape
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        start, n = cache.length, cache.length + T
        x = self.embed[ids].to(self.dtype)
        cos, sin = self.model.model.rotary_emb(x, pos)
        cos, sin = cos.to(self.dtype)[:, None], sin.to(self.dtype)[:, None]  # (B, 1, T, D)
        # a position sees the row's real positions up to itself (a padding position: itself only)
        keys, queries = torch.arange(n, device=ids.device), torch.arange(start, n, device=ids.device)[:, None]
        seen = (attn[:, None, :n].bool() & (keys <= queries)) | (keys == queries)
        # one query position: its query heads take the place of positions beside their key/value head
        seen = seen[:, None] if T > 1 else seen[:, :, None]
        G = H // KV
        for i, (layer, w) in enumerate(zip(self.layers, self.weights)):
            h = _rms(x, w["norm_in"], layer.input_layernorm.variance_epsilon)
            qkv = F.linear(h, w["qkv"], w["qkv_bias"])
            q = qkv[..., : H * D].view(B, T, H, D).transpose(1, 2)
            k = qkv[..., H * D : (H + KV) * D].view(B, T, KV, D).transpose(1, 2)
            v = qkv[..., (H + KV) * D :].view(B, T, KV, D).transpose(1, 2)
            cache.k[i, :, :, start:n], cache.v[i, :, :, start:n] = _rotate(k, cos, sin), v
            keys_i, values_i, q = cache.k[i, :, :, :n], cache.v[i, :, :, :n], _rotate(q, cos, sin)
            if T == 1:
                out = F.scaled_dot_product_attention(q.reshape(B, KV, G, D), keys_i, values_i, attn_mask=seen)
            else:
                repeat = lambda t: t[:, :, None].expand(B, KV, G, n, D).reshape(B, H, n, D)
                out = F.scaled_dot_product_attention(q, repeat(keys_i), repeat(values_i), attn_mask=seen)
            x = x + F.linear(out.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, H * D), w["o"], w["o_bias"])
            h = _rms(x, w["norm_post"], layer.post_attention_layernorm.variance_epsilon)
            gate, up = F.linear(h, w["gate_up"], w["gate_up_bias"]).chunk(2, dim=-1)
            x = x + F.linear(layer.mlp.act_fn(gate) * up, w["down"], w["down_bias"])
        cache.length = n
        last = _rms(x[:, -1], self.norm, self.model.model.norm.variance_epsilon)
        return F.linear(last, self.head, self.head_bias).float()

    def _reproduces(self) -> bool:
        """This forward's logits against the model's own on two short rows (one left-padded), prefill and
        one decode step."""
        was = self.model.training
        self.model.eval()
        try:
            self.refresh()
            V = self.embed.shape[0]
            ids = torch.tensor([[0, 1 % V, 2 % V, 3 % V], [4 % V, 5 % V, 6 % V, 7 % V]], device=self.embed.device)
            attn = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]], device=ids.device)
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            nxt = torch.tensor([[8 % V], [9 % V]], device=ids.device)
            cache = self.new_cache(2, 5)
            got = [self.forward(ids, attn, pos, cache)]
            got.append(self.forward(nxt, torch.cat([attn, attn[:, :1] * 0 + 1], 1), pos[:, -1:] + 1, cache))
            with torch.inference_mode():
                full = torch.cat([ids, nxt], 1)
                att = torch.cat([attn, torch.ones_like(nxt)], 1)
                logits = self.model(
                    input_ids=full, attention_mask=att, position_ids=(att.cumsum(-1) - 1).clamp(min=0)
                ).logits.float()
            want = [logits[:, -2], logits[:, -1]]
        finally:
            self.model.train(was)
        tol = 1e-3 if self.dtype == torch.float32 else 0.1
        return all(torch.allclose(g, w, atol=tol, rtol=tol) for g, w in zip(got, want))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama's: in float32, scaled by the weight in the input's type."""
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
