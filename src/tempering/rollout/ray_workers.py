"""Ray actors for the slow parts of a step, driven from the trainer process:

- `RaySampler`: rollout workers, each with its own copy of the policy and an `HFSampler`; the prompts of
  a batch are split over them. Same `sample(prompts, params)` as `HFSampler`, plus `sync_weights`.
- `RayTeacher`: teacher-scoring workers behind the `Teacher` interface (rows split over the workers).
- `RaySandbox` (from `tempering.sandbox.ray_backend`): sandbox workers that run verification jobs.

Sampling stays reproducible: each call draws one seed per worker from the driver's generator, so the
driver's generator state (saved in checkpoints) fixes what the workers sample. Needs the `ray` extra:
`pip install 'tempering[ray]'`. Started on an existing cluster with `ray.init(address=...)` first, or a
local one is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from tempering.config import Schema
from tempering.errors import UserError
from tempering.rollout.sampler import HFSampler, Sample, SamplingParams
from tempering.teachers.base import Teacher, TeacherScores

__all__ = ["RaySampler", "RaySandbox", "RaySection", "RayTeacher"]  # noqa: F822 (RaySandbox: module __getattr__)


class RaySection(Schema):
    """Options of the Ray rollout backend (`rollout.backend=ray`)."""

    num_workers: int = Field(2, ge=1, description="Rollout workers (Ray actors), each with a copy of the policy.")
    num_cpus_per_worker: float = Field(1.0, gt=0, description="CPUs one worker reserves (and its torch threads).")
    num_gpus_per_worker: float = Field(0.0, ge=0, description="GPUs one worker reserves (0: sample on the CPU).")
    address: str | None = Field(None, description="Ray cluster to join (null: the running one, else a local one).")


def _ray():
    try:
        import ray
    except ImportError as e:
        raise UserError("Ray workers need Ray: pip install 'tempering[ray]'") from e
    return ray


def _ensure_ray(address: str | None = None):
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def _load(model: Any, tokenizer: Any, device: str, threads: int):
    torch.set_num_threads(max(1, threads))
    if isinstance(model, (str, Path)):  # a folder every node can read: loaded where the worker runs
        from tempering.models import load_policy

        model, tokenizer = load_policy(str(model))
    return model.to(device).eval().requires_grad_(False), tokenizer


def _device(num_gpus: float) -> str:
    return "cuda" if num_gpus > 0 and torch.cuda.is_available() else "cpu"


class _RolloutWorker:
    """Lives in a Ray worker process: one copy of the policy and its sampler."""

    def __init__(self, model, tokenizer, max_batch: int, device: str, threads: int):
        model, tokenizer = _load(model, tokenizer, device, threads)
        self.sampler = HFSampler(model, tokenizer, max_batch=max_batch)

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Sample]:
        self.sampler.generator.manual_seed(seed)
        return self.sampler.sample(prompts, params)

    def load_weights(self, weights: dict[str, torch.Tensor]) -> int:
        self.sampler.model.load_state_dict(weights)
        return len(weights)


def _split(n: int, parts: int) -> list[slice]:
    """Contiguous, nearly equal slices of range(n) (empty ones dropped)."""
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + size + (i < extra)
        if stop > start:
            out.append(slice(start, stop))
        start = stop
    return out


class RaySampler:
    """`HFSampler`'s interface over Ray rollout workers."""

    def __init__(
        self,
        model: torch.nn.Module | str | Path,
        tokenizer,
        num_workers: int = 2,
        seed: int = 0,
        num_cpus_per_worker: float = 1.0,
        num_gpus_per_worker: float = 0.0,
        max_batch: int = 512,
        address: str | None = None,
    ):
        """model: the policy (shipped to every worker) or a folder every node can read."""
        if not isinstance(num_workers, int) or num_workers < 1:
            raise UserError(f"num_workers must be a positive integer, got {num_workers!r}")
        ray = _ensure_ray(address)
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.generator = torch.Generator().manual_seed(seed)
        """Draws the workers' seeds: its state fixes what they sample."""
        self.syncs = 0
        src = model if isinstance(model, (str, Path)) else ray.put(model.to("cpu"))
        cls = ray.remote(_RolloutWorker).options(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)
        dev = _device(num_gpus_per_worker)
        self.workers = [
            cls.remote(src, tokenizer, max_batch, dev, int(num_cpus_per_worker)) for _ in range(num_workers)
        ]
        self.calls = [0] * num_workers
        """Sampling calls each worker served."""

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        ray = _ray()
        parts = _split(len(prompts), len(self.workers))
        seeds = torch.randint(0, 2**62, (len(self.workers),), generator=self.generator).tolist()
        futures = []
        for i, part in enumerate(parts):
            futures.append(self.workers[i].sample.remote(prompts[part], params, seeds[i]))
            self.calls[i] += 1
        return [s for chunk in ray.get(futures) for s in chunk]

    def sync_weights(self, train_model: torch.nn.Module) -> None:
        """Send the trainer's weights to every worker (one object in Ray's store, read by all)."""
        from tempering.rollout.vllm_sampler import policy_weights

        ray = _ray()
        ref = ray.put({k: v.detach().to("cpu") for k, v in policy_weights(train_model).items()})
        ray.get([w.load_weights.remote(ref) for w in self.workers])
        self.syncs += 1

    def shutdown(self) -> None:
        ray = _ray()
        for w in self.workers:
            ray.kill(w)
        self.workers = []


class _TeacherWorker:
    def __init__(self, model, tokenizer, device: str, threads: int):
        from tempering.teachers.hf import HFTeacher

        model, tokenizer = _load(model, tokenizer, device, threads)
        self.teacher = HFTeacher(model, tokenizer)

    def score(self, prompts, responses, candidates_BCK, top_k, full) -> TeacherScores:
        return self.teacher.score(prompts, responses, candidates_BCK, top_k, full)


class RayTeacher(Teacher):
    """A teacher scored by Ray workers, each with a copy of the teacher model; rows are split over them."""

    supports_full = True

    def __init__(
        self,
        model: torch.nn.Module | str | Path,
        tokenizer,
        num_workers: int = 2,
        name: str = "teacher",
        num_cpus_per_worker: float = 1.0,
        num_gpus_per_worker: float = 0.0,
        address: str | None = None,
    ):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise UserError(f"num_workers must be a positive integer, got {num_workers!r}")
        ray = _ensure_ray(address)
        self.tokenizer, self.name = tokenizer, name
        src = model if isinstance(model, (str, Path)) else ray.put(model.to("cpu"))
        cls = ray.remote(_TeacherWorker).options(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)
        dev = _device(num_gpus_per_worker)
        self.workers = [cls.remote(src, tokenizer, dev, int(num_cpus_per_worker)) for _ in range(num_workers)]

    def score(self, prompts, responses, candidates_BCK=None, top_k=0, full=False) -> TeacherScores:
        ray = _ray()
        if len(prompts) != len(responses):
            raise ValueError("one prompt per response")
        parts = _split(len(prompts), len(self.workers))
        futures = []
        for w, part in zip(self.workers, parts):
            cand = None
            if candidates_BCK is not None:
                C = max((len(r) for r in responses[part]), default=0)
                cand = candidates_BCK[part, :C]
            futures.append(w.score.remote(prompts[part], responses[part], cand, top_k, full))
        return _concat(ray.get(futures))

    def shutdown(self) -> None:
        ray = _ray()
        for w in self.workers:
            ray.kill(w)
        self.workers = []


def _concat(parts: list[TeacherScores]) -> TeacherScores:
    """Stack per-worker scores along the rows, right-padding positions to the longest."""
    C = max(p.mask_BC.shape[1] for p in parts)

    def cat(name: str):
        vals = [getattr(p, name) for p in parts]
        if any(v is None for v in vals):
            return None
        padded = [torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, C - v.shape[1])) for v in vals]
        return torch.cat(padded)

    return TeacherScores(**{f: cat(f) for f in TeacherScores.__dataclass_fields__})


def __getattr__(name: str):  # RaySandbox without importing Ray before it is needed
    if name == "RaySandbox":
        from tempering.sandbox.ray_backend import RaySandbox

        return RaySandbox
    raise AttributeError(name)
