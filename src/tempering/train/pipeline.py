"""Asynchronous rollouts: the next batches are generated while the trainer updates on this one.

With `rollout.async_steps = k` a producer thread generates batches ahead of training, and each batch
is sampled by weights at most k updates older than the ones it trains (k = 1: one-step off-policy).
The schedule is fixed, so a run is reproducible from its seed: batch n is sampled by the weights after
update `max(n - 1 - k, d)`, where d is the last drain point before n (a step at which the run
evaluates or checkpoints, and its last step). At a drain point nothing is in flight: the checkpoint
holds the whole state (no batch generated before it is trained on after it), evaluation has the
sampler to itself, and a resumed run generates exactly what the uninterrupted one did.

Samples keep the log-probs they were drawn with: that is the behaviour policy, and the loss corrects
for the gap with the rollout correction (`loss.rollout_correction`, `algos/correction.py`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import torch

from tempering.rollout.engine import RolloutStats
from tempering.rollout.sampler import Sampler
from tempering.train.collect import Rollouts

Collect = Callable[[Any, dict[str, float], RolloutStats], Awaitable[Rollouts]]
"""`(sampler, method state, stats) -> Rollouts`: one step's rollout stage (`train/collect.py: Collector`)."""


class RolloutPipeline:
    """A producer thread that runs the rollout stage up to `k` updates ahead of the trainer.

    The trainer `publish`es the weights (and method state) after each update and `get`s each step's
    batch. The producer loads into its sampler the weights each batch is scheduled for (`version_for`);
    a sampler in this process has a copy of the weights of its own.
    """

    def __init__(self, collect: Collect, sampler: Sampler, k: int, drains_after: Callable[[int], bool], start: int = 0):
        if k < 1:
            raise ValueError(f"a rollout pipeline runs ahead by k >= 1 updates, got {k}")
        self.collect, self.sampler, self.k, self.drains_after = collect, sampler, k, drains_after
        self.start = start
        """The step the run starts (or resumes) from: a drain point, nothing in flight."""
        self.next_step = start + 1
        """The next batch the producer generates."""
        self.held: int | None = None
        """The version of the weights in the sampler."""
        self._published: dict[int, tuple[dict[str, torch.Tensor] | None, dict[str, float]]] = {}
        self._ready: dict[int, Rollouts] = {}
        self._error: BaseException | None = None
        self._busy = False
        self._stop = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # ---- the schedule ----------------------------------------------------------------------------
    def version_for(self, step: int) -> int:
        """The weights batch `step` is sampled by: k updates back, never across a drain point."""
        v = max(step - 1 - self.k, self.start)
        for d in range(step - 1, v, -1):
            if self.drains_after(d):
                return d
        return v

    def drained_at(self, step: int) -> bool:
        """`step` is a drain point and nothing beyond it has been drawn: a checkpoint of this step holds
        the whole state, and a run resumed from it continues as this one does."""
        with self._cond:
            at_drain = step == self.start or self.drains_after(step)
            return at_drain and self.next_step == step + 1 and not self._busy

    # ---- the trainer's side ----------------------------------------------------------------------
    def publish(
        self,
        version: int,
        weights: Callable[[], dict[str, torch.Tensor]],
        state: dict[str, float],
    ) -> None:
        """The weights after update `version`, if a batch will be sampled by them: `weights()` makes a
        snapshot the trainer will not change (not taken when the sampler holds them already; each load
        is checked, `rollout/sync.py`)."""
        with self._cond:
            used = any(self.version_for(n) == version for n in range(version + 1, version + self.k + 2))
            if version not in self._published and used:
                fresh = self.held != version
                self._published[version] = (weights() if fresh else None, dict(state))
                self._cond.notify_all()
        self._start()

    def get(self, step: int) -> Rollouts:
        """Batch `step` (blocking until the producer has it); raises what the producer raised before it
        had the batch (a batch it finished is still handed over when a later one failed)."""
        self._start()
        with self._cond:
            while step not in self._ready and self._error is None:
                self._cond.wait()
            if step in self._ready:
                return self._ready.pop(step)
            assert self._error is not None
            raise self._error

    def hold(self, version: int, weights: Callable[[], dict[str, torch.Tensor]]) -> None:
        """Load the weights of `version` into the sampler now (the trainer's own use of a shared sampler,
        e.g. evaluation on a vLLM engine at a drain point), checked like the producer's loads."""
        if self.held != version:
            self.sampler.load_weights(weights(), version=version)
            self.held = version

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # ---- the producer ----------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rollout-pipeline", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()  # environments are stepped on the producer's own event loop
        try:
            while True:
                with self._cond:
                    step, version = self.next_step, self.version_for(self.next_step)
                    while version not in self._published and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                    weights, state = self._published[version]
                    for old in [v for v in self._published if v < version]:
                        del self._published[old]
                    self._busy = True
                verified = 0.0
                if self.held != version:
                    assert weights is not None
                    try:
                        self.sampler.load_weights(weights, version=version)
                    except BaseException:
                        self.held = None  # in doubt
                        raise
                    self.held = version
                    verified = 1.0
                stats = RolloutStats()
                t0 = time.perf_counter()
                r = loop.run_until_complete(self.collect(self.sampler, state, stats))
                r.info["async/batch_seconds"] = time.perf_counter() - t0
                if getattr(self.sampler, "sync_check", None) is not None:  # a load that was not checked raised
                    r.info["sync/verified"] = verified
                r.version = version
                with self._cond:
                    self._ready[step] = r
                    self.next_step, self._busy = step + 1, False
                    self._cond.notify_all()
        except BaseException as e:  # handed to the trainer, which raises it at its next `get`
            with self._cond:
                self._error, self._busy = e, False
                self._cond.notify_all()
        finally:
            loop.close()
