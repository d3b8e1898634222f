"""Checks that a sampler with weights of its own holds the trainer's after every weight sync.

A sync can fail without an error (a LoRA adapter whose names the engine ignores, a worker that kept its
copy, a file the server never read): the run would go on sampling old weights. So after each sync to a
separate sampler (Ray rollout workers, a vLLM engine or server, the asynchronous producer's own copy) the
sampler is asked what it holds, and a mismatch stops the run naming the version the trainer sent and the
one the sampler holds (`SyncError`). Each check counts in `sync/verified`.

- A sampler that holds Hugging Face modules (`HFSampler`, the Ray workers) reports a digest of its
  tensors: every tensor's name and shape and a strided sample of at most `SAMPLE` of its elements (cast to
  the sampler's dtype on the trainer's side), exact and cheap at any model size. A change confined to the
  elements the sample skips goes unseen; an update moves nearly all of them, and stale weights all.
- A vLLM engine fuses and shards its tensors, so it reports the log-probs of a fixed probe text instead,
  compared with the trainer's within `tolerance` (mean absolute difference per token): other kernels and
  precision differ a little even on the same weights, so weights closer than that are not told apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import torch

from tempering.errors import UserError

SAMPLE = 4096
"""Elements of each tensor that enter its digest (a strided sample over the whole tensor)."""
KEEP = 16
"""Earlier versions remembered, so that a mismatch can name the version the sampler holds."""
PROBE_TEXT = "The quick brown fox jumps over the lazy dog. 12 + 30 = 42; reverse 'abc' -> 'cba'."
"""The fixed probe whose log-probs a vLLM engine reports (its first `PROBE_TOKENS` tokens)."""
PROBE_TOKENS = 32


class SyncError(UserError):
    """The sampler does not hold the weights the trainer sent it."""


def weights_digest(weights: Mapping[str, torch.Tensor], dtypes: Mapping[str, torch.dtype] | None = None) -> str:
    """A digest of named tensors: names, shapes and a strided sample of each, cast to `dtypes[name]` (the
    receiving side's dtype, when it differs from the sender's)."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach()
        flat = t.reshape(-1)
        x = flat[:: max(1, flat.numel() // SAMPLE)][:SAMPLE]
        if dtypes is not None and name in dtypes:
            x = x.to(dtypes[name])
        h.update(f"{name}:{tuple(t.shape)}:".encode())
        h.update(x.to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def module_digest(module: torch.nn.Module, names: Sequence[str]) -> str:
    """The digest of a module's own tensors under `names` (a name it lacks enters as missing)."""
    own = module.state_dict()
    return weights_digest({n: own[n] if n in own else torch.tensor([float("nan")]) for n in names})


def dtypes_of(module: torch.nn.Module) -> dict[str, torch.dtype]:
    return {n: t.dtype for n, t in module.state_dict().items()}


def probe_ids(tokenizer) -> list[int]:
    ids = list(tokenizer.encode(PROBE_TEXT, add_special_tokens=False))[:PROBE_TOKENS]
    if len(ids) < 2:
        raise UserError("the tokenizer makes fewer than 2 tokens of the weight-sync probe text")
    return ids


@torch.no_grad()
def probe_logprobs(model: torch.nn.Module, ids: list[int]) -> list[float]:
    """log p(token t | tokens before t) of the probe under `model` (in eval mode, in float32)."""
    model = getattr(model, "module", model)
    was = model.training
    model.eval()
    try:
        x = torch.tensor([ids], device=next(model.parameters()).device)
        logits = model(input_ids=x).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()
    finally:
        model.train(was)


class SyncCheck:
    """What a sampler should hold after each sync, the versions it held before, and the verdict."""

    def __init__(self, what: str, tolerance: float = 0.0):
        self.what = what
        """The sampler, in words (`the Ray rollout workers`)."""
        self.tolerance = tolerance
        """0: fingerprints are digests, compared exactly; else probe log-probs, within this mean distance."""
        self.versions: dict[int, str | list[float]] = {}
        self.verified = 0
        """Syncs checked so far (logged as `sync/verified`)."""

    def _same(self, a: str | list[float], b: str | list[float]) -> bool:
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return len(a) == len(b) and sum(abs(x - y) for x, y in zip(a, b)) / max(len(a), 1) <= self.tolerance

    def _show(self, f: str | list[float]) -> str:
        if isinstance(f, str):
            return f"digest {f}"
        return f"probe log-probs {', '.join(f'{x:.3f}' for x in f[:3])}, ..."

    def expect(self, version: int | None, fingerprint: str | list[float]) -> None:
        """Remember what the weights of `version` look like (e.g. the starting weights, version 0)."""
        if version is not None:
            self.versions[version] = fingerprint
            for old in sorted(self.versions)[1:-KEEP]:  # keep the first (the starting weights) and the last
                del self.versions[old]

    def check(self, version: int | None, expected: str | list[float], held: Sequence[str | list[float]]) -> None:
        """`held`: what each replica of the sampler reports now; raises `SyncError` on any mismatch."""
        self.expect(version, expected)
        for i, got in enumerate(held):
            if self._same(got, expected):
                continue
            known = [v for v, f in self.versions.items() if v != version and self._same(got, f)]
            holds = f"the weights of update {known[-1]}" if known else "weights of no version the trainer sent"
            part = f" (replica {i + 1} of {len(held)})" if len(held) > 1 else ""
            sent = f"update {version}" if version is not None else "the current weights"
            raise SyncError(
                f"weight sync to {self.what}{part} failed silently: it holds {holds} ({self._show(got)}), not the "
                f"trainer's {sent} ({self._show(expected)}); the run stops rather than train on samples of other "
                "weights. The last checkpoint is intact: fix the sampler and resume with --resume"
            )
        self.verified += 1
