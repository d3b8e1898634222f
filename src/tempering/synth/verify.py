"""Gold verification: a bundle is accepted only if its oracle solution makes its own tests pass.

Both backends run the same steps (`gold_steps`), for each step of the task in order: the tests run on
the state before the step's solution and must write a reward below 1 (they write a reward on failure,
and the step is not already solved); then the step's solution/solve.sh runs; then the tests must write
reward 1; then (sandbox backend) the tests must write less than 1 on each of a bounded number of
mutants of the reference's outputs: each file it wrote or changed emptied, a comment line, truncated,
digits zeroed (a task whose tests accept an empty answer grades no work). The sandbox backend emulates the environment locally (`Workspace`, Harbor's paths on the
isolated backends) and runs the solution and the tests after it in one job (`session.solve_then_test`),
so that a service the solution starts in the background still answers the tests, as in Harbor's
container; the Docker backend builds environment/Dockerfile (or pulls docker_image) and runs
the same steps in containers (`DockerWorkspace`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from tempering.config import Schema
from tempering.envs.terminal.bundle import Bundle
from tempering.envs.terminal.docker import BuildFailed, DockerWorkspace, docker_unreachable
from tempering.envs.terminal.image import NeedsDocker, NeedsNetwork, local_image
from tempering.envs.terminal.screen import accepted_mutant
from tempering.envs.terminal.session import solve_then_test
from tempering.envs.terminal.workspace import Workspace
from tempering.errors import UserError


class VerifySettings(Schema):
    """Where a bundle's gold solution is verified (`tempering synth check`, and `synth run`)."""

    backend: Literal["sandbox", "docker"] = Field(
        "sandbox", description="sandbox: locally, in tempering's sandbox; docker: in the bundle's own image."
    )
    sandbox: Literal["auto", "bwrap", "unshare", "subprocess"] = Field(
        "auto", description="The sandbox backend (backend=sandbox)."
    )


__all__ = [
    "DockerVerifier",
    "SandboxVerifier",
    "Verdict",
    "check_one",
    "docker_unreachable",
    "gold_steps",
    "make_verifier",
    "short_reason",
]


@dataclass
class Verdict:
    """Outcome of gold verification."""

    accepted: bool
    """The oracle made the tests write reward 1 (and, if checked, a lower reward before it ran)."""
    stage: str
    """Where it ended: `ok`, `environment`, `unsolved`, `solution`, `tests` or `mutants` (the tests also
    pass a mutated reference output)."""
    summary: str = ""
    """What went wrong, for the repair prompt (empty when accepted)."""
    reward: float | None = None
    """Score of the tests' last reward (None if none was written)."""
    backend: str = "sandbox"
    """`sandbox` or `docker`."""
    wall_s: float = 0.0
    """Seconds spent in verification jobs."""


def _tail(text: str, n: int = 1500) -> str:
    return text if len(text) <= n else "..." + text[-n:]


_REFUSED = re.compile(
    r"connection refused|ConnectionRefusedError|Errno 111|curl: \(7\)|Failed to connect to|ECONNREFUSED|"
    r"Connection reset by peer|ConnectionResetError|ECONNRESET",
    re.I,
)


def refused_connection(output: str) -> str:
    """The verdict's hint when the tests failed on a refused connection (else ""); the forwarder of a port
    the image declares resets a connection that nothing of the solution's answers."""
    hint = " (connection refused: was a service expected to still run, on a port environment/Dockerfile EXPOSEs?)"
    return hint if _REFUSED.search(output) else ""


def short_reason(summary: str, tail_lines: int = 3, width: int = 400) -> str:
    """A verdict's reason for one table cell: its first line and, when it carries the tests' or the
    solution's output, the last lines of that output (the cause: an assertion, a refused connection)."""
    if not summary:
        return ""
    head, _, rest = summary.partition("\n")
    lines = [ln.strip() for ln in rest.splitlines() if ln.strip() and not ln.startswith("(the subprocess")]
    out = head if not lines else f"{head} ... " + " / ".join(lines[-tail_lines:])
    return out if len(out) <= width else out[: width - 3] + "..."


async def check_one(bundle: Bundle, verifier, backend: str = "sandbox") -> tuple[str, str, str]:
    """What `tempering synth check` and examples/harbor/run.py say of one bundle: (verdict, stage, why).
    Static checks first (`rejected`, stage `static`), then, on the sandbox, whether it runs here
    (`needs docker` / `needs network`, stage `environment`), then gold verification (`accepted` or
    `rejected`, with the verdict's stage)."""
    from tempering.synth.checks import check_bundle

    if problems := check_bundle(bundle):
        return "rejected", "static", "\n".join(map(str, problems))
    if backend == "sandbox":
        try:
            local_image(bundle)
        except NeedsNetwork as e:
            return "needs network", "environment", str(e)
        except NeedsDocker as e:
            return "needs docker", "environment", str(e)
    v = await verifier.verify(bundle)
    return ("accepted" if v.accepted else "rejected"), v.stage, v.summary


MUTANTS = 8
"""Mutated reference outputs `synth check` runs the tests on, at most, per step."""


async def gold_steps(
    ws, bundle: Bundle, check_unsolved: bool = True, backend: str = "sandbox", mutants: int = MUTANTS
) -> Verdict:
    """The verification steps, on a `Workspace` or a `DockerWorkspace` (anything with `run_tests` and `solve`);
    on a `Workspace`, then the tests against up to `mutants` mutations of what the reference wrote."""
    wall = 0.0
    score = None
    hint = ""
    if not getattr(ws, "harbor_paths", True):
        hint = "\n(the subprocess sandbox backend keeps /app, /tests, /logs/verifier inside the job's folder: scripts "
        hint += "that name these paths instead of APP_DIR, TESTS_DIR, REWARD_FILE fail there; use bwrap)"
    for step in bundle.steps:
        at = f"step {step.name}: " if step.name else ""
        if check_unsolved:
            rewards, run = await ws.run_tests(step)
            wall += run.wall_s
            if rewards.values is None:
                msg = f"{at}before the solution ran, {rewards.error} (tests must write 0 on failure). "
                return Verdict(False, "unsolved", msg + f"Test output:\n{_tail(run.output)}{hint}", None, backend, wall)
            if rewards.score >= 1:
                msg = f"{at}the tests already pass before the solution ran: they do not check the task's outputs"
                return Verdict(False, "unsolved", msg, rewards.score, backend, wall)
        before = getattr(ws, "state", b"")
        if not step.solution.get("solve.sh", b"").strip():
            return Verdict(False, "solution", f"{at}no solution/solve.sh to verify with", None, backend, wall)
        together = isinstance(ws, Workspace)
        if together:  # one job: what the solution leaves running answers the tests
            run, rewards, test_run = await solve_then_test(ws, step)
        else:
            run = await ws.solve(step)
        wall += run.wall_s
        if run.exit_code != 0:
            why = "timed out" if run.exit_code == 124 else f"exited with {run.exit_code} ({run.status})"
            msg = f"{at}solution/solve.sh {why}. Output:\n{_tail(run.output)}{hint}"
            return Verdict(False, "solution", msg, None, backend, wall)
        if not together:
            rewards, test_run = await ws.run_tests(step)
        assert rewards is not None and test_run is not None  # the solution exited 0: its tests ran
        run = test_run
        wall += run.wall_s
        score = rewards.score
        if score is None or score < 1:
            got = rewards.error if score is None else f"the tests wrote reward {score:g} ({rewards.values})"
            refused = refused_connection(run.output)
            if refused and not getattr(ws, "keeps_services", False):
                refused += (
                    " (here the solution's processes end before the tests run: use bwrap or unshare on a root host)"
                )
            msg = f"{at}after the oracle solution ran, {got}{refused}. Test output:\n{_tail(run.output)}{hint}"
            return Verdict(False, "tests", msg, score, backend, wall)
        if mutants and isinstance(ws, Workspace):  # the state the reference left (a service it started is gone)
            accepted, spent = await accepted_mutant(ws, step, before, mutants)
            wall += spent
            if accepted:
                msg = f"{at}the tests also pass when {accepted}: they accept an answer the task did not ask for"
                return Verdict(False, "mutants", msg, score, backend, wall)
    return Verdict(True, "ok", "", score, backend, wall)


class SandboxVerifier:
    """Gold verification in tempering.sandbox, on an emulation of the bundle's environment."""

    backend = "sandbox"

    def __init__(self, sandbox=None, check_unsolved: bool = True):
        if sandbox is None:
            from tempering.sandbox import Sandbox

            sandbox = Sandbox(backend="auto")
        self.sandbox = sandbox
        self.check_unsolved = check_unsolved

    async def verify(self, bundle: Bundle) -> Verdict:
        try:
            ws = Workspace.for_bundle(self.sandbox, bundle)
        except NeedsDocker as e:
            return Verdict(
                False,
                "environment",
                f"the local sandbox cannot provide this environment: {e}; keep the Dockerfile to FROM python:3.12-slim "
                "(or ubuntu:24.04), WORKDIR /app, COPY and ENV, and the tests to what is installed, or verify with "
                "the Docker backend",
            )
        return await gold_steps(ws, bundle, self.check_unsolved, self.backend)


class DockerVerifier:
    """Gold verification in Docker: the same steps, in containers of the bundle's own image."""

    backend = "docker"

    def __init__(self, check_unsolved: bool = True):
        if why := docker_unreachable():
            raise UserError(
                f"no Docker engine is reachable ({why}). Start Docker or set DOCKER_HOST, or use "
                "the sandbox backend (--backend sandbox) for bundles it can emulate."
            )
        self.check_unsolved = check_unsolved

    async def verify(self, bundle: Bundle) -> Verdict:
        ws = DockerWorkspace(bundle)
        try:
            await ws.start()
            return await gold_steps(ws, bundle, self.check_unsolved, self.backend)
        except BuildFailed as e:
            return Verdict(False, "environment", str(e), backend=self.backend)
        finally:
            await ws.close()


def make_verifier(backend: str = "sandbox", sandbox=None, check_unsolved: bool = True):
    """`sandbox` (the local emulation) or `docker`."""
    if backend == "sandbox":
        return SandboxVerifier(sandbox, check_unsolved)
    if backend == "docker":
        return DockerVerifier(check_unsolved)
    raise UserError(f"unknown verification backend {backend!r}; use sandbox or docker")
