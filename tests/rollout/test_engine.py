import asyncio
import json
from dataclasses import replace

import pytest

from tempering.envs.base import Env, StepResult
from tempering.errors import UserError
from tempering.models import char_tokenizer
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import CounterfactualOptions, RolloutOptions, RolloutStats, rollout
from tempering.rollout.sampler import Sample, SamplingParams
from tempering.train.batch import collate
from tempering.types import StopReason, Task

TOK = char_tokenizer()


class ScriptedSampler:
    """Answers from a script keyed by (prompt text, turn): deterministic stand-in for a model."""

    def __init__(self, answer):
        self.tokenizer, self.answer, self.calls = TOK, answer, 0

    def sample(self, contexts, params):
        out = []
        for ctx in contexts:
            self.calls += 1
            text = self.answer(TOK.decode(ctx), self.calls)
            ids = TOK.encode(text, add_special_tokens=False) + [TOK.eos_token_id]
            out.append(Sample(ids, [-0.1 * (i + 1) for i in range(len(ids))], False))
        return out


class CountEnv(Env):
    """Accepts the answer "ok"; otherwise says how many tries so far."""

    def __init__(self, task, score=0.25, raise_on=None):
        super().__init__(task)
        self.tries, self.score, self.raise_on = 0, score, raise_on

    async def step(self, action):
        self.tries += 1
        if self.raise_on and self.raise_on in action:
            raise RuntimeError("verifier crashed")
        if action == "ok":
            return StepResult(1.0, True, True, "", "correct")
        return StepResult(self.score, False, False, f"try{self.tries}", "incorrect")


def _run(sampler, opts, G=2, tasks=None, env=CountEnv, stats=None):
    tasks = tasks or [Task("t0", "Q:")]
    fmt = ChatFormat(TOK, use_chat_template=False, feedback_template="|{feedback}|")
    return asyncio.run(rollout(sampler, fmt, tasks, env, G, opts, stats))


def test_multi_turn_appends_templated_feedback_and_stops_on_success():
    sampler = ScriptedSampler(lambda ctx, n: "ok" if "wrong: try1" in ctx else "no")
    g = _run(sampler, RolloutOptions(max_turns=3))[0]
    e = g.episodes[0]
    assert [t.status for t in e.turns] == ["incorrect", "correct"] and e.stop_reason is StopReason.SUCCESS
    assert e.stop_reason == "success" and json.dumps(e.stop_reason) == '"success"' and f"{e.stop_reason}" == "success"
    assert TOK.decode(e.turns[0].feedback_ids) == "|wrong: try1|"
    assert e.turns[-1].feedback_ids == [] and e.reward == 1.0 and e.first_success_turn == 2
    # the whole episode is one training row: prompt, answer, feedback (masked), answer
    b = collate(g.episodes, 0)
    assert b.size == 2 and int(b.mask_BT[0].sum()) == len(e.turns[0].action_ids) + len(e.turns[1].action_ids)


def test_single_turn_is_k_equal_one():
    g = _run(ScriptedSampler(lambda ctx, n: "no"), RolloutOptions(max_turns=1))[0]
    assert all(len(e.turns) == 1 and e.stop_reason == "max_turns" for e in g.episodes)
    assert all(e.turns[0].feedback_ids == [] for e in g.episodes)


def test_turn_limit():
    g = _run(ScriptedSampler(lambda ctx, n: "no"), RolloutOptions(max_turns=3))[0]
    assert [len(e.turns) for e in g.episodes] == [3, 3] and g.episodes[0].stop_reason == "max_turns"


def test_old_turns_are_dropped_when_the_context_fills_and_train_rows_follow():
    sampler = ScriptedSampler(lambda ctx, n: "abcdefgh")
    opts = RolloutOptions(sampling=SamplingParams(max_new_tokens=10), max_turns=4, max_context_tokens=40)
    e = _run(sampler, opts, G=1)[0].episodes[0]
    assert len(e.turns) == 4
    cut = [k for k, t in enumerate(e.turns) if t.context_ids is not None]
    assert cut, "some turn must have been sampled from a shortened context"
    k = cut[0]
    assert e.turns[k].context_ids[: len(e.prompt_ids)] == e.prompt_ids  # the prompt is always kept
    assert len(e.turns[k].context_ids) + 10 <= 40
    rows = e.segments()
    assert len(rows) == 1 + len(cut)
    assert sum(sum(r[1]) for r in rows) == e.num_action_tokens  # every action token trained exactly once


def test_context_limit_stops_the_episode_when_dropping_is_off():
    sampler = ScriptedSampler(lambda ctx, n: "abcdefgh")
    opts = RolloutOptions(
        sampling=SamplingParams(max_new_tokens=10), max_turns=4, max_context_tokens=40, drop_old_turns=False
    )
    e = _run(sampler, opts, G=1)[0].episodes[0]
    assert e.stop_reason == "context" and len(e.turns) < 4


def test_pruning_hook_stops_failed_episodes_of_pruned_groups():
    sampler = ScriptedSampler(lambda ctx, n: "ok" if ctx.startswith("A") else "no")
    stats = RolloutStats()
    opts = RolloutOptions(max_turns=3, continue_after_turn1=lambda g: [g.task.id == "hard"] * len(g.episodes))
    groups = _run(sampler, opts, G=2, tasks=[Task("easy", "B"), Task("hard", "C")], stats=stats)
    assert all(e.stop_reason == "pruned" and len(e.turns) == 1 for e in groups[0].episodes)
    assert all(len(e.turns) == 3 for e in groups[1].episodes)
    assert stats.groups_pruned == 1 and stats.groups_expanded == 1 and stats.episodes_pruned == 2
    assert stats.env_calls == 2 + 6


def test_an_env_that_raises_ends_only_that_episode():
    sampler = ScriptedSampler(lambda ctx, n: "boom" if n == 1 else "no")
    stats = RolloutStats()
    g = _run(sampler, RolloutOptions(max_turns=2), env=lambda t: CountEnv(t, raise_on="boom"), stats=stats)[0]
    assert g.episodes[0].stop_reason == "env_error" and "verifier crashed" in g.episodes[0].turns[0].info["error"]
    assert g.episodes[1].stop_reason == "max_turns" and stats.env_errors == 1


def test_scores_outside_the_range_fail_or_clamp():
    sampler = ScriptedSampler(lambda ctx, n: "no")
    with pytest.raises(UserError, match=r"verifier CountEnv returned score 3.0"):
        _run(sampler, RolloutOptions(score_range=(0.0, 1.0)), env=lambda t: CountEnv(t, score=3.0))
    g = _run(sampler, RolloutOptions(score_range=(0.0, 1.0), clamp_scores=True), env=lambda t: CountEnv(t, score=3.0))[
        0
    ]
    assert g.episodes[0].turns[0].score == 1.0


def test_counterfactual_resamples_the_most_surprising_turns_from_fixed_history():
    # longer answers have lower mean log-prob here, so "nooooo" is the most surprising turn
    sampler = ScriptedSampler(lambda ctx, n: {1: "nooooo", 2: "no"}.get(n, "ok"))
    stats = RolloutStats()
    opts = RolloutOptions(max_turns=2, counterfactual=CounterfactualOptions(turns=1, samples=3))
    g = _run(sampler, opts, stats=stats)[0]
    picked = [(i, k) for i, e in enumerate(g.episodes) for k, t in enumerate(e.turns) if "cf_scores" in t.info]
    assert picked == [(0, 0)]
    assert g.episodes[0].turns[0].info["cf_scores"] == [1.0, 1.0, 1.0]  # the alternatives answered "ok"
    assert stats.cf_env_calls == 3


class ScreenEnv(CountEnv):
    """Its first observation is not `task.prompt` (a GUI screen, a MiniWoB page); async, like a browser."""

    async def reset(self):
        return f"screen of {self.task.id}"


def test_episodes_start_from_the_observation_reset_returns():
    seen = []
    sampler = ScriptedSampler(lambda ctx, n: seen.append(ctx) or "no")
    fmt = ChatFormat(TOK, use_chat_template=False, feedback_template="|{feedback}|{prompt}")
    groups = asyncio.run(rollout(sampler, fmt, [Task("t0", "")], ScreenEnv, 2, RolloutOptions(max_turns=2)))
    e = groups[0].episodes[0]
    assert e.prompt == "screen of t0" and TOK.decode(e.prompt_ids) == "screen of t0"
    assert seen[0] == "screen of t0"
    # the feedback template's {prompt} is the observation too, not the empty task prompt
    assert seen[-1].endswith("|wrong: try1|screen of t0")


def test_a_reset_that_returns_no_text_is_an_error():
    class Bad(CountEnv):
        def reset(self):
            return None

    with pytest.raises(UserError, match="reset"):
        _run(ScriptedSampler(lambda ctx, n: "no"), RolloutOptions(), env=Bad)


def test_a_failing_reset_closes_every_environment_it_made():
    closed = []

    class Flaky(CountEnv):
        def reset(self):
            if self.task.id == "t1":
                raise RuntimeError("browser did not start")
            return "ok"

        async def close(self):
            closed.append(self.task.id)

    with pytest.raises(RuntimeError, match="browser did not start"):
        _run(ScriptedSampler(lambda ctx, n: "no"), RolloutOptions(), tasks=[Task("t0", ""), Task("t1", "")], env=Flaky)
    assert sorted(closed) == ["t0", "t0", "t1", "t1"]


def test_an_in_process_sampler_runs_on_the_rollout_thread_and_others_off_it():
    """Torch work of the sampler stays on the thread of the update (a second OpenMP team slows both)."""
    import threading

    class Where(ScriptedSampler):
        def sample(self, contexts, params):
            self.threads.add(threading.get_ident())
            return super().sample(contexts, params)

    for in_process, expect_here in ((True, True), (False, False)):
        sampler = Where(lambda ctx, n: "ok")
        sampler.threads, sampler.in_process = set(), in_process
        _run(sampler, RolloutOptions())
        assert (sampler.threads == {threading.get_ident()}) is expect_here


def test_rows_that_are_not_the_sampled_tokens_in_their_context_stop_the_run():
    from tempering.rollout.engine import check_rows
    from tempering.types import Episode, Turn

    first, second = Turn([5, 6], [-0.1, -0.2], feedback_ids=[7]), Turn([8], [-0.3])
    e = Episode(Task("t", "q"), [1, 2], [first, second])
    check_rows(e, [[1, 2], [1, 2, 5, 6, 7]])  # what was sampled, in the contexts it was sampled from
    with pytest.raises(RuntimeError, match="the training row of turn 2 is not its sampled tokens"):
        check_rows(e, [[1, 2], [1, 2, 5, 6, 9]])  # the second answer saw other environment tokens
    second.context_ids, second.realign = [1, 2, 5, 9, 9], True  # the template re-rendered the first answer
    check_rows(e, [[1, 2], [1, 2, 5, 9, 9]])
    assert e.segments()[0][:2] == ([1, 2, 5, 9, 9, 8], [0, 0, 1, 0, 0, 1])  # the drifted token is context now
    with pytest.raises(RuntimeError, match="turn 2"):
        check_rows(e, [[1, 2], [1, 2, 5, 6, 7]])  # yet it was sampled after the row's old tokens


def test_a_greedy_baseline_is_one_temperature_zero_episode_per_group_kept_apart():
    """ReMax's baseline: each group gets one more episode, sampled at temperature 0 through every turn (no
    pruning), scored, and kept out of the group's episodes; its cost is counted apart."""
    temps = []

    class Greedy(ScriptedSampler):
        def sample(self, contexts, params):
            temps.extend([params.temperature] * len(contexts))
            answer = "ok" if params.temperature == 0 and "wrong: try1" in TOK.decode(contexts[0]) else "no"
            self.answer = lambda ctx, n: answer
            return super().sample(contexts, params)

    stats = RolloutStats()
    opts = RolloutOptions(
        sampling=SamplingParams(temperature=1.0), max_turns=2, continue_after_turn1=lambda g: [False] * 2
    )
    gs = _run(
        Greedy(None), replace(opts, greedy_baseline=True), tasks=[Task("t0", "Q:"), Task("t1", "R:")], stats=stats
    )
    assert [len(g.episodes) for g in gs] == [2, 2]
    assert all(len(e.turns) == 1 and e.stop_reason == "pruned" for g in gs for e in g.episodes)
    assert [g.greedy.task.id for g in gs] == ["t0", "t1"]
    assert all([t.status for t in g.greedy.turns] == ["incorrect", "correct"] for g in gs)  # not pruned
    assert [g.greedy.reward for g in gs] == [1.0, 1.0]
    assert temps == [1.0] * 4 + [0.0] * 4  # the groups' turn 1, then the greedy episodes' two turns
    assert (stats.env_calls, stats.greedy_env_calls) == (4, 4)
    assert stats.greedy_tokens == 2 * (len("no") + 1 + len("ok") + 1) and stats.tokens == 4 * (len("no") + 1)
    assert all(g.greedy is None for g in _run(Greedy(None), opts))


def test_a_greedy_baseline_from_another_observation_than_its_group_is_refused():
    class Drifting(CountEnv):
        made = 0

        async def reset(self):
            Drifting.made += 1
            return "screen" if Drifting.made <= 2 else "another screen"

    with pytest.raises(UserError, match="task t0's environment started it from another observation"):
        _run(ScriptedSampler(lambda ctx, n: "no"), RolloutOptions(greedy_baseline=True), env=Drifting)
