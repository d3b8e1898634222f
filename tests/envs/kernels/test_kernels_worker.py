"""Warm verification workers: candidates served by one worker stay apart, a candidate that brings its worker
down is charged alone, and torch.compile baselines come from the disk cache."""

import asyncio
import json
from dataclasses import replace

import pytest

from tempering.envs.kernels import KernelVerifier, VerifyConfig
from tempering.envs.kernels.hacks import RELU_PROBLEM, _sub
from tempering.envs.kernels.problems import Problem, scale_sizes
from tempering.envs.kernels.submission import parse_submission
from tempering.envs.kernels.verifier import KernelResult

RELU = _sub("        y = torch.empty_like(x)\n        self.lib.relu(x, y, x.numel())\n        return y")

LITTER = """import ctypes, os, time
open("/tmp/planted", "w").write("x")
open(os.path.join(os.environ["HOME"], "planted.py"), "w").write("x = 1")
libc = ctypes.CDLL(None)
libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
if os.fork() == 0:
    os.setsid()
    time.sleep(60)
    os._exit(0)
"""

CHECK = """import os
leaks = []
if os.path.exists("/tmp/planted"):
    leaks.append("a file in /tmp")
if os.path.exists(os.path.join(os.environ["HOME"], "planted.py")):
    leaks.append("a file in the workdir")
if open("/proc/sysvipc/shm").read().splitlines()[1:]:
    leaks.append("a shared memory segment")
mine = {1, os.getpid(), os.getppid()}
if any(int(p) not in mine for p in os.listdir("/proc") if p.isdigit()):
    leaks.append("a process")
if leaks:
    raise RuntimeError("LEAK: " + ", ".join(leaks))
"""

KILL = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"


def _with_prelude(prelude: str) -> str:
    return RELU.replace("from ckernel import load_c\n", "from ckernel import load_c\n" + prelude)


@pytest.fixture
def verifier(kernel_verifier):
    if not kernel_verifier.sandbox.isolated:
        pytest.skip("the isolation between candidates is the isolated backends' (a PID namespace per job)")
    return KernelVerifier(
        replace(kernel_verifier.config, static_checks=False),
        sandbox=kernel_verifier.sandbox,
        cache=kernel_verifier.cache,
    )


@pytest.mark.slow
def test_candidates_served_by_one_worker_see_nothing_of_each_other(verifier):
    from tempering.sandbox import Sandbox

    one = KernelVerifier(verifier.config, sandbox=Sandbox(concurrency=1), cache=verifier.cache)  # one worker
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)

    async def go():
        subs = [parse_submission(t) for t in (_with_prelude(LITTER), _with_prelude(CHECK), _with_prelude(KILL), RELU)]
        res = KernelResult(problem=problem.name, backend="c", status="")
        artifacts = [await one._compile(sub, res) for sub in subs]
        # queued in this order, served in this order
        return await asyncio.gather(
            *(one._harness(problem, s, a, "verify", False, "c") for s, a in zip(subs, artifacts))
        )

    litter, check, kill, after = asyncio.run(go())
    assert litter["status"] == "correct", litter
    assert check["status"] == "correct", check.get("message")  # no file, process or segment of the litterer
    assert kill["status"] == "crashed" and "worker died" in kill["message"], kill
    assert after["status"] == "correct", after  # served by the worker that took over


@pytest.mark.slow
def test_a_candidate_that_kills_its_worker_is_charged_alone(verifier):
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)

    async def go():
        return await asyncio.gather(
            *(verifier.verify(problem, t, mode="verify") for t in (RELU, _with_prelude(KILL), RELU))
        )

    first, killer, last = asyncio.run(go())
    assert killer.status == "crashed"
    assert first.correct and last.correct, (first.message, last.message)


def test_baselines_are_kept_on_disk_per_problem_sizes_and_machine(tmp_path, monkeypatch):
    from tempering.sandbox import Sandbox

    v = KernelVerifier(VerifyConfig(cache_dir=str(tmp_path)), sandbox=Sandbox(backend="subprocess"))
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    stored = {"eager_ms": 2.0, "compile_ms": 1.5, "status": "baseline"}
    v.baseline_dir.mkdir(parents=True)
    (v.baseline_dir / f"{v._baseline_key(problem)}.json").write_text(json.dumps(stored))

    async def no_job(*args, **kwargs):
        raise AssertionError("a baseline job ran although the baseline is on disk")

    monkeypatch.setattr(v, "_job", no_job)
    assert asyncio.run(v.baseline(problem)) == stored
    smaller = Problem(name="rand_relu", source=scale_sizes(RELU_PROBLEM, 0.5))
    assert v._baseline_key(smaller) != v._baseline_key(problem)  # sizes are part of the key
    other = KernelVerifier(VerifyConfig(cache_dir=str(tmp_path), threads=2), sandbox=v.sandbox)
    assert other._baseline_key(problem) != v._baseline_key(problem)
    assert KernelVerifier(VerifyConfig(cache_dir=str(tmp_path)), sandbox=v.sandbox)._baseline_key(problem) == (
        v._baseline_key(problem)
    )
