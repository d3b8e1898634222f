"""The kernel-sketch family in agent mode: one tool call per turn, only a submission is rewarded."""

import asyncio

import pytest

from tempering.envs.kernels.agent import SketchAgentFamily
from tempering.envs.kernels.verifier import KernelResult
from tempering.errors import UserError


class StubVerifier:
    """Every kernel correct at 0.5x eager and 0.4x torch.compile (CUDA Agent reward 1); counts calls."""

    def __init__(self):
        self.calls = 0

    async def verify(self, problem, text):
        self.calls += 1
        return KernelResult(
            problem=problem.name,
            backend="c",
            status="correct",
            compiled=True,
            correct=True,
            speedup_eager=0.5,
            speedup_compile=0.4,
            cuda_agent_reward=1,
        )


def family(**kw):
    fam = SketchAgentFamily(problem_names=["01_relu", "14_row_sum", "13_scale_shift"], **kw)
    fam._verifier = StubVerifier()
    return fam


def test_tasks_prompt_for_a_tool_call_and_answer_with_one():
    fam = family(answer_keys=("vec",))
    tasks = fam.tasks("train", 6, seed=1)
    assert {t.meta["problem"].name for t in tasks} <= {"14_row_sum", "13_scale_shift"}
    t = next(t for t in tasks if "row_sum" in t.id)
    assert t.prompt == "agent row_sum reduce loops=rc|cr tools=verify|profile|submit:"
    tool, _, sketch = t.answer.partition(" ")
    assert tool in ("profile", "submit") and sketch.startswith("order=") and sketch.split()[1].startswith("vec=")
    assert len(sketch.split()) == 2
    assert {t.meta["problem"].name for t in fam.tasks("heldout", 3)} == {"01_relu"}


def test_only_a_submission_ends_the_episode_and_is_rewarded():
    fam = family()
    env = fam.make_env(fam.tasks("train", 1)[0])

    def step(a):
        return asyncio.run(env.step(a))

    r = step("compile vec=1")
    assert (r.status, r.score, r.done) == ("tool_error", -1.0, False) and "unknown tool" in r.feedback
    r = step("profile vec=7")
    assert (r.status, r.score, r.done) == ("parse_error", -1.0, False) and "vec=7" in r.feedback
    r = step("verify vec=1")
    assert (r.status, r.score, r.done, r.feedback) == ("correct", -1.0, False, "verified")
    r = step("profile vec=1\nignored second line")
    assert (r.score, r.done, r.feedback) == (-1.0, False, "0.50x eager 0.40x compile reward 1")
    r = step("submit vec=1")
    assert (r.score, r.done, r.success) == (1.0, True, False)  # success needs reward >= success_reward (2)
    assert fam.verifier.calls == 1  # the family's memoisation: one verification of the one kernel
    fam.success_reward = 1
    assert asyncio.run(fam.make_env(fam.tasks("train", 1)[0]).step("submit vec=1")).success


def test_bad_arguments_are_refused():
    with pytest.raises(UserError, match="answer_keys"):
        SketchAgentFamily(answer_keys=("speed",))
    with pytest.raises(UserError, match="no problem named 99_x"):
        SketchAgentFamily(problem_names=["99_x"]).problems()
