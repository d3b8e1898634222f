"""The generated apps: the exact step count (`remaining`) agrees with a breadth-first search, the
multi-solution annotation is every first step of a shortest path, and executing actions changes screens."""

import json
import random

import pytest

from tempering.envs.gui.action import Action
from tempering.envs.gui.app import ActionError
from tempering.envs.gui.apps import APPS
from tempering.envs.gui.env import GuiFamily, observation


def key(state) -> str:
    return json.dumps(state, sort_keys=True)


def bfs_distance(app, state, limit):
    """Fewest candidate actions from `state` to a finished state, searching at most `limit` steps."""
    frontier, seen = [state], {key(state)}
    for depth in range(limit + 1):
        if any(app.remaining(s) == 0 for s in frontier):
            return depth
        nxt = []
        for s in frontier:
            if app.remaining(s) is None:
                continue
            for a in app.candidates(s):
                t = app.execute(s, a)
                if key(t) not in seen:
                    seen.add(key(t))
                    nxt.append(t)
        frontier = nxt
    return None


@pytest.mark.parametrize("kind", list(APPS))
def test_remaining_is_the_shortest_path_length(kind):
    """On states met by random walks, `remaining` equals the BFS distance, and the valid actions are
    exactly the candidates that lead one step closer."""
    cls, checked = APPS[kind], 0
    for difficulty in (0, 1):
        for seed in range(6):
            rng = random.Random(seed)
            app = cls(cls.generate(rng, difficulty))
            state = app.initial()
            for _ in range(6):
                left = app.remaining(state)
                if left in (0, None):
                    break
                assert bfs_distance(app, state, left) == left
                valid = app.valid_actions(state)
                assert valid, "an unfinished state must have a valid action"
                for a in app.candidates(state):
                    after = app.remaining(app.execute(state, a))
                    assert (a in valid) == (after == left - 1)
                checked += 1
                state = app.execute(state, rng.choice(app.candidates(state)))
    assert checked >= 12


@pytest.mark.parametrize("kind", list(APPS))
def test_oracle_path_finishes_in_exactly_remaining_steps(kind):
    cls = APPS[kind]
    for seed in range(5):
        rng = random.Random(seed)
        app = cls(cls.generate(rng, 2))
        state, left = app.initial(), app.remaining(app.initial())
        plan = app.plan(state)
        assert plan and app.instruction
        for _ in range(left):
            state = app.execute(state, rng.choice(app.valid_actions(state)))
        assert app.remaining(state) == 0 and app.plan(state) == []


def test_generation_is_deterministic_and_grows_with_difficulty():
    for kind, cls in APPS.items():
        assert cls.generate(random.Random(7), 1) == cls.generate(random.Random(7), 1)
        small = [
            len(cls(cls.generate(random.Random(s), 0)).screen(cls.generate(random.Random(s), 0)["init"]).elements)
            for s in range(10)
        ]
        big = [
            len(cls(cls.generate(random.Random(s), 3)).screen(cls.generate(random.Random(s), 3)["init"]).elements)
            for s in range(10)
        ]
        assert sum(big) > sum(small), kind


def test_difficulty_zero_prompts_are_short():
    """The embedded default model has a context of ~512-1024 characters; its prompts stay well under."""
    fam = GuiFamily(difficulty=0)
    lengths = [len(t.prompt) for t in fam.tasks("train", 60, seed=0)]
    assert max(lengths) <= 320, max(lengths)


def test_some_states_have_several_valid_actions():
    fam = GuiFamily(difficulty=1)
    ks = [len(fam.make_env(t).view().valid) for t in fam.tasks("train", 30, seed=1)]
    assert max(ks) >= 2 and min(ks) >= 1


def test_splits_are_disjoint_and_deterministic():
    fam = GuiFamily()
    train = fam.tasks("train", 120, seed=0)
    held = fam.tasks("heldout", 60, seed=0)
    assert len({t.id for t in train}) == 120
    assert not {t.id for t in train} & {t.id for t in held}
    assert [t.id for t in train[:10]] == [t.id for t in fam.tasks("train", 10, seed=0)]
    assert {t.meta["kind"] for t in train} == set(APPS)


def test_executing_an_action_changes_the_screen():
    cls = APPS["todo"]
    app = cls(cls.generate(random.Random(0), 0))
    state = app.initial()
    before = app.screen(state).render()
    box = next(e for e in app.screen(state).elements if e.role == "textbox")
    state = app.execute(state, Action("type", target=box.id, value="buy tea"))
    after = app.screen(state).render()
    assert before != after and f"#{box.id} textbox New item [buy tea]" in after


def test_actions_that_cannot_run_raise_action_error_with_the_reason():
    cls = APPS["form"]
    spec = cls.generate(random.Random(3), 2)
    app = cls(spec)
    s = app.initial()
    screen = app.screen(s)
    with pytest.raises(ActionError, match=r"no element #99 on screen \(ids: #1"):
        app.execute(s, Action("click", target="99"))
    button = next(e for e in screen.elements if e.role == "button")
    with pytest.raises(ActionError, match="not a text field"):
        app.execute(s, Action("type", target=button.id, value="x"))
    with pytest.raises(ActionError, match="cannot scroll"):
        app.execute(s, Action("scroll", value="down"))
    with pytest.raises(ActionError, match="no element at"):
        app.execute(s, Action("click", point=(5000, 5000)))
    combo = next((e for e in screen.elements if e.role == "combobox"), None)
    if combo is not None:
        with pytest.raises(ActionError, match="has no option"):
            app.execute(s, Action("select", target=combo.id, value="nope"))


def test_click_by_point_hits_the_element_under_it():
    cls = APPS["settings"]
    app = cls(cls.generate(random.Random(0), 0))
    s = app.initial()
    sw = next(e for e in app.screen(s).elements if e.role == "switch")
    x, y, w, h = sw.bbox
    by_point = app.execute(s, Action("click", point=(x + 1, y + h / 2)))
    assert by_point == app.execute(s, Action("click", target=sw.id)) != s


def test_observation_has_task_and_screen():
    cls = APPS["shop"]
    app = cls(cls.generate(random.Random(0), 0))
    text = observation(app.instruction, app.screen(app.initial()), boxes=True)
    lines = text.splitlines()
    assert lines[0].startswith("Task: Shop: buy") and lines[1] == "Shop"
    assert all(line.startswith("#") and " @" in line for line in lines[2:])
