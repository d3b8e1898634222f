"""`RayTeacher`: a teacher scored by Ray workers, each with a copy of the teacher model (rows split over them)."""

from __future__ import annotations

from pathlib import Path

import torch

from tempering.cluster import device_for, join_ray, ray_module, split_rows
from tempering.errors import UserError
from tempering.models.io import load_frozen
from tempering.teachers.base import Teacher, TeacherScores


class _TeacherWorker:
    def __init__(self, model, tokenizer, device: str, threads: int):
        from tempering.teachers.hf import HFTeacher

        model, tokenizer = load_frozen(model, tokenizer, device, threads)
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
        ray = join_ray(address)
        self.tokenizer, self.name = tokenizer, name
        src = model if isinstance(model, (str, Path)) else ray.put(model.to("cpu"))
        cls = ray.remote(_TeacherWorker).options(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)
        dev = device_for(num_gpus_per_worker)
        self.workers = [cls.remote(src, tokenizer, dev, int(num_cpus_per_worker)) for _ in range(num_workers)]

    def score(self, prompts, responses, candidates_BCK=None, top_k=0, full=False) -> TeacherScores:
        ray = ray_module()
        if len(prompts) != len(responses):
            raise ValueError("one prompt per response")
        parts = split_rows(len(prompts), len(self.workers))
        futures = []
        for w, part in zip(self.workers, parts):
            cand = None
            if candidates_BCK is not None:
                C = max((len(r) for r in responses[part]), default=0)
                cand = candidates_BCK[part, :C]
            futures.append(w.score.remote(prompts[part], responses[part], cand, top_k, full))
        return _concat(ray.get(futures))

    def shutdown(self) -> None:
        ray = ray_module()
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
