"""Ray actors for the slow parts of a step, driven from the trainer process:

- `RaySampler`: rollout workers, each with its own copy of the policy and an `HFSampler`; the prompts of
  a batch are split over them. Same `sample(prompts, params)` as `HFSampler`, plus `sync_weights`.
Teachers scored on Ray workers are `tempering.teachers.ray.RayTeacher`; sandbox workers that run
verification jobs are `tempering.sandbox.ray_backend.RaySandbox`.

Sampling stays reproducible: each call draws one seed per worker from the driver's generator, so the
driver's generator state (saved in checkpoints) fixes what the workers sample. Needs the `ray` extra:
`pip install 'tempering[ray]'`. Started on an existing cluster with `ray.init(address=...)` first, or a
local one is started.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from pydantic import Field

from tempering.cluster import device_for, join_ray, ray_module, split_rows
from tempering.config import Schema
from tempering.errors import UserError
from tempering.models.io import load_frozen
from tempering.rollout.sampler import HFSampler, Sample, SamplingParams
from tempering.rollout.sync import SyncCheck, dtypes_of, module_digest, weights_digest


class RaySection(Schema):
    """Options of the Ray rollout backend (`rollout.backend=ray`)."""

    num_workers: int = Field(2, ge=1, description="Rollout workers (Ray actors), each with a copy of the policy.")
    num_cpus_per_worker: float = Field(1.0, gt=0, description="CPUs one worker reserves (and its torch threads).")
    num_gpus_per_worker: float = Field(0.0, ge=0, description="GPUs one worker reserves (0: sample on the CPU).")
    address: str | None = Field(None, description="Ray cluster to join (null: the running one, else a local one).")


class _RolloutWorker:
    """Lives in a Ray worker process: one copy of the policy and its sampler."""

    def __init__(self, model, tokenizer, max_batch: int, device: str, threads: int):
        model, tokenizer = load_frozen(model, tokenizer, device, threads)
        self.sampler = HFSampler(model, tokenizer, max_batch=max_batch)

    def sample(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> list[Sample]:
        self.sampler.generator.manual_seed(seed)
        return self.sampler.sample(prompts, params)

    def load_weights(self, weights: dict[str, torch.Tensor]) -> int:
        self.sampler.model.load_state_dict(weights)
        return len(weights)

    def digest(self, names: list[str]) -> str:
        """What this worker holds (`rollout/sync.py`)."""
        return module_digest(self.sampler.model, names)

    def dtypes(self) -> dict[str, torch.dtype]:
        return dtypes_of(self.sampler.model)

    def pid(self) -> int:
        return os.getpid()


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
        ray = join_ray(address)
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.generator = torch.Generator().manual_seed(seed)
        """Draws the workers' seeds: its state fixes what they sample."""
        self.syncs = 0
        src = model if isinstance(model, (str, Path)) else ray.put(model.to("cpu"))
        cls = ray.remote(_RolloutWorker).options(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)
        dev = device_for(num_gpus_per_worker)
        self.workers = [
            cls.remote(src, tokenizer, max_batch, dev, int(num_cpus_per_worker)) for _ in range(num_workers)
        ]
        self.calls = [0] * num_workers
        """Sampling calls each worker served."""
        self.sync_check = SyncCheck(f"the {num_workers} Ray rollout worker(s)")
        self._dtypes: dict[str, torch.dtype] | None = None
        if not isinstance(model, (str, Path)):
            self.sync_check.expect(0, weights_digest(model.state_dict()))  # the starting weights

    def sample(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        parts = split_rows(len(prompts), len(self.workers))
        seeds = torch.randint(0, 2**62, (len(self.workers),), generator=self.generator).tolist()
        futures = []
        for i, part in enumerate(parts):
            futures.append(self.workers[i].sample.remote(prompts[part], params, seeds[i]))
            self.calls[i] += 1
        return [s for chunk in self._get(futures, "mid-batch") for s in chunk]

    def _get(self, futures: list, when: str) -> list:
        """`ray.get` of one call per worker; a dead worker stops the run, naming it (no retry: its copy of
        the policy and its place in the batch's sampling stream are gone with it)."""
        ray = ray_module()
        try:
            return ray.get(futures)
        except ray.exceptions.RayActorError as e:
            dead = []
            for i, f in enumerate(futures):
                try:
                    ray.get(f, timeout=0)
                except ray.exceptions.RayActorError:
                    dead.append(str(i + 1))
                except Exception:  # still running, or failed otherwise: not a dead one
                    pass
            cause = (str(e).strip().splitlines() or ["actor died"])[0][:200]
            raise UserError(
                f"Ray rollout worker {', '.join(dead) or '?'} of {len(self.workers)} died {when} ({cause}); the run "
                "stops. The last checkpoint is intact: resume with --resume (workers start anew)"
            ) from None

    def sync_weights(self, train_model: torch.nn.Module, version: int | None = None) -> None:
        """Send the trainer's weights to every worker."""
        from tempering.rollout.vllm_sampler import policy_weights

        self.load_weights(policy_weights(train_model), version)

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Weights under Hugging Face names to every worker (one object in Ray's store, read by all), then
        a check that every worker holds them (a digest of `weights`)."""
        ray = ray_module()
        ref = ray.put({k: v.detach().to("cpu") for k, v in weights.items()})
        self._push(ref)
        self.syncs += 1
        if self._dtypes is None:
            self._dtypes = self._get([self.workers[0].dtypes.remote()], "at a weight sync")[0]
        names = list(weights)
        held = self._get([w.digest.remote(names) for w in self.workers], "at a weight sync")
        self.sync_check.check(version, weights_digest(weights, self._dtypes), held)

    def _push(self, ref) -> None:
        self._get([w.load_weights.remote(ref) for w in self.workers], "at a weight sync")

    def shutdown(self) -> None:
        ray = ray_module()
        for w in self.workers:
            ray.kill(w)
        self.workers = []
