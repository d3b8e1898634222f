"""The adversarial suite on every isolating backend here: each attack is contained and the host is
unaffected. The host's `subprocess` backend is never attacked (an attack there would do its damage).

The attacks themselves live in tempering.sandbox.attacks (also runnable as a command), so that this
suite, the benchmark's containment count and docs/sandbox.md speak of the same list.
"""

import asyncio

import pytest

from tempering.sandbox import Sandbox
from tempering.sandbox.attacks import ATTACKS, isolated_backends, run_attack, why_not_run

CASES = [pytest.param(b, a, id=f"{b}-{a.name}") for b in isolated_backends() for a in ATTACKS]


@pytest.mark.slow
@pytest.mark.parametrize("backend, attack", CASES)
def test_attack_is_contained(backend, attack):
    sandbox = Sandbox(backend=backend, concurrency=2)
    why = why_not_run(sandbox, attack)
    if why:
        pytest.skip(f"{backend} cannot contain this here: {why}")
    verdict = asyncio.run(run_attack(sandbox, attack))
    assert verdict == "", verdict


def test_every_attack_the_issue_names_is_in_the_suite():
    names = {a.name for a in ATTACKS}
    assert {
        "infinite_loop",
        "fork_bomb",
        "memory_bomb",
        "disk_fill",
        "output_flood",
        "network",
        "env_secret",
        "write_project",
        "write_other_workdir",
        "write_host_tmp",
        "other_workdir",
        "kill_parent",
        "daemon",
        "ignore_sigterm",
        "raise_rlimits",
        "status_channel",
        "hidden_storage",
        "keyring",
        "readonly_parent",
    } <= names
