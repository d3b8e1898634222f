"""Batched sampling with a KV cache, returning token ids and their sampling log-probs.

`HFSampler` drives any Hugging Face causal LM directly (prefill once, then one token per step for the
whole batch) instead of `generate()`: the loop is short, keeps the log-probs it sampled with, and stops
as soon as every sequence has finished.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


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


class HFSampler:
    """Samples from a Hugging Face causal LM in one process (CPU or one GPU)."""

    def __init__(self, model, tokenizer, seed: int = 0, max_batch: int = 512):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.max_batch = max_batch
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        params = inspect.signature(model.forward).parameters
        # transformers >= 5.2x names the KV cache `cache`; older releases `past_key_values`
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        out: list[Sample] = []
        for i in range(0, len(prompts), self.max_batch):
            out += self._sample_batch(prompts[i : i + self.max_batch], params)
        return out

    @torch.inference_mode()
    def _sample_batch(self, prompts: list[list[int]], p: SamplingParams) -> list[Sample]:
        B, dev = len(prompts), self.device
        if B == 0:
            return []
        was_training = self.model.training
        self.model.eval()
        lens = torch.tensor([len(x) for x in prompts])
        P = int(lens.max())
        ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, P), dtype=torch.long)
        for b, x in enumerate(prompts):  # left padding keeps every sequence's last token aligned
            ids[b, P - len(x) :] = torch.tensor(x, dtype=torch.long)
            attn[b, P - len(x) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        eos = torch.tensor(self.eos_ids, device=dev)
        out_ids = torch.empty((B, p.max_new_tokens), dtype=torch.long, device=dev)
        out_lp = torch.zeros((B, p.max_new_tokens), device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        n_gen = torch.zeros(B, dtype=torch.long, device=dev)
        stopped = torch.zeros(B, dtype=torch.bool, device=dev)
        texts = [""] * B if p.stop else None
        step_ids, step_pos = ids, pos
        for t in range(p.max_new_tokens):
            logits = (
                self.model(
                    input_ids=step_ids,
                    attention_mask=attn,
                    position_ids=step_pos,
                    use_cache=True,
                    **{self._cache_kw: cache},
                    **self._keep_kw,
                )
                .logits[:, -1, :]
                .float()
            )
            if p.temperature <= 0:
                tok = logits.argmax(-1)
                lp = torch.zeros(B, device=dev)
            else:
                logp = _filter_logits(logits / p.temperature, p.top_k, p.top_p).log_softmax(-1)
                tok = torch.multinomial(logp.exp().cpu(), 1, generator=self.generator).squeeze(-1).to(dev)
                lp = logp.gather(-1, tok[:, None]).squeeze(-1)
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            out_ids[:, t], out_lp[:, t] = tok, lp
            n_gen += (~done).long()
            hit = torch.isin(tok, eos) & ~done
            if texts is not None:
                for b in (~done).nonzero().flatten().tolist():
                    texts[b] += self.tokenizer.decode([int(tok[b])])
                    if any(s in texts[b] for s in p.stop):
                        hit[b] = True
            stopped |= hit
            done |= hit
            if bool(done.all()):
                break
            step_ids = tok[:, None]
            step_pos = step_pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=dev)], dim=1)
        self.model.train(was_training)
        n_gen, stopped = n_gen.tolist(), stopped.tolist()
        ids_l, lp_l = out_ids.tolist(), out_lp.tolist()
        return [Sample(ids_l[b][: n_gen[b]], lp_l[b][: n_gen[b]], not stopped[b]) for b in range(B)]


def _eos_ids(model, tokenizer) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
    if eos is None:
        eos = tokenizer.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return eos
