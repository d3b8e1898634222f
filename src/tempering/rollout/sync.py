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
- A vLLM engine fuses (q/k/v, gate/up), pads (the vocabulary, with zeros) and shards (tensor parallel) its
  tensors under names of its own, so names and shapes cannot be compared. Its workers report sums over
  every element instead (`WeightSums`: the count of nonzero elements, their sum, the sum of their absolute
  values and of their squares, in float64 of the engine's dtype), which concatenation, zero padding,
  permutation and sharding leave unchanged; the trainer computes the same over what it sent, cast to
  that dtype. Only the order of the float64 additions differs, far below what one update changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from tempering.errors import UserError

SAMPLE = 4096
"""Elements of each tensor that enter its digest (a strided sample over the whole tensor)."""
KEEP = 16
"""Earlier versions remembered, so that a mismatch can name the version the sampler holds."""
SUM_RTOL = 1e-9
"""Relative difference allowed between two `WeightSums` (the float64 additions run in another order)."""
CHUNK = 1 << 24
"""Elements cast to float64 at a time (bounds the extra memory on an engine's GPU)."""


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


@dataclass(frozen=True)
class WeightSums:
    """Sums over every element of a model's weights in one dtype (see the module's docstring)."""

    dtype: str
    nonzero: int
    total: float
    abs_total: float
    sq_total: float

    def matches(self, other: WeightSums) -> bool:
        def close(a: float, b: float, scale: float) -> bool:
            return abs(a - b) <= SUM_RTOL * scale

        scale = self.abs_total + other.abs_total
        return (
            self.dtype == other.dtype
            and self.nonzero == other.nonzero
            and close(self.total, other.total, scale)
            and close(self.abs_total, other.abs_total, scale)
            and close(self.sq_total, other.sq_total, self.sq_total + other.sq_total)
        )

    def __str__(self) -> str:
        return (
            f"sums of {self.nonzero} nonzero {self.dtype} weights: {self.total:.9e}, |.| {self.abs_total:.9e}, "
            f"squares {self.sq_total:.9e}"
        )


def tensor_sums(t: torch.Tensor, dtype: torch.dtype | None = None) -> list[float]:
    """[nonzero count, sum, sum of |x|, sum of x^2] of `t`'s elements cast to `dtype`, in float64."""
    flat = t.detach().reshape(-1)
    out = [0.0, 0.0, 0.0, 0.0]
    for i in range(0, flat.numel(), CHUNK):
        x = flat[i : i + CHUNK]
        x = (x.to(dtype) if dtype is not None else x).double()
        out[0] += int(torch.count_nonzero(x))
        out[1] += float(x.sum())
        out[2] += float(x.abs().sum())
        out[3] += float((x * x).sum())
    return out


def dtype_named(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise UserError(f"the sampler reported its weights in dtype {name!r}, which torch does not know")
    return dt


def weight_sums(weights: Mapping[str, torch.Tensor], dtype: str) -> WeightSums:
    """The trainer's side: the sums of every floating tensor in `weights` cast to the engine's `dtype`."""
    dt = dtype_named(dtype)
    acc = [0.0, 0.0, 0.0, 0.0]
    for name in sorted(weights):
        if weights[name].is_floating_point():
            acc = [a + b for a, b in zip(acc, tensor_sums(weights[name], dt))]
    return WeightSums(dtype, int(acc[0]), acc[1], acc[2], acc[3])


def engine_report(named: Iterable[tuple[str, torch.Tensor]]) -> dict:
    """A worker's side, JSON-ready: {name: {"dtype", "sums"}} of its floating parameters as it holds them
    (tied ones under each of their names, as the trainer's state dict lists them)."""
    return {
        name: {"dtype": str(p.dtype).removeprefix("torch."), "sums": tensor_sums(p)}
        for name, p in named
        if p.is_floating_point()
    }


def combine_reports(reports: Sequence[Mapping], what: str) -> WeightSums:
    """One `WeightSums` from every worker's `engine_report`: a parameter that several workers report with
    the same sums is replicated (counted once, e.g. a norm under tensor parallelism); one they report with
    different sums is sharded (the shards add up)."""
    if not reports or not all(isinstance(r, Mapping) and r for r in reports):
        raise UserError(
            f"{what} answered the weight fingerprint with {list(reports)[:2]!r}; it must run tempering's worker "
            "extension (--worker-extension-cls tempering.rollout.vllm_sampler.WeightSync, docs/scaling.md)"
        )
    names = sorted({n for r in reports for n in r})
    dtypes = sorted({r[n]["dtype"] for r in reports for n in r})
    if len(dtypes) != 1:
        raise UserError(
            f"{what} holds its weights in several dtypes ({', '.join(dtypes)}), so the trainer cannot compute the "
            "same weight sums; serve the model in one dtype (vllm serve --dtype bfloat16)"
        )
    acc = [0.0, 0.0, 0.0, 0.0]
    for n in names:
        parts = [list(r[n]["sums"]) for r in reports if n in r]
        if all(p == parts[0] for p in parts):
            parts = parts[:1]
        for p in parts:
            acc = [a + b for a, b in zip(acc, p)]
    return WeightSums(dtypes[0], int(acc[0]), acc[1], acc[2], acc[3])


Fingerprint = str | WeightSums


class SyncCheck:
    """What a sampler should hold after each sync, the versions it held before, and the verdict."""

    def __init__(self, what: str):
        self.what = what
        """The sampler, in words (`the Ray rollout workers`)."""
        self.versions: dict[int, Fingerprint] = {}
        self.verified = 0
        """Syncs checked so far (logged as `sync/verified`)."""

    @staticmethod
    def _same(a: Fingerprint, b: Fingerprint) -> bool:
        if isinstance(a, WeightSums) and isinstance(b, WeightSums):
            return a.matches(b)
        return a == b

    @staticmethod
    def _show(f: Fingerprint) -> str:
        return f"digest {f}" if isinstance(f, str) else str(f)

    def expect(self, version: int | None, fingerprint: Fingerprint) -> None:
        """Remember what the weights of `version` look like (e.g. the starting weights, version 0)."""
        if version is not None:
            self.versions[version] = fingerprint
            for old in sorted(self.versions)[1:-KEEP]:  # keep the first (the starting weights) and the last
                del self.versions[old]

    def check(self, version: int | None, expected: Fingerprint, held: Sequence[Fingerprint]) -> None:
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
