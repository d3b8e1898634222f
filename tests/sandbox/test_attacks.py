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


SECOND_RED_TEAM = {  # each class the second red team found, at least twice, written differently
    "a binary planted on the job's path": ("plant_bind_parent", "plant_on_path"),
    "usage that hides from the host": ("usage_grandchild", "usage_outlives"),
    "a forged limit status": ("forged_exit_code", "forged_signal_xcpu", "forged_signal_xfsz"),
    "a channel between concurrent jobs": ("lock_channel", "flock_channel"),
    "cache poisoning": ("cache_limit_poison", "cache_flaky_poison"),
    "an inode flood and a host stalled by its removal": ("inode_flood", "inode_flood_links", "deep_tree"),
    "cleanup that follows a job's link": ("cleanup_symlink", "cleanup_symlink_dirs"),
    "nested user namespaces": ("nested_userns", "nested_userns_tools"),
}


def test_every_class_the_second_red_team_found_has_two_attacks_written_differently():
    by_name = {a.name: a for a in ATTACKS}
    for what, names in SECOND_RED_TEAM.items():
        assert set(names) <= set(by_name), what
        programs = {by_name[n].code + "".join(by_name[n].files.values()) + repr(by_name[n].drive) for n in names}
        assert len(programs) == len(names) >= 2, what
