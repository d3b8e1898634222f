"""Batched sampling with a KV cache, returning token ids and their sampling log-probs.

`HFSampler` drives any Hugging Face causal LM directly instead of `generate()`: each distinct prompt is
prefilled once (a group's samples share its KV cache), then one token per step for the rows still
running (finished rows leave the batch), into a KV cache that grows in place. Sampling with bf16 weights,
a Llama-family model runs through a lean forward of fused matmuls (`models.decode`); otherwise the model
runs its own forward. The loop is short, keeps the log-probs it sampled with, and stops as soon as every
sequence has finished.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, cast

import torch
from transformers.cache_utils import Cache, DynamicLayer

from tempering.models.decode import FusedDecoder
from tempering.progress import warn
from tempering.rollout.sync import SyncCheck, dtypes_of, module_digest, weights_digest


@dataclass
class SamplingParams:
    max_new_tokens: int = 32
    """Upper bound on tokens generated per sequence."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation ends once the decoded completion contains one (it is kept)."""
    stop_ids: list[int] | None = None
    """Token ids that end a sequence (kept as its last token); None: the model's end-of-sequence tokens."""


@dataclass
class Sample:
    ids: list[int]
    """Generated tokens (including the final EOS token, when one was sampled)."""
    logprobs: list[float]
    """Log-prob of each generated token under the sampling distribution."""
    truncated: bool
    """Hit `max_new_tokens` before a stop token or string."""


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # drop a token once the mass before it already reaches top_p (the first token always stays)
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
    return logits


def sampling_logprobs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Log-probs of the distribution a token is drawn from under `p` (temperature, top-k, top-p applied:
    -inf outside them); the model's own when greedy."""
    if p.temperature <= 0:
        return logits.log_softmax(-1)
    return _filter_logits(logits / p.temperature, p.top_k, p.top_p).log_softmax(-1)


class Sampler(Protocol):
    """What the loop samples with: this module's `HFSampler`, a vLLM server's or Ray workers' (each draws
    its seeds from `generator`, saved in checkpoints)."""

    tokenizer: Any
    pad_id: int
    generator: torch.Generator

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]: ...

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None = None) -> None:
        """The trainer's weights (`version`: the update they are of), for the next samples."""


class HFSampler:
    """Samples from a Hugging Face causal LM in one process (CPU or one GPU).

    threads: torch CPU threads of the thread that samples (0: leave as they are), so that a sampler
    beside the trainer (asynchronous rollouts) does not take the trainer's cores.
    dtype: the weights' type while sampling, other than the model's: a copy in the lean forward, refreshed
    before each batch (a model without one samples in its own type); None: the model's, through its own
    forward."""

    in_process = True
    """Sampling is torch work on this process's cores: the rollout engine calls it on its own thread."""

    def __init__(
        self,
        model,
        tokenizer,
        seed: int = 0,
        max_batch: int = 512,
        threads: int = 0,
        dtype: torch.dtype | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.max_batch = max_batch
        self.threads = threads
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.sync_check: SyncCheck | None = None
        """Checks of the weights loaded into a copy of its own (`load_weights`); None until the first."""
        # a peft model's forward takes **kwargs and passes them on: read the wrapped model's
        params = inspect.signature(getattr(model, "get_base_model", lambda: model)().forward).parameters
        # transformers >= 5.2x names the KV cache `cache`; older releases `past_key_values`
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        own = next(model.parameters()).dtype
        self.fused: FusedDecoder | None = FusedDecoder.of(model, dtype) if dtype not in (None, own) else None
        """The lean forward (None: the model's own)."""
        if dtype not in (None, own) and self.fused is None:
            warn(f"sampling in {own}: {type(model).__name__} has no lean forward in {dtype}")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Replace the model's weights (a sampler with a copy of its own, e.g. beside the trainer), then
        check that it holds them (`rollout/sync.py`: a digest of `weights`)."""
        self.model.load_state_dict(weights)
        if self.sync_check is None:
            self.sync_check = SyncCheck("the asynchronous producer's sampler")
        expected = weights_digest(weights, dtypes_of(self.model))
        self.sync_check.check(version, expected, [module_digest(self.model, list(weights))])

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        if self.threads:
            torch.set_num_threads(self.threads)  # per calling thread (OpenMP)
        out: list[Sample] = []
        for i in range(0, len(prompts), self.max_batch):
            out += self._sample_batch(prompts[i : i + self.max_batch], params)
        return out

    def _forward(self, ids, attn, pos, cache) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            use_cache=True,
            **{self._cache_kw: cache},
            **self._keep_kw,
        )
        return out.logits[:, -1, :].float()

    @torch.inference_mode()
    def _sample_batch(self, prompts: list[list[int]], p: SamplingParams) -> list[Sample]:
        """Prefill each distinct prompt once (a group's samples share it) and gather its KV cache to the
        rows; then one token per step for the live rows, dropping finished rows from the batch once a
        quarter of it has finished."""
        B, dev = len(prompts), self.device
        if B == 0:
            return []
        was_training = self.model.training
        self.model.eval()
        distinct: dict[tuple[int, ...], int] = {}
        owner = torch.tensor([distinct.setdefault(tuple(x), len(distinct)) for x in prompts], device=dev)
        P = max(len(x) for x in distinct)
        ids = torch.full((len(distinct), P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(distinct), P), dtype=torch.long)
        for u, x in enumerate(distinct):  # left padding keeps every prompt's last token aligned
            ids[u, P - len(x) :] = torch.tensor(x, dtype=torch.long)
            attn[u, P - len(x) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        if self.fused is not None:
            self.fused.refresh()  # the model's weights now
            cache, forward = self.fused.new_cache(len(distinct), P + p.max_new_tokens), self.fused.forward
        else:
            cache, forward = _decode_cache(P + p.max_new_tokens), self._forward
        logits = forward(ids, attn, (attn.cumsum(-1) - 1).clamp(min=0), cache)[owner]
        if len(distinct) < B:
            cache.batch_select_indices(owner)
        attn, pos = attn[owner], attn.sum(-1)[owner][:, None]  # the next token's position
        eos = torch.tensor(self.eos_ids if p.stop_ids is None else p.stop_ids, dtype=torch.long, device=dev)
        out_ids = torch.full((B, p.max_new_tokens), self.pad_id, dtype=torch.long, device=dev)
        out_lp = torch.zeros((B, p.max_new_tokens), device=dev)
        n_gen = torch.zeros(B, dtype=torch.long, device=dev)
        stopped = torch.zeros(B, dtype=torch.bool, device=dev)
        texts = [""] * B if p.stop else None
        rows = torch.arange(B, device=dev)  # the prompt index of each row still in the batch
        done = torch.zeros(B, dtype=torch.bool, device=dev)  # finished, not yet dropped
        for t in range(p.max_new_tokens):
            if p.temperature <= 0:
                tok = logits.argmax(-1)
                lp = torch.zeros(len(rows), device=dev)
            else:
                logp = sampling_logprobs(logits, p)
                tok = draw(logp, self.generator).to(dev)
                lp = logp.gather(-1, tok[:, None]).squeeze(-1)
            live = rows[~done]
            out_ids[live, t], out_lp[live, t] = tok[~done], lp[~done]
            n_gen[live] += 1
            hit = torch.isin(tok, eos) & ~done
            if texts is not None:
                for i in (~done).nonzero().flatten().tolist():
                    b = int(rows[i])
                    texts[b] += self.tokenizer.decode([int(tok[i])])
                    if any(s in texts[b] for s in p.stop):
                        hit[i] = True
            stopped[rows[hit]] = True
            done |= hit
            if bool(done.all()) or t == p.max_new_tokens - 1:
                break
            if 4 * int(done.sum()) >= len(rows):  # drop the finished rows (their cache too)
                keep = (~done).nonzero().flatten()
                cache.batch_select_indices(keep)
                rows, tok, attn, pos, done = rows[keep], tok[keep], attn[keep], pos[keep], done[keep]
            attn = torch.cat([attn, torch.ones((len(rows), 1), dtype=attn.dtype, device=dev)], dim=1)
            logits = forward(tok[:, None], attn, pos, cache)
            pos = pos + 1
        self.model.train(was_training)
        n_gen_l, stopped_l = n_gen.tolist(), stopped.tolist()
        ids_l, lp_l = out_ids.tolist(), out_lp.tolist()
        return [Sample(ids_l[b][: n_gen_l[b]], lp_l[b][: n_gen_l[b]], not stopped_l[b]) for b in range(B)]


def draw(logp: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row from exp(logp), by inverting its float64 CDF at a uniform draw: exact, and on a
    CPU several times cheaper than `torch.multinomial`, which draws exponential noise for every
    vocabulary entry (a tenth of a real model's decode step)."""
    cdf = logp.detach().exp().cpu().double().cumsum_(-1)
    u = torch.rand((len(cdf), 1), generator=generator, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


def _decode_cache(capacity: int):
    """A KV cache whose layers write each new token into a buffer of `capacity` positions, instead of
    concatenating the whole cache at every step (transformers' DynamicCache)."""
    # transformers only calls `layer_class_to_replicate()`, so a factory works where it annotates a class
    layer = cast("type[DynamicLayer]", partial(_BufferLayer, capacity))
    return Cache(layer_class_to_replicate=layer)


class _BufferLayer(DynamicLayer):
    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            B, H, _, D = key_states.shape
            self._k = key_states.new_empty((B, H, self.capacity, D))
            self._v = value_states.new_empty((B, H, self.capacity, value_states.shape[-1]))
        n = self.length + key_states.shape[-2]
        self._k[:, :, self.length : n] = key_states
        self._v[:, :, self.length : n] = value_states
        self.length = n
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]


def _eos_ids(model, tokenizer) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
    if eos is None:
        eos = tokenizer.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return eos
