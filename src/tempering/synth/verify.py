"""Gold verification: a bundle is accepted only if its oracle solution makes its own tests write reward 1.

Local backend (the sandbox, for bundles on the documented base): the tests first run on the untouched
environment and must write reward 0 (they write a reward on failure, and the task is not already
solved), then solution/solve.sh runs, then the tests run again and must write reward 1.

Docker backend: builds environment/Dockerfile and runs the same steps in a container, when a Docker
engine is reachable; otherwise it says so and stops.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tempering.errors import UserError
from tempering.synth.bundle import Bundle, CheckLimits, Problem, check_bundle, write_bundle
from tempering.synth.workspace import NeedsDocker, Workspace, local_image


@dataclass
class Verdict:
    """Outcome of gold verification."""

    accepted: bool
    """The oracle made the tests write reward 1 (and, if checked, reward 0 before it ran)."""
    stage: str
    """Where it ended: `ok`, `environment`, `unsolved`, `solution` or `tests`."""
    summary: str = ""
    """What went wrong, for the repair prompt (empty when accepted)."""
    reward: float | None = None
    """Reward the tests wrote after the oracle ran (None if none was written)."""
    backend: str = "sandbox"
    """`sandbox` or `docker`."""
    wall_s: float = 0.0
    """Seconds spent in verification jobs."""


def _tail(text: str, n: int = 1500) -> str:
    return text if len(text) <= n else "..." + text[-n:]


class SandboxVerifier:
    """Gold verification in tempering.sandbox on the documented base."""

    backend = "sandbox"

    def __init__(self, sandbox=None, check_unsolved: bool = True):
        if sandbox is None:
            from tempering.sandbox import Sandbox

            sandbox = Sandbox(backend="auto")
        self.sandbox = sandbox
        self.check_unsolved = check_unsolved

    async def verify(self, bundle: Bundle) -> Verdict:
        try:
            image = local_image(bundle)
        except NeedsDocker as e:
            return Verdict(
                False,
                "environment",
                f"the local sandbox cannot provide this environment: {e}; "
                "keep the Dockerfile to FROM python:3.12-slim, WORKDIR /app, COPY and ENV, or verify "
                "with the Docker backend",
            )
        ws = Workspace(self.sandbox, image, memory_mb=bundle.config.environment.memory_mb)
        wall = 0.0
        if self.check_unsolved:
            reward, run = await ws.run_tests(bundle)
            wall += run.wall_s
            if reward is None:
                return Verdict(
                    False,
                    "unsolved",
                    "tests/test.sh wrote no reward when the task is not solved "
                    f"(it must write 0 on failure). Test output:\n{_tail(run.output)}",
                    None,
                    wall_s=wall,
                )
            if reward >= 1:
                return Verdict(
                    False,
                    "unsolved",
                    "the tests already pass before the solution ran: they do not check the task's outputs",
                    reward,
                    wall_s=wall,
                )
        solution = {
            f".solution/{p[len('solution/') :]}": b for p, b in bundle.files.items() if p.startswith("solution/")
        }
        run = await ws.run("bash .solution/solve.sh\n", bundle.config.agent.timeout_sec, readonly=solution)
        wall += run.wall_s
        if run.exit_code != 0:
            why = "timed out" if run.exit_code == 124 else f"exited with {run.exit_code} ({run.status})"
            return Verdict(False, "solution", f"solution/solve.sh {why}. Output:\n{_tail(run.output)}", wall_s=wall)
        reward, run = await ws.run_tests(bundle)
        wall += run.wall_s
        if reward is None or reward < 1:
            got = "no reward" if reward is None else f"reward {reward:g}"
            return Verdict(
                False,
                "tests",
                f"after the oracle solution ran, the tests wrote {got}. Test output:\n{_tail(run.output)}",
                reward,
                wall_s=wall,
            )
        return Verdict(True, "ok", "", reward, wall_s=wall)


def docker_unreachable(timeout_s: float = 10.0) -> str | None:
    """Why no Docker engine can be used here, or None when one answers."""
    exe = shutil.which("docker")
    if exe is None:
        return "the `docker` command is not installed"
    try:
        proc = subprocess.run(
            [exe, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {timeout_s:g} s"
    if proc.returncode != 0 or not proc.stdout.strip():
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return lines[-1] if lines else f"`docker info` exited with {proc.returncode}"
    return None


class DockerVerifier:
    """Gold verification by building environment/Dockerfile and running solution and tests in a container."""

    backend = "docker"

    def __init__(self):
        if why := docker_unreachable():
            raise UserError(
                f"no Docker engine is reachable ({why}). Start Docker or set DOCKER_HOST, or use "
                "the sandbox backend (--backend sandbox) for bundles on the documented base."
            )

    async def verify(self, bundle: Bundle) -> Verdict:
        return await asyncio.to_thread(self._verify, bundle)

    def _verify(self, bundle: Bundle) -> Verdict:
        with tempfile.TemporaryDirectory(prefix="tempering-docker-") as tmp:
            root = write_bundle(bundle, Path(tmp) / bundle.name)
            (logs := Path(tmp) / "logs").mkdir()
            tag = f"tempering-synth/{bundle.name}:{bundle.digest()}"
            env = bundle.config.environment
            build = subprocess.run(
                ["docker", "build", "-q", "-t", tag, str(root / "environment")],
                capture_output=True,
                text=True,
                timeout=env.build_timeout_sec,
            )
            if build.returncode != 0:
                return Verdict(False, "environment", f"docker build failed:\n{_tail(build.stderr)}", backend="docker")
            net = [] if env.allow_internet else ["--network", "none"]
            script = "bash /solution/solve.sh && bash /tests/test.sh"
            run = subprocess.run(
                [
                    "docker",
                    "run",
                    "--rm",
                    *net,
                    f"--memory={env.memory_mb}m",
                    f"--cpus={env.cpus}",
                    "-v",
                    f"{root / 'solution'}:/solution:ro",
                    "-v",
                    f"{root / 'tests'}:/tests:ro",
                    "-v",
                    f"{logs}:/logs/verifier",
                    tag,
                    "bash",
                    "-c",
                    script,
                ],
                capture_output=True,
                text=True,
                timeout=bundle.config.agent.timeout_sec + bundle.config.verifier.timeout_sec,
            )
            reward_file = logs / "reward.txt"
            reward = float(reward_file.read_text().strip() or "nan") if reward_file.exists() else None
            if reward is not None and reward >= 1:
                return Verdict(True, "ok", "", reward, backend="docker")
            return Verdict(
                False, "tests", f"reward {reward}; output:\n{_tail(run.stdout + run.stderr)}", reward, backend="docker"
            )


def make_verifier(backend: str = "sandbox", sandbox=None, check_unsolved: bool = True):
    """`sandbox` (the local documented base) or `docker`."""
    if backend == "sandbox":
        return SandboxVerifier(sandbox, check_unsolved)
    if backend == "docker":
        return DockerVerifier()
    raise UserError(f"unknown verification backend {backend!r}; use sandbox or docker")


def static_problems(
    bundle: Bundle,
    seed: Bundle | None,
    edit_mask: frozenset[str],
    required: frozenset[str],
    limits: CheckLimits | None = None,
) -> list[Problem]:
    """Static checks (re-exported so the loop imports checks from one place)."""
    return check_bundle(bundle, seed, edit_mask, required, limits)
