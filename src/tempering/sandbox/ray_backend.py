"""`RaySandbox`: the `Sandbox` API over Ray actors, so that verification spreads over a cluster.

Each actor owns a local `Sandbox` (same isolation backends, same limits) and runs up to
`concurrency_per_actor` jobs at once; `run` sends each job to the actor with the fewest jobs in
flight and waits while every actor is full (back-pressure, as in `Sandbox`). Needs the `ray` extra:
`pip install 'tempering[ray]'`.
"""

from __future__ import annotations

import asyncio
import weakref

from tempering.cluster import join_ray
from tempering.errors import UserError
from tempering.sandbox.job import Job, Result
from tempering.sandbox.sandbox import Sandbox


class _SandboxActor:
    """Lives in a Ray worker process; one local sandbox."""

    def __init__(self, backend: str, concurrency: int):
        self.sandbox = Sandbox(backend=backend, concurrency=concurrency)

    async def run(self, job: Job) -> Result:
        return await self.sandbox.run(job)

    def backend(self) -> str:
        return self.sandbox.backend


class RaySandbox:
    """Runs `Job`s on a pool of Ray actors; `await run(job)` and `run_sync(job)` as in `Sandbox`."""

    def __init__(
        self,
        num_actors: int | None = None,
        backend: str = "auto",
        concurrency_per_actor: int = 1,
        actor_options: dict | None = None,
    ):
        """
        num_actors: actors to start (default: one per CPU of the Ray cluster, divided by concurrency_per_actor).
        backend: isolation backend inside each actor (as in `Sandbox`).
        concurrency_per_actor: jobs one actor runs at once; it reserves that many CPUs.
        actor_options: extra `ray.remote` options (e.g. `{"resources": {"verifier": 1}}`, a runtime_env).
        """
        ray = join_ray()
        if not isinstance(concurrency_per_actor, int) or concurrency_per_actor < 1:
            raise UserError(f"concurrency_per_actor must be a positive integer, got {concurrency_per_actor!r}.")
        if num_actors is None:
            num_actors = max(1, int(ray.cluster_resources().get("CPU", 1)) // concurrency_per_actor)
        if not isinstance(num_actors, int) or num_actors < 1:
            raise UserError(f"num_actors must be a positive integer, got {num_actors!r}.")
        options = {
            "num_cpus": concurrency_per_actor,
            "max_concurrency": concurrency_per_actor + 1,
            **(actor_options or {}),
        }
        cls = ray.remote(_SandboxActor).options(**options)
        self.actors = [cls.remote(backend, concurrency_per_actor) for _ in range(num_actors)]
        self.backend = ray.get(self.actors[0].backend.remote())
        self.concurrency = num_actors * concurrency_per_actor
        self.in_flight = [0] * num_actors
        """Jobs sent to each actor and not yet answered."""
        self.dispatched = [0] * num_actors
        """Jobs sent to each actor in total."""
        self._per_actor = concurrency_per_actor
        self._free: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def run(self, job: Job) -> Result:
        """Run one job on the least busy actor; waits while every actor is full."""
        import ray

        job.validate()
        loop = asyncio.get_running_loop()
        free = self._free.setdefault(loop, asyncio.Semaphore(self.concurrency))
        async with free:
            i = min(range(len(self.actors)), key=lambda k: self.in_flight[k])
            self.in_flight[i] += 1
            self.dispatched[i] += 1
            try:
                return await self.actors[i].run.remote(job)
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if isinstance(getattr(e, "cause", None), UserError) else None
                if cause is not None:
                    raise cause from None
                raise
            finally:
                self.in_flight[i] -= 1

    def run_sync(self, job: Job) -> Result:
        return asyncio.run(self.run(job))

    def shutdown(self) -> None:
        """Stop the actors (Ray itself stays up)."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
