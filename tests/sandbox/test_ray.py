"""The Ray backend: same API, jobs spread over actors, bad input still a UserError (local Ray)."""

import asyncio

import pytest

from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Sandbox

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool():
    from tempering.sandbox.ray_backend import RaySandbox

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pool = RaySandbox(num_actors=2, concurrency_per_actor=1)
        yield pool
        pool.shutdown()
    finally:
        ray.shutdown()


def test_jobs_run_on_both_actors_with_the_local_backend(pool):
    async def main():
        jobs = [Job(cmd=["python3", "-c", f"print({i} * {i})"]) for i in range(4)]
        return await asyncio.gather(*[pool.run(j) for j in jobs])

    results = asyncio.run(main())
    assert [r.stdout for r in results] == ["0\n", "1\n", "4\n", "9\n"]
    assert pool.backend == Sandbox.available_backends()[0]
    assert sum(pool.dispatched) == 4 and min(pool.dispatched) >= 1 and pool.in_flight == [0, 0]


def test_limits_apply_and_bad_jobs_raise(pool):
    res = pool.run_sync(Job(cmd=["python3", "-c", "while True: pass"], limits=Limits(wall_s=1.0)))
    assert res.status == "timeout"
    with pytest.raises(UserError, match="not on the job's PATH"):
        pool.run_sync(Job(cmd=["no-such-interpreter"]))
