"""The code judge's attack suite through `CodeEnv.step` (what `tempering sandbox attacks` runs for it)."""

import asyncio

import pytest

from tempering.envs.code import attacks
from tempering.sandbox import Sandbox
from tempering.sandbox import attacks as sandbox_attacks


@pytest.fixture(scope="module")
def sb():
    return Sandbox(backend=Sandbox.available_backends()[0], concurrency=2)


def test_each_class_has_two_variants_and_both_kinds_of_control():
    classes: dict[str, int] = {}
    for case in attacks.CASES:
        classes[case.klass] = classes.get(case.klass, 0) + 1
    assert all(n >= 2 for n in classes.values()), classes
    assert {c.contained_by for c in attacks.CASES} == {"judge", "sandbox"}
    controls = {c.must for c in attacks.CASES if c.klass == "control"}
    assert controls == {"pass", "fail"}
    names = {a.name for a in sandbox_attacks.suite()}
    assert {c.name for c in attacks.CASES} <= names  # part of `tempering sandbox attacks`


@pytest.mark.parametrize(
    "name",
    [
        "code_free_names_fake_math_class",
        "code_hidden_input_memory_files",
        "code_hidden_status_error_kind",
        "code_public_setup_process_memory",
        "code_feedback_text_surrogate_error",
        "code_judge_side_names_setup_helper_rebound",
        "code_judge_side_names_reference_helper_redefined",
        "code_public_setup_setup_definition_constants",
    ],
)
def test_the_classes_that_got_through_before_are_contained(sb, name):
    case = next(c for c in attacks.CASES if c.name == name)
    assert asyncio.run(attacks.run_case(sb, case)) == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["code_verdict_oracle_learn_by_arguments", "code_judge_stall_fraction_forged"])
def test_an_answer_cannot_learn_from_its_calls_or_stall_the_judge(sb, name):
    case = next(c for c in attacks.CASES if c.name == name)
    assert asyncio.run(attacks.run_case(sb, case)) == ""


BACKENDS = sandbox_attacks.isolated_backends()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS[:1])
def test_every_attack_the_judge_must_contain_is_contained_and_every_control_scores_as_it_must(backend):
    """Every case on the first isolating backend, the kernel-state channels included (contained wherever
    the sandbox reports no gap); the costlier engines run one case of each class (the next test)."""
    verdicts = asyncio.run(attacks.run_all(backend))
    judged = {c.name for c in attacks.CASES if c.contained_by == "judge"}
    assert {k: v for k, v in verdicts.items() if v and k in judged} == {}
    s = attacks.summary(verdicts)
    assert s["escaped"] == 0 and s["controls"]["honest_right_passed"] == s["controls"]["honest_right"]
    assert s["escaped_sandbox_level"] == sum(1 for k, v in verdicts.items() if v and k not in judged)
    sandbox = Sandbox(backend=backend, concurrency=2)
    channels = [a.name for a in attacks.ATTACKS if a.name not in judged and not sandbox_attacks.why_not_run(sandbox, a)]
    assert {k: verdicts[k] for k in channels if verdicts[k]} == {}


def _one_of_each_class() -> list:
    """The first case of each class the judge contains, and the first right and wrong control of each
    problem format (HumanEval, MBPP, LiveCodeBench)."""
    picked: dict[tuple, object] = {}
    for c in attacks.CASES:
        if c.contained_by == "judge":
            key = (c.klass, c.must, c.problem.split("_")[0]) if c.klass == "control" else (c.klass,)
            picked.setdefault(key, c)
    return list(picked.values())


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_one_attack_of_each_class_the_judge_must_contain_is_contained_on_the_other_backends(backend):
    """What the judge contains does not depend on the engine under it, and each case on gVisor or unshare
    costs several times a bwrap one: here one case of each class and the controls of each format; the
    first backend runs every case (the test above), `tempering sandbox attacks` every case on every one."""
    sandbox = Sandbox(backend=backend, concurrency=2)
    cases = _one_of_each_class()

    async def go():
        return await asyncio.gather(*(attacks.run_case(sandbox, c) for c in cases))

    verdicts = dict(zip((c.name for c in cases), asyncio.run(go())))
    assert {k: v for k, v in verdicts.items() if v} == {}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS[1:])
@pytest.mark.parametrize("name", [c.name for c in attacks.CASES if c.contained_by == "sandbox"])
def test_channels_through_the_kernel_are_contained_by_the_sandbox(backend, name):
    """Contained wherever the sandbox reports no gap in the kernel state jobs share (a root host); on the
    first backend, the first test checks them."""
    sandbox = Sandbox(backend=backend, concurrency=2)
    attack = next(a for a in attacks.ATTACKS if a.name == name)
    if why := sandbox_attacks.why_not_run(sandbox, attack):
        pytest.skip(why)
    case = next(c for c in attacks.CASES if c.name == name)
    assert asyncio.run(attacks.run_case(sandbox, case)) == ""


def test_the_host_holds_at_most_a_bounded_backlog_of_a_flooding_candidate():
    from tempering.envs.code import channel
    from tempering.sandbox import Job

    class Flooding:  # a candidate job that writes 24 MiB of lines, unasked, and then waits
        async def run(self, job, feed=None, on_stdout=None):
            for _ in range(512):
                on_stdout(b"{}\n" * (1 << 14))
            await asyncio.sleep(60)

    async def main():
        backlog = channel._Backlog()
        await asyncio.wait_for(channel._serve(Flooding(), Job(cmd=["true"]), 7, channel._Inbox(), backlog), 10)
        return backlog

    backlog = asyncio.run(main())
    items = [backlog.get_nowait() for _ in range(backlog.qsize())]
    assert len(items) == 2  # its greeting, then how it ended: nothing of the flood (it was sent nothing)
    assert items[-1].startswith(b"E 7 ") and b'"too_long": "flood"' in items[-1]
