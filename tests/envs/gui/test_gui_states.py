"""The recorded-state task family (single-step guided OPD and dual-level GRPO): tasks, the dual and
single-GT rewards, teacher guidance per variant, trajectory files as training states, and lockstep play."""

import asyncio

import pytest

from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.agents import ModelAgent, NoisyAgent
from tempering.envs.gui.dataset import generate, play, rollout, write_jsonl
from tempering.envs.gui.env import GuiFamily
from tempering.envs.gui.states import GuiStateFamily, most_matched_prompt, multi_gt_prompt, sample_of, single_gt_prompt
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.types import Episode, Turn


def _score(family, task, text):
    return asyncio.run(family.make_env(task).step(text))


def _multi_state(family, n=60):
    """A state with several valid actions whose demonstrated action is not the first valid one."""
    for t in family.tasks("train", n):
        s = sample_of(t)
        if len(s.valid) > 1 and s.demonstrated != s.valid[-1]:
            return t, s
    raise AssertionError("no multi-solution state")


def test_tasks_are_recorded_states_with_their_annotation():
    fam = make_family("gui_states")
    train, held = fam.tasks("train", 40, seed=3), fam.tasks("heldout", 12, seed=3)
    assert len(train) == 40 and len(held) == 12
    assert [t.prompt for t in fam.tasks("train", 40, seed=3)] == [t.prompt for t in train]
    apps = lambda ts: {t.id.split("#")[0] for t in ts}
    assert not apps(train) & apps(held)
    for t in train:
        s = sample_of(t)
        assert t.prompt == s.prompt and t.prompt.startswith("Task: ") and "Hint" not in t.prompt
        assert s.demonstrated in s.valid and t.answer == s.target
        r = _score(fam, t, t.answer)  # the supervised target is a valid, perfect answer
        assert r.success and r.score == pytest.approx(1.0) and r.done and r.status == "valid"


def test_dual_reward_counts_every_valid_action_and_single_gt_only_the_demonstrated_one():
    dual = GuiStateFamily()
    single = GuiStateFamily(reference="demonstrated", weights={"format": 0, "action": 1, "plan": 0})
    t, s = _multi_state(dual)
    other = format_output(s.valid[-1], s.plan)  # valid, but not the demonstrated action
    r = _score(dual, t, other)
    assert r.success and r.info["reward"] == {"format": 1.0, "action": 1.0, "plan": 1.0, "total": pytest.approx(1.0)}
    r = _score(single, t, other)
    assert r.success and r.score == 0.0  # a valid action, scored 0 by the single-GT reward
    assert _score(single, t, format_output(s.demonstrated, [])).score == 1.0


def test_reward_parts_and_weights_on_a_hand_made_answer():
    fam = GuiStateFamily(weights={"format": 0.2, "action": 0.5, "plan": 0.3})
    t = fam.tasks("train", 1)[0]
    s = sample_of(t)
    wrong = Action("scroll", value="down")  # no difficulty-0 first state needs a scroll
    r = _score(fam, t, format_output(wrong, s.plan))
    assert not r.success and r.status == "invalid"
    assert r.info["reward"]["action"] == 0.0 and r.info["reward"]["plan"] == 1.0
    assert r.score == pytest.approx(0.2 * 1 + 0.5 * 0 + 0.3 * 1)
    r = _score(fam, t, '{"reason": "x", "action": ')
    assert r.status == "parse_error" and r.score == 0.0 and not r.info["format_ok"]


def test_teacher_guidance_variants():
    fam = GuiStateFamily()
    t, s = _multi_state(fam)
    show = lambda a: str(a)
    single = single_gt_prompt(t)
    assert single.startswith(t.prompt + "\nHint: a correct action is ") and single.endswith(show(s.demonstrated))
    multi = multi_gt_prompt(t)
    assert all(show(a) in multi for a in s.valid) and " or " in multi

    def episode(text):
        return Episode(task=t, prompt_ids=[], turns=[Turn(action_ids=[], logprobs=[], info={"text": text})])

    # the student's own valid action is the hint; an unusable sample falls back to the demonstrated one
    mine = format_output(s.valid[-1], s.plan)
    assert most_matched_prompt(t, episode(mine)).endswith(show(s.valid[-1]))
    assert most_matched_prompt(t, episode("garbage")).endswith(show(s.demonstrated))
    near = (
        Action(s.valid[-1].type, target=s.valid[-1].target, value="zzz") if s.valid[-1].type == "type" else s.valid[-1]
    )
    assert most_matched_prompt(t, episode(format_output(near, []))).endswith(show(s.valid[-1]))


def test_guided_prompts_for_the_teacher_warm_start():
    fam = GuiStateFamily(guidance="mixed")
    tasks = fam.tasks("train", 60)
    hints = {t.prompt.rsplit("\n", 1)[1].split(" is ")[0].split(" are ")[0] for t in tasks}
    assert hints == {"Hint: a correct action", "Hint: correct actions"}
    for t in tasks:  # the target takes the demonstrated action, which every hint contains
        assert str(sample_of(t).demonstrated) in t.prompt.rsplit("\n", 1)[1]


def test_training_states_from_a_noisy_trajectory_file(tmp_path):
    recs = generate(GuiFamily(kinds=("form", "todo")), NoisyAgent(p_wrong=0.5, p_malformed=0.3, seed=1), 10)
    path = tmp_path / "noisy.jsonl"
    write_jsonl(path, recs)
    fam = GuiStateFamily(dataset=str(path))
    tasks = fam.tasks("train", 1000)
    assert len(tasks) == sum(len(r["steps"]) for r in recs)
    assert any(not s["valid"] for r in recs for s in r["steps"])
    for t in tasks:  # an erring step still gives a valid demonstration and a perfect target
        assert _score(fam, t, t.answer).success
    assert fam.tasks("heldout", 5)  # held-out states still come from held-out apps
    with pytest.raises(UserError, match="no GUI dataset"):
        GuiStateFamily(dataset=str(tmp_path / "missing.jsonl")).tasks("train", 5)


def test_bad_family_arguments():
    with pytest.raises(UserError, match="reference"):
        GuiStateFamily(reference="first")
    with pytest.raises(UserError, match="guidance"):
        GuiStateFamily(guidance="oracle")
    with pytest.raises(UserError, match="unknown app kinds"):
        make_family("gui_states", kinds=["calendar"])


def test_lockstep_play_matches_sequential_rollouts():
    fam = GuiFamily(kinds=("form", "settings", "todo"))
    tasks = fam.tasks("heldout", 6, seed=2)

    def policy(prompt: str) -> str:  # deterministic, right on some screens and wrong on others
        return format_output(Action("click", target=str(len(prompt) % 3 + 1)), [])

    calls = []

    def act(prompts):
        calls.append(len(prompts))
        return [policy(p) for p in prompts]

    together = play([fam.make_env(t) for t in tasks], act)
    alone = [rollout(fam.make_env(t), ModelAgent(policy)) for t in tasks]
    assert together == alone
    assert calls[0] == len(tasks) and calls == sorted(calls, reverse=True)
    with pytest.raises(ValueError, match="answered 0 of"):
        play([fam.make_env(tasks[0])], lambda prompts: [])


def test_multi_solution_states_only():
    fam = GuiStateFamily(multi_only=True)
    tasks = fam.tasks("train", 30)
    assert len(tasks) == 30 and all(len(sample_of(t).valid) > 1 for t in tasks)
    every = GuiStateFamily().tasks("train", 300)
    assert [t.prompt for t in tasks] == [t.prompt for t in every if len(sample_of(t).valid) > 1][:30]
