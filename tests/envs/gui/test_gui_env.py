"""The offline GUI env: one JSON action per step, per-step reward and validity, done on success,
failure or the step limit; bad input is reported in the step result, never raised. Through the rollout
engine: the first observation is the prompt, the current screen comes last, the reward is completion."""

import asyncio
import json
import random

import pytest

from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.agents import OracleAgent
from tempering.envs.gui.apps import APPS
from tempering.envs.gui.env import GuiEnv, GuiFamily, load_app, task_from_spec
from tempering.envs.gui.reward import RewardWeights
from tempering.envs.gui.states import GuiStateFamily, sample_of
from tempering.errors import UserError


def env_for(kind: str, difficulty: int = 0, seed: int = 0, **kw) -> GuiEnv:
    spec = APPS[kind].generate(random.Random(seed), difficulty)
    return GuiEnv(task_from_spec(spec, difficulty), **kw)


def test_following_valid_actions_succeeds_with_full_reward():
    env = env_for("form", 1, reward="step")
    obs = env.reset()
    assert obs.startswith("Task: ")
    n = env.optimal_steps
    for k in range(n):
        view = env.view()
        res = asyncio.run(env.step(format_output(view.valid[0], view.plan)))
        assert res.status == "valid" and res.info["valid"] and res.score == pytest.approx(1.0)
        assert res.done == (k == n - 1)
    assert res.success and res.info["outcome"] == "success" and res.feedback == ""
    again = env.step_sync(format_output(Action("click", target="1"), []))
    assert again.done and again.status == "over"


def test_malformed_output_is_a_format_failure_and_the_screen_stays():
    env = env_for("settings")
    before = env.reset()
    res = env.step_sync('{"reason": "r", "action": ')
    assert res.status == "parse_error" and not res.info["format_ok"] and res.score == 0.0 and not res.done
    assert res.feedback.startswith("Error: not one JSON object") and res.feedback.endswith(before)


def test_target_not_on_screen_is_reported():
    env = env_for("shop")
    env.reset()
    res = env.step_sync(format_output(Action("click", target="42"), ["add Pen"]))
    assert res.status == "bad_action" and not res.info["valid"]
    assert "no element #42 on screen" in res.feedback
    assert res.info["reward"]["format"] == 1.0 and res.info["reward"]["action"] == 0.0


def test_an_irreversible_mistake_fails_the_task():
    env = env_for("form", 0)
    env.reset()
    submit = next(e for e in env.view().screen.elements if e.text == "Submit")
    res = env.step_sync(format_output(Action("click", target=submit.id), ["submit"]))
    assert res.done and not res.success and res.status == "invalid" and res.info["outcome"] == "failed"


def test_by_default_a_step_scores_task_completion():
    env = env_for("form", 1)
    env.reset()
    scores = []
    while not env.finished:
        view = env.view()
        res = env.step_sync(format_output(view.valid[0], view.plan))
        scores.append(res.score)
        assert res.info["reward"]["total"] == pytest.approx(1.0)  # the dual-level parts are still reported
    assert scores == [0.0] * (len(scores) - 1) + [1.0] and len(scores) == env.optimal_steps
    with pytest.raises(UserError, match="reward must be 'task' or 'step'"):
        GuiFamily(reward="steps")


def test_step_limit_ends_the_episode():
    env = env_for("settings", max_steps=3)
    env.reset()
    tab = next(e for e in env.view().screen.elements if e.role == "tab" and e.state == "selected")
    results = [env.step_sync(format_output(Action("click", target=tab.id), [])) for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].info["outcome"] == "max_steps" and all(r.status == "invalid" for r in results)


def test_reward_weights_and_partial_match():
    env = env_for("todo", 0, weights=RewardWeights(format=0.0, action=1.0, plan=0.0), reward="step")
    env.reset()
    box = next(e for e in env.view().screen.elements if e.role == "textbox")
    want = next(a for a in env.view().valid if a.type == "type")
    # a text with half of the words right: action reward is the token F1, and the step is not valid
    res = env.step_sync(format_output(Action("type", target=box.id, value=want.value + " please"), []))
    words = len(want.value.split())
    assert res.score == pytest.approx(2 * words / (2 * words + 1))
    assert res.status == "invalid"


def test_family_envs_and_bad_family_settings():
    fam = GuiFamily(kinds=("mail", "todo"), difficulty=1)
    tasks = fam.tasks("heldout", 4, seed=2)
    assert [t.meta["kind"] for t in tasks] == ["mail", "todo", "mail", "todo"]
    assert all(t.meta["split"] == "heldout" for t in tasks)
    env = fam.make_env(tasks[0])
    assert env.reset() == tasks[0].prompt
    from_config = GuiFamily(kinds=["form"], weights={"format": 0.5, "action": 0.5, "plan": 0.0}, judge={"kind": "rule"})
    assert from_config.kinds == ("form",) and from_config.weights == RewardWeights(0.5, 0.5, 0.0)
    with pytest.raises(UserError, match="judge.kind"):
        GuiFamily(judge={"kind": "oracle"})
    with pytest.raises(UserError, match="unknown app kinds"):
        GuiFamily(kinds=("calendar",))
    with pytest.raises(UserError, match="split must be"):
        fam.tasks("test", 1)


def test_task_specs_that_cannot_be_played_are_rejected():
    with pytest.raises(UserError, match="unknown app kind 'paint'"):
        load_app({"kind": "paint"})
    spec = APPS["settings"].generate(random.Random(0), 0)
    spec["goal"] = {}  # nothing to do: no valid action at the first state
    with pytest.raises(UserError, match="already finished or impossible at its first state"):
        load_app(spec)
    broken = APPS["form"].generate(random.Random(0), 0)
    del broken["init"]
    with pytest.raises(UserError, match="malformed"):
        load_app(broken)


def form_with_a_select_goal() -> dict:
    for seed in range(100):
        spec = APPS["form"].generate(random.Random(seed), 3)
        if any(f["kind"] == "select" and f["label"] in spec["goal"] for f in spec["fields"]):
            return spec
    raise AssertionError("no form with a select goal in 100 seeds")


def test_a_goal_that_no_action_reaches_is_rejected():
    spec = form_with_a_select_goal()
    label = next(f["label"] for f in spec["fields"] if f["kind"] == "select" and f["label"] in spec["goal"])
    broken = json.loads(json.dumps(spec))
    broken["goal"][label] = "Paris"  # not an option: the form can never be completed
    with pytest.raises(UserError, match=r"has no valid action at step \d although it is not finished"):
        load_app(broken)
    # an unfinished state without a valid action met during an episode is reported with the step
    env = GuiEnv(task_from_spec(spec))
    env.reset()
    env.app.valid_actions = lambda state: []
    with pytest.raises(UserError, match="no valid action at step 1"):
        env.step_sync(format_output(Action("click", target="1"), []))


def _oracle_answers(fam, tasks) -> dict[str, str]:
    """The oracle's output for every observation on its path through each task (played on separate envs)."""
    answers, agent = {}, OracleAgent(seed=0)
    for t in tasks:
        env = fam.make_env(t)
        env.reset()
        while not env.finished:
            view = env.view()
            answers[view.prompt] = agent.act(view)
            env.step_sync(answers[view.prompt])
    return answers


def _last_screen(context: str) -> str:
    return context[context.rindex("Task: ") :].rstrip("\n")


def test_through_the_rollout_engine_the_policy_reads_the_current_screen_last(text_rollout):
    fam = GuiFamily(kinds=("form", "todo", "files"), difficulty=1)
    tasks = fam.tasks("train", 3, seed=1)
    answers = _oracle_answers(fam, tasks)
    groups, sampler = text_rollout(lambda ctx: answers[_last_screen(ctx)], tasks, fam.make_env, max_turns=20)
    for task, g in zip(tasks, groups):
        e = g.episodes[0]
        assert e.prompt == task.prompt and e.prompt.startswith("Task: ") and "\n#1 " in e.prompt
        assert e.stop_reason == "success" and e.reward == 1.0 and len(e.turns) >= 2
        assert [t.score for t in e.turns] == [0.0] * (len(e.turns) - 1) + [1.0]  # the reward is task completion
    assert sorted(sampler.contexts[:3]) == sorted(t.prompt for t in tasks)
    # the generic template repeats the first screen after the new one: the policy then acts on a stale screen
    stale, _ = text_rollout(
        lambda ctx: answers[_last_screen(ctx)], tasks, fam.make_env, max_turns=20, template="\n{feedback}\n{prompt}"
    )
    assert not any(g.episodes[0].stop_reason == "success" for g in stale)


def test_an_unfinished_episode_earns_nothing_whatever_its_steps(text_rollout):
    fam = GuiFamily(kinds=("form",), difficulty=1)
    task = fam.tasks("train", 1, seed=2)[0]
    answers = _oracle_answers(fam, [task])
    steps = fam.make_env(task).optimal_steps
    groups, _ = text_rollout(lambda ctx: answers[_last_screen(ctx)], [task], fam.make_env, max_turns=steps - 1)
    e = groups[0].episodes[0]
    assert e.stop_reason == "max_turns" and e.reward == 0.0
    assert all(t.status == "valid" and t.info["reward"]["total"] == pytest.approx(1.0) for t in e.turns)


def test_recorded_states_reach_the_policy_through_the_rollout_engine(text_rollout):
    fam = GuiStateFamily(kinds=("mail", "shop"))
    tasks = fam.tasks("train", 4, seed=0)
    targets = {t.prompt: sample_of(t).target for t in tasks}
    groups, sampler = text_rollout(lambda ctx: targets[ctx], tasks, fam.make_env, max_turns=1)
    assert sampler.contexts == [t.prompt for t in tasks]
    assert all(
        g.episodes[0].prompt == t.prompt and g.episodes[0].reward == pytest.approx(1.0) for t, g in zip(tasks, groups)
    )
