"""task.family=verifiers against the verifiers package itself: a taskset written in its own form,
scored by the package's own `Task.score`."""

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
import time

import pytest

if importlib.util.find_spec("verifiers") is None:  # found, not imported: collection stays cheap
    pytest.skip("verifiers is not installed", allow_module_level=True)

from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.rollout.engine import _step

TASKSET = '''
"""Sums in verifiers' own form: typed task data, weighted @vf.reward methods, a taskset."""
import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def digits(self, task, trace) -> float:
        """Partial credit: the share of the answer's digits in the right place."""
        got = trace.last_reply
        return sum(a == b for a, b in zip(got, task.answer)) / max(len(got), len(task.answer), 1)

    @vf.reward(weight=-0.1, priority=1)
    async def style(self, trace):
        """Keyed scores: one reward per key, each with this function's weight."""
        reply = trace.last_reply
        return {"length": min(len(reply), 10) / 10, "spaces": float(" " in reply)}


class SumConfig(vf.TasksetConfig):
    n: int = 60
    start: int = 10
    system: str | None = None


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.n):
            a, b = self.config.start + i % 9, 3 + i // 9
            yield SumTask(SumData(prompt=f"{a}+{b}=", answer=str(a + b), system_prompt=self.config.system), self.config.task)


__all__ = ["SumTaskset"]
'''

LOADER = '''
import verifiers.v1 as vf


def load_environment(n: int = 60, start: int = 10):
    """verifiers' own loader: the taskset package named by id, as its eval command builds it."""
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": "sum_taskset", "n": n, "start": start}}))
'''


@pytest.fixture
def envdir(tmp_path, monkeypatch):
    (tmp_path / "sum_taskset.py").write_text(TASKSET)
    (tmp_path / "sum_env.py").write_text(LOADER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for m in [m for m in sys.modules if m.startswith(("sum_", "bad_", "tool_", "judge_", "multi_", "rt_"))]:
        del sys.modules[m]


def _package_reward(vf_task, messages):
    """The package's own scoring of a conversation: its Trace, `Task.score`, `trace.reward`."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    nodes = [
        MessageNode(
            parent=i - 1 if i else None,
            message=kinds[m["role"]](content=m["content"]),
            sampled=m["role"] == "assistant",
        )
        for i, m in enumerate(messages)
    ]
    trace = vf.Trace(
        task=TraceTask(type=type(vf_task).__name__, data=vf_task.data, key=vf_task.key, hash=vf_task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
    )
    asyncio.run(vf_task.score(trace))
    return trace


def _answers(right):
    return [right, f" {right} ", right + "0", right[:-1], right[::-1], "7", f"{right} {right}", "", "x" * 12]


TASKSET_LOADER = """

def load_environment(n: int = 60):
    \"\"\"A loader returning the taskset itself.\"\"\"
    return SumTaskset(SumConfig(n=n))
"""


@pytest.mark.parametrize("env", ["sum_env", "sum_taskset", "sum_ts_loader"])
def test_scores_equal_the_packages_task_score(envdir, env):
    (envdir / "sum_ts_loader.py").write_text(TASKSET + TASKSET_LOADER)
    fam = make_family("verifiers", env=env, args={"n": 30})
    n = partial = 0
    for t in fam.split["train"] + fam.split["heldout"]:
        vf_task = fam.vf_tasks[t.id]
        for a in _answers(vf_task.data.answer):
            res = asyncio.run(fam.make_env(t).step(a))
            trace = _package_reward(
                vf_task, [{"role": "user", "content": t.prompt}, {"role": "assistant", "content": a}]
            )
            assert res.score == trace.reward, (t.id, a)
            assert res.info["rewards"] == {k: r.score for k, r in trace.rewards.items()}
            assert res.success == (res.score >= 1.0)
            n += 1
            partial += 0 < res.info["rewards"]["digits"] < 1
    assert n >= 200 and partial > 0
    assert set(res.info["rewards"]) == {"correct", "digits", "length", "spaces"}


def test_second_turn_is_scored_on_the_whole_conversation(envdir):
    fam = make_family("verifiers", env="sum_taskset", args={"n": 40, "system": "Answer with the sum only."})
    t = fam.split["train"][0]
    vf_task = fam.vf_tasks[t.id]
    assert [m["role"] for m in t.prompt.messages] == ["system", "user"]  # a chat prompt
    env = fam.make_env(t)
    first = asyncio.run(env.step("1"))
    assert not first.success and first.status == "incorrect" and "needs 1" in first.feedback
    second = asyncio.run(env.step(vf_task.data.answer))
    msgs = [*t.prompt.messages, {"role": "assistant", "content": "1"}, {"role": "user", "content": first.feedback}]
    msgs.append({"role": "assistant", "content": vf_task.data.answer})
    assert second.success and second.score == _package_reward(vf_task, msgs).reward


def test_heldout_split_never_reaches_training(envdir):
    fam = make_family("verifiers", env="sum_taskset", args={"n": 200})
    train = {fam.vf_tasks[t.id].key for t in fam.split["train"]}
    held = {fam.vf_tasks[t.id].key for t in fam.split["heldout"]}
    assert len(train) + len(held) == 200 and held and not train & held
    assert fam.split_size("heldout") == len(held) and 5 < len(held) < 40
    own = make_family("verifiers", env="sum_taskset", args={"n": 30}, heldout_args={"n": 5})  # the first 5 overlap
    assert own.split_size("heldout") == 5 and own.split_size("train") == 25
    assert {t.prompt for t in own.tasks("train", 25)}.isdisjoint(t.prompt for t in own.tasks("heldout", 5))


def test_a_raising_reward_names_the_function_and_the_users_line(envdir):
    (envdir / "bad_taskset.py").write_text(
        TASKSET.replace("SumTaskset", "BadTaskset").replace(
            "        return float(trace.last_reply == task.answer)",
            "        return float(trace.last_reply == task.answer) / len(trace.last_reply)",
        )
    )
    fam = make_family("verifiers", env="bad_taskset", args={"n": 40})
    t = fam.split["train"][0]
    assert asyncio.run(fam.make_env(t).step("12")).status in ("correct", "incorrect")
    with pytest.raises(UserError) as err:
        asyncio.run(fam.make_env(t).step(""))
    msg = str(err.value)
    assert "verifiers reward SumTask.correct raised ZeroDivisionError" in msg
    assert "bad_taskset.py:" in msg and "in correct: return float(trace.last_reply == task.answer) / len(" in msg


GAME = '''
class GuessConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    tries: int = 3


class GuessGame(vf.Env[GuessConfig]):
    """A multi-turn environment in verifiers' form: its run() plays the exchange with the seat."""

    async def run(self, task, agents):
        target = int(task.data.answer)
        async with agents.player.interaction(task) as it:
            segment, tries = await it.turn(), 1
            while not segment.terminated and segment.last_reply != task.data.answer and tries < self.config.tries:
                try:
                    hint = "higher" if int(segment.last_reply) < target else "lower"
                except ValueError:
                    hint = "a number, please"
                segment, tries = await it.turn(hint), tries + 1
        it.trace.record_reward("solved", float(segment.last_reply == task.data.answer), 2.0)
        it.trace.record_reward("tries", tries / self.config.tries, -0.5)


__all__ = ["SumTaskset", "GuessGame"]
'''


def _game(answers, task):
    """The game's score by hand: solved (x2), the share of tries used (x-0.5) and, on the last reply, the
    task's own rewards (correct x1, digits x0.5, length and spaces x-0.1)."""
    last, want = answers[-1].strip(), task.data.answer
    digits = sum(a == b for a, b in zip(last, want)) / max(len(last), len(want), 1)
    own = float(last == want) + 0.5 * digits - 0.1 * (min(len(last), 10) / 10 + float(" " in last))
    return 2.0 * float(last == want) - 0.5 * len(answers) / 3 + own


def test_a_multi_turn_environment_runs_its_own_exchange_with_the_policy_in_its_seat(envdir):
    (envdir / "sum_game.py").write_text(TASKSET + GAME)
    fam = make_family("verifiers", env="sum_game", args={"n": 40})
    assert fam.feedback_template == "\n{feedback}\n"
    for t in fam.split["train"][:6]:
        vf_task = fam.vf_tasks[t.id]
        right = vf_task.data.answer
        low, high = str(int(right) - 1), str(int(right) + 5)
        for answers in ([right], [low, right], [high, "x", right], [low, high, low], ["x", "y", " " + right]):

            async def play(answers=answers):
                env = fam.make_env(t)
                out = [await env.reset()]
                for a in answers:
                    out.append(await env.step(a))
                await env.close()
                return out

            first, *results = asyncio.run(play())
            assert first == t.prompt == vf_task.data.prompt
            assert all(r.status == "step" and not r.done for r in results[:-1]) and results[-1].done
            hints = ["higher" if a == low else "lower" if a == high else "a number, please" for a in answers[:-1]]
            assert [r.feedback for r in results[:-1]] == hints
            assert results[-1].score == pytest.approx(_game(answers, vf_task), abs=1e-12)
            assert results[-1].success == (answers[-1].strip() == right)
            assert set(results[-1].info["rewards"]) == {"solved", "tries", "correct", "digits", "length", "spaces"}


def test_an_environment_whose_run_asks_its_seat_for_one_answer(envdir):
    (envdir / "sum_once.py").write_text(
        TASKSET
        + textwrap.dedent(
            """
            class OnceConfig(vf.EnvConfig):
                solver: vf.AgentConfig = vf.AgentConfig()

            class Once(vf.Env[OnceConfig]):
                async def run(self, task, agents):
                    await agents.solver.run(task)

            __all__ = ["SumTaskset", "Once"]
            """
        )
    )
    fam = make_family("verifiers", env="sum_once", args={"n": 40})
    t = fam.split["train"][0]
    vf_task = fam.vf_tasks[t.id]

    async def play(answer):
        env = fam.make_env(t)
        assert await env.reset() == t.prompt
        res = await env.step(answer)
        await env.close()
        return res

    for a in (vf_task.data.answer, "1", " 12 "):
        res = asyncio.run(play(a))
        want = _package_reward(vf_task, [{"role": "user", "content": t.prompt}, {"role": "assistant", "content": a}])
        assert res.done and res.score == want.reward and res.success == (a == vf_task.data.answer)


def test_a_multi_turn_environment_that_raises_is_an_env_error_naming_the_line(envdir):
    (envdir / "sum_crash.py").write_text(TASKSET + GAME.replace('hint = "a number, please"', 'hint = {}["no hint"]'))
    fam = make_family("verifiers", env="sum_crash", args={"n": 40})
    t = fam.split["train"][0]

    async def play():
        env = fam.make_env(t)
        await env.reset()
        try:
            return await _step(env, "x")
        finally:
            await env.close()

    res, _, err = asyncio.run(play())
    assert res.status == "env_error" and err.kind == "KeyError"
    assert "GuessGame.run() raised KeyError" in err.message and "sum_crash.py:" in err.where


def test_what_the_family_cannot_run_is_refused_with_the_reason(envdir):
    (envdir / "multi_env.py").write_text(
        TASKSET
        + textwrap.dedent(
            """
            class DebateConfig(vf.EnvConfig):
                pro: vf.AgentConfig = vf.AgentConfig()
                con: vf.AgentConfig = vf.AgentConfig()

            class Debate(vf.Env[DebateConfig]):
                async def run(self, task, agents):
                    pass

            __all__ = ["SumTaskset", "Debate"]
            """
        )
    )
    with pytest.raises(UserError, match="Debate has 2 agent seats .pro, con.; the policy plays one"):
        make_family("verifiers", env="multi_env")
    (envdir / "rt_taskset.py").write_text(
        TASKSET.replace("async def correct(self, task, trace)", "async def correct(self, task, trace, runtime)")
    )
    with pytest.raises(UserError, match="reward functions correct need a runtime"):
        make_family("verifiers", env="rt_taskset")
    with pytest.raises(UserError, match="no module named 'no_such_env'"):
        make_family("verifiers", env="no_such_env")
    with pytest.raises(UserError, match=r"rejects its arguments \{'m': 3\}"):
        make_family("verifiers", env="sum_taskset", args={"m": 3})
    with pytest.raises(UserError, match=r"load_environment\(n: int = 60, start: int = 10\) does not take"):
        make_family("verifiers", env="sum_env", args={"m": 3})
    with pytest.raises(UserError, match="heldout_share has no effect"):
        make_family("verifiers", env="sum_env", heldout_args={"n": 3}, heldout_share=0.2)


def test_the_packages_own_openenv_taskset_surfaces_its_own_error_and_a_missing_module_says_so():
    """The package's openenv taskset runs its own exchange; a server it cannot reach makes the episode's
    first step an env_error with the package's cause."""
    fam = make_family(
        "verifiers", env="openenv", args={"base_url": "http://127.0.0.1:1", "resets": [{"seed": i} for i in range(40)]}
    )
    env = fam.make_env(fam.split["train"][0])

    async def play():
        await env.reset()
        return await _step(env, "1")

    res, _, err = asyncio.run(play())
    assert res.status == "env_error" and "OpenEnvEnv.run() raised ConnectionError" in err.message
    assert "openenv" in err.where
    with pytest.raises(UserError, match="the taskset textarena needs a module that is not installed"):
        make_family("verifiers", env="textarena")


def test_a_reward_that_hangs_is_stopped_at_the_reward_timeout(envdir):
    (envdir / "sum_slow.py").write_text(
        TASKSET.replace(
            "        return float(trace.last_reply == task.answer)",
            "        import asyncio\n\n        await asyncio.sleep(30)",
        )
    )
    fam = make_family("verifiers", env="sum_slow", args={"n": 40}, reward_timeout=0.5)
    t0 = time.time()
    with pytest.raises(UserError, match=r"SumTask.correct did not return within task.reward_timeout=0.5 s"):
        asyncio.run(fam.make_env(fam.split["train"][0]).step("13"))
    assert time.time() - t0 < 5


def test_an_infinite_taskset_needs_max_tasks(envdir):
    (envdir / "sum_stream.py").write_text(
        TASKSET.replace(
            "class SumTaskset(vf.Taskset[SumTask, SumConfig]):",
            "class SumTaskset(vf.Taskset[SumTask, SumConfig]):\n    INFINITE = True",
        ).replace("for i in range(self.config.n):", "import itertools\n        for i in itertools.count():")
    )
    with pytest.raises(UserError, match="infinite; give task.args.max_tasks"):
        make_family("verifiers", env="sum_stream")
    fam = make_family("verifiers", env="sum_stream", max_tasks=50)
    assert fam.split_size("train") + fam.split_size("heldout") == 50


def test_missing_package_says_how_to_install(monkeypatch):
    import tempering.envs.verifiers as mod

    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    with pytest.raises(UserError, match=r"pip install 'tempering\[ecosystem\]'"):
        mod._package()


@pytest.mark.slow
def test_train_verb_runs_a_few_steps_and_logs_each_reward(envdir):
    out = envdir / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "model.name=tiny-xs",
            "task.family=verifiers",
            "task.args.env=sum_env",
            "task.args.args.n=40",
            "task.train_size=16",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens=4",
            "rollout.max_turns=2",
            "run.steps=2",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.threads=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=envdir,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "reward" in x]
    assert [x["step"] for x in steps] == [1, 2]
    assert all({"reward/correct", "reward/digits", "reward/length", "reward/spaces"} <= set(x) for x in steps)
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert all(x["task"].startswith("verifiers:sum_env:") for x in samples)
    two = [x for x in samples if len(x["turns"]) == 2]
    assert two and all(x["turns"][0]["feedback"].startswith("score ") for x in two)


@pytest.mark.slow
def test_train_verb_runs_a_multi_turn_environment(envdir):
    (envdir / "sum_game.py").write_text(TASKSET + GAME)
    out = envdir / "run"
    args = ["model.name=tiny-xs", "task.family=verifiers", "task.args.env=sum_game", "task.args.args.n=40"]
    args += ["task.train_size=16", "task.heldout_size=4", "rollout.group_size=2", "rollout.prompts_per_step=2"]
    args += ["rollout.max_new_tokens=3", "rollout.max_turns=3", "run.steps=2", f"run.out_dir={out}"]
    args += ["run.eval_every=0", "run.checkpoint_every=0", "run.progress=false", "run.threads=1"]
    r = subprocess.run(
        [sys.executable, "-m", "tempering.cli", "train", *args], capture_output=True, text=True, timeout=300, cwd=envdir
    )
    assert r.returncode == 0, r.stderr[-3000:]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    three = [x for x in samples if len(x["turns"]) == 3]  # the game's hints came back as the next observations
    assert three and all(x["turns"][0]["feedback"] in ("higher", "lower", "a number, please") for x in three)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows if "reward" in x] == [1, 2]
