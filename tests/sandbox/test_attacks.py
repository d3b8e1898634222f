"""The adversarial suite on every isolating backend here: each attack is contained and the host is
unaffected; through the paths that judge terminal tasks, every hostile answer is scored `incorrect` and
the controls come out as they must. The host's `subprocess` backend is never attacked (an attack there
would do its damage).

The attacks themselves live in tempering.sandbox.attacks and the modules that register their paths'
cases (also runnable as `tempering sandbox attacks`), so that this suite, the results' counts and
docs/sandbox.md speak of the same list. Here every job-API attack runs on every backend, and every
terminal and agent case on the first isolating backend (the command and the results run them all on
every backend).
"""

import asyncio
import importlib

import pytest

from tempering.sandbox import Sandbox, attacks
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


def _with_a_short_verifier_limit(case):
    """The fifo attack is judged when test.sh hits the task's verifier limit (20 s in the suite's task):
    here the task sets 2 s, so the case waits 2 s and is judged the same way."""
    from tempering.envs.terminal import attacks as terminal

    if case.name != "fifo_answer_and_reward_folder":
        return case
    script = dict(terminal.ATTACKS[case.cls])[case.name]
    toml = terminal.TASK["task.toml"].replace("[verifier]\ntimeout_sec = 20.0", "[verifier]\ntimeout_sec = 2.0")
    assert toml != terminal.TASK["task.toml"], "the suite's task no longer sets the verifier limit this test shortens"
    return terminal._case(case.cls, case.name, case.path, script, case.kind, {"task.toml": toml})


PATH_CASES = [  # the judge's: test_code_attacks
    _with_a_short_verifier_limit(c) for c in attacks.cases() if c.path not in ("job API", "code judge")
]


@pytest.mark.slow
@pytest.mark.parametrize("case", PATH_CASES, ids=[f"{c.path}-{c.name}" for c in PATH_CASES])
def test_case_through_a_path_that_judges(case):
    if not isolated_backends():
        pytest.skip("no isolating backend here")
    verdict, why = asyncio.run(attacks.run_case(Sandbox(backend=isolated_backends()[0], concurrency=2), case))
    if why:
        pytest.skip(why)
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
    "fanotify between jobs": ("fanotify_channel", "fanotify_channel_perl"),
    "io_uring, userfaultfd, perf events, secret memory": ("kernel_interfaces", "kernel_interfaces_perl"),
}


def test_every_class_the_second_red_team_found_has_two_attacks_written_differently():
    by_name = {a.name: a for a in ATTACKS}
    for what, names in SECOND_RED_TEAM.items():
        assert set(names) <= set(by_name), what
        programs = {by_name[n].code + "".join(by_name[n].files.values()) + repr(by_name[n].drive) for n in names}
        assert len(programs) == len(names) >= 2, what


def test_every_terminal_class_has_two_variants_on_every_terminal_path_and_controls():
    from tempering.envs.terminal.attacks import ATTACKS as TERMINAL

    terminal_paths = {"terminal: services kept", "terminal: separate jobs", "agent: session", "agent: per command"}
    by_class: dict = {}
    for c in PATH_CASES:
        by_class.setdefault((c.cls, c.kind), {}).setdefault(c.path, set()).add(c.name)
    for cls, variants in TERMINAL.items():
        assert len({script for _, script in variants}) == len(variants) >= 2, cls
        assert {p: len(n) for p, n in by_class[(cls, "attack")].items()} == {p: len(variants) for p in terminal_paths}
    for kind in ("honest_right", "honest_wrong"):
        assert {p for (cls, k), paths in by_class.items() if k == kind for p in paths} == terminal_paths


def test_the_results_matrix_counts_what_got_out():
    run = lambda cls, name, path, kind, verdict: {
        "class": cls,
        "name": name,
        "path": path,
        "kind": kind,
        "verdict": verdict,
    }
    summaries = {
        "bwrap": {"cases": [
            run("c", "a1", "job API", "attack", "contained"),
            run("c", "a2", "job API", "attack", "the secret reached the job"),
            run("c", "a1", "agent: session", "attack", "not run: no shared network"),
            run("ok", "r", "agent: session", "honest_right", "contained"),
            run("no", "w", "agent: session", "honest_wrong", "the verdict was correct, wanted incorrect"),
        ]},
        "gvisor": {"cases": [run("c", "a1", "job API", "attack", "contained")]},
    }  # fmt: skip
    m = attacks.matrix(summaries)
    assert m["attacks"]["c"]["bwrap"] == {
        "job API": "a2: the secret reached the job",
        "agent: session": "not run: no shared network",
    }
    assert m["attacks"]["c"]["gvisor"] == {"job API": "contained"}
    assert m["escaped"] == 1 and m["controls"] == {"honest_right_passed": "1/1", "honest_wrong_rejected": "0/1"}


def test_providers_are_registered_by_module(monkeypatch):
    monkeypatch.setattr(attacks, "PROVIDERS", dict(attacks.PROVIDERS))
    attacks.register("terminal again", "tempering.envs.terminal.attacks")
    again = len(importlib.import_module("tempering.envs.terminal.attacks").CASES)
    assert len(attacks.cases()) == len(attacks.job_cases()) + len(attacks.path_suite_cases()) + len(PATH_CASES) + again
    assert {c.path for c in attacks.cases(["agent: session"])} == {"agent: session"}
