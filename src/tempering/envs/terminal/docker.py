"""The same workspace as `Workspace`, in Docker: for bundles whose environment the sandbox cannot emulate.

The state is an image: the environment is built (or pulled) once, each `run` is one container from
the current image, and a run that keeps its changes is committed as the next image. Tests run in a
throw-away container with /tests and /logs/verifier mounted, as Harbor mounts them; the oracle runs with
/solution mounted. Needs a reachable Docker engine (`docker_unreachable()` says why not).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from tempering.envs.terminal.bundle import Bundle, Step, write_bundle
from tempering.envs.terminal.workspace import DEFAULT_TIMEOUT_S, Rewards, Run, read_rewards, resolve_env
from tempering.errors import UserError


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


class BuildFailed(Exception):
    """The bundle's image could not be built or pulled (message: docker's output)."""


def _docker(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def _text(output: str | bytes | None) -> str:
    """What a timed-out run had printed: `TimeoutExpired` holds bytes even when the run was text=True."""
    return output.decode("utf-8", errors="replace") if isinstance(output, bytes) else output or ""


class DockerWorkspace:
    """A bundle's environment in Docker; the same `run_tests` / `solve` as the sandbox's `Workspace`."""

    def __init__(self, bundle: Bundle):
        if why := docker_unreachable():
            raise UserError(
                f"no Docker engine is reachable ({why}). Start Docker or set DOCKER_HOST, or use the "
                "sandbox backend for bundles whose environment it can emulate."
            )
        cfg = bundle.config.environment
        if cfg.network_mode == "allowlist":
            raise UserError(
                f"{bundle.name}: network_mode = 'allowlist' needs Harbor's network policy; run it with Harbor"
            )
        self.bundle = bundle
        self.network = ["--network", "none"] if cfg.network_mode == "no-network" else []
        self.resources = [f"--memory={cfg.memory_mb}m"] if cfg.memory_mb else []
        self.resources += [f"--cpus={cfg.cpus}"] if cfg.cpus else []
        self.workdir = ["--workdir", cfg.workdir] if cfg.workdir else []
        self.env = resolve_env(cfg.env, f"{bundle.name}: [environment] env")
        self.solution_env = resolve_env(bundle.config.solution.env, f"{bundle.name}: [solution] env")
        self.image = ""
        self._made: list[str] = []

    def _build(self) -> None:
        cfg = self.bundle.config.environment
        if cfg.docker_image and "environment/Dockerfile" not in self.bundle.files:
            have = _docker("image", "inspect", cfg.docker_image)
            if have.returncode != 0:
                pull = _docker("pull", cfg.docker_image, timeout=cfg.build_timeout_sec)
                if pull.returncode != 0:
                    raise BuildFailed(f"docker pull {cfg.docker_image} failed:\n{pull.stderr[-1500:]}")
            self.image = cfg.docker_image
            return
        tag = f"tempering-task/{self.bundle.name}:{self.bundle.digest()}"
        with tempfile.TemporaryDirectory(prefix="tempering-docker-") as tmp:
            root = write_bundle(self.bundle, Path(tmp) / self.bundle.name)
            try:
                build = _docker("build", "-q", "-t", tag, str(root / "environment"), timeout=cfg.build_timeout_sec)
            except subprocess.TimeoutExpired:
                raise BuildFailed(f"docker build took longer than {cfg.build_timeout_sec:g} s") from None
        if build.returncode != 0:
            raise BuildFailed(f"docker build failed:\n{build.stderr[-1500:]}")
        self.image = tag

    async def start(self) -> None:
        """Build or pull the image (BuildFailed says why it could not)."""
        await asyncio.to_thread(self._build)

    def _run(
        self, script: str, timeout_s: float, mounts: dict[str, dict[str, bytes]], env: dict[str, str], keep: bool
    ) -> Run:
        name = f"tempering-{uuid.uuid4().hex[:12]}"
        with tempfile.TemporaryDirectory(prefix="tempering-docker-run-") as tmp:
            args = []
            for inner, files in mounts.items():
                host = Path(tmp) / inner.strip("/").replace("/", "_")
                host.mkdir(parents=True)
                for rel, data in files.items():
                    (host / rel).parent.mkdir(parents=True, exist_ok=True)
                    (host / rel).write_bytes(data)
                args += ["-v", f"{host}:{inner}" + (":ro" if inner != "/logs/verifier" else "")]
            envs = [a for k, v in {**self.env, **env}.items() for a in ("-e", f"{k}={v}")]
            argv = ["run", "--name", name, *self.network, *self.resources, *self.workdir, *args, *envs]
            argv += ["--entrypoint", "bash", self.image, "-c", script]
            t0 = time.monotonic()
            try:
                proc = _docker(*argv, timeout=timeout_s)
                code, out = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as e:
                _docker("kill", name)
                code, out = 124, f"{_text(e.stdout)}{_text(e.stderr)}\n[timed out after {timeout_s:g} s]"
            try:
                if keep:  # like the sandbox, a run that timed out keeps its changes up to then
                    tag = f"tempering-state/{name}"
                    if _docker("commit", name, tag).returncode == 0:
                        self.image = tag
                        self._made.append(tag)
            finally:
                _docker("rm", "-f", name)
            logs = Path(tmp) / "logs_verifier"
            outputs = (
                {f"logs/verifier/{f.name}": f.read_bytes() for f in logs.glob("reward.*")} if logs.is_dir() else {}
            )
            status = "ok" if code == 0 else ("timeout" if code == 124 else "nonzero_exit")
            return Run(code, out, status, outputs, time.monotonic() - t0)

    async def run(self, script: str, timeout_s: float, env: dict[str, str] | None = None) -> Run:
        """Run `script` with bash in the working folder, keeping what it changes."""
        return await asyncio.to_thread(self._run, script, timeout_s, {}, env or {}, True)

    async def run_tests(self, step: Step) -> tuple[Rewards, Run]:
        """`bash /tests/test.sh` in a throw-away container of the current state."""
        if "test.sh" not in step.tests:
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        env = {"TEST_DIR": "/tests", **resolve_env(step.verifier_env, f"{self.bundle.name}: [verifier] env")}
        mounts = {"/tests": step.tests, "/logs/verifier": {}}
        run = await asyncio.to_thread(self._run, "bash /tests/test.sh", step.verifier_timeout_s, mounts, env, False)
        rewards = read_rewards(
            run.outputs.get("logs/verifier/reward.txt"), run.outputs.get("logs/verifier/reward.json")
        )
        if rewards.values is None and run.exit_code == 124:
            rewards.error += f" (test.sh hit its {step.verifier_timeout_s:g} s limit)"
        return rewards, run

    async def solve(self, step: Step) -> Run:
        """`bash /solution/solve.sh`, keeping what it changes."""
        timeout = step.agent_timeout_s or DEFAULT_TIMEOUT_S
        mounts = {"/solution": step.solution}
        return await asyncio.to_thread(self._run, "bash /solution/solve.sh", timeout, mounts, self.solution_env, True)

    async def close(self) -> None:
        """Remove the images this workspace committed."""
        for tag in self._made:
            await asyncio.to_thread(_docker, "rmi", "-f", tag)
        self._made.clear()
