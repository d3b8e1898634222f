"""The Docker gold verifier runs the same steps as the sandbox one, unsolved check first: the docker
commands it issues, against a scripted engine (no Docker needed). The real engine's run is
tests/envs/test_terminal_docker.py."""

import asyncio
import subprocess
from pathlib import Path

import pytest

import tempering.envs.terminal.docker as docker_ws
import tempering.synth.verify as verify
from tempering.envs.terminal import SAMPLES, read_bundle
from tempering.sandbox import Sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "bundles"
ISOLATED = [b for b in ("bwrap", "unshare") if b in Sandbox.available_backends()]


class ScriptedEngine:
    """Answers `docker ...` calls: test.sh writes reward 1 once solve.sh has run (or always, if `lax`)."""

    def __init__(self, lax: bool):
        self.lax, self.solved, self.scripts = lax, False, []

    def __call__(self, *argv: str, timeout=None) -> subprocess.CompletedProcess:
        if argv[0] == "run":
            script = argv[-1]
            self.scripts.append(script)
            if script == "bash /solution/solve.sh":
                self.solved = True
            if script == "bash /tests/test.sh":
                logs = next(a.split(":")[0] for a in argv if a.endswith(":/logs/verifier"))
                Path(logs, "reward.txt").write_text("1" if self.lax or self.solved else "0")
        return subprocess.CompletedProcess(list(argv), 0, "", "")


def scripted_docker(monkeypatch, lax: bool) -> ScriptedEngine:
    engine = ScriptedEngine(lax)
    monkeypatch.setattr(docker_ws, "_docker", engine)
    monkeypatch.setattr(docker_ws, "docker_unreachable", lambda: None)
    monkeypatch.setattr(verify, "docker_unreachable", lambda: None)
    return engine


def run_docker_verifier(monkeypatch, folder: Path, lax: bool) -> tuple[verify.Verdict, list[str]]:
    engine = scripted_docker(monkeypatch, lax)
    return asyncio.run(verify.make_verifier("docker").verify(read_bundle(folder))), engine.scripts


def test_docker_verifier_refuses_tests_that_pass_before_the_solution(monkeypatch):
    v, scripts = run_docker_verifier(monkeypatch, EXAMPLES / "lax-tests", lax=True)
    assert (v.accepted, v.stage, v.backend) == (False, "unsolved", "docker")
    assert "already pass" in v.summary
    assert scripts == ["bash /tests/test.sh"]  # the solution never ran


def test_docker_verifier_runs_tests_solution_tests_per_step(monkeypatch):
    v, scripts = run_docker_verifier(monkeypatch, SAMPLES / "csv-revenue", lax=False)
    assert (v.accepted, v.stage, v.reward) == (True, "ok", 1.0), v.summary
    assert scripts == ["bash /tests/test.sh", "bash /solution/solve.sh", "bash /tests/test.sh"]


@pytest.mark.skipif(not ISOLATED, reason="the bundle's scripts name /tests: they need an isolating sandbox backend")
def test_both_backends_give_the_same_verdict_on_lax_tests(monkeypatch):
    """Tests that pass on the untouched environment: the sandbox and the Docker path refuse them alike."""
    good = read_bundle(SAMPLES / "csv-revenue")
    lax = type(good)(good.name, good.instruction, good.config, good.files | {"tests/test_outputs.py": b"pass\n"})
    local = asyncio.run(verify.SandboxVerifier(Sandbox(backend=ISOLATED[0], concurrency=2)).verify(lax))
    scripted_docker(monkeypatch, lax=True)
    docker = asyncio.run(verify.DockerVerifier().verify(lax))
    assert (local.accepted, local.stage, local.summary) == (docker.accepted, docker.stage, docker.summary)
    assert (local.stage, local.backend, docker.backend) == ("unsolved", "sandbox", "docker")
