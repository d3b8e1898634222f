"""The Docker workspace runs the same verification steps as the sandbox, on the task's own image.

Needs a Docker engine that can build images (and pull python:3.12-slim and ubuntu:24.04); skipped, with
the reason, where none answers."""

import asyncio
from pathlib import Path

import pytest

from tempering.envs.terminal import SAMPLES, read_bundle
from tempering.envs.terminal.docker import docker_unreachable

WHY = docker_unreachable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=f"no Docker engine here: {WHY}")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "bundles"


def verify(folder):
    from tempering.synth.verify import DockerVerifier

    return asyncio.run(DockerVerifier().verify(read_bundle(folder)))


@pytest.mark.parametrize("folder", [EXAMPLES / "jq-filter", EXAMPLES / "prebuilt-image", SAMPLES / "notes-steps"])
def test_docker_verifies_what_the_sandbox_cannot(folder):
    v = verify(folder)
    assert (v.accepted, v.stage, v.backend) == (True, "ok", "docker"), v.summary


def test_docker_runs_the_unsolved_check_too():
    v = verify(EXAMPLES / "lax-tests")
    assert (v.accepted, v.stage) == (False, "unsolved") and "already pass" in v.summary
