"""MiniWoB++ pages in headless Chromium. The browser tests are slow and skip, saying why, when the
`gui` extra or Debian's chromium / chromium-driver are missing; the rest runs everywhere."""

import asyncio
import importlib.util
import os
import re

import pytest

from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.miniwob import MiniWoBEnv, MiniWoBFamily, check_browser, chromium_paths, dom_screen
from tempering.errors import UserError

HAVE_EXTRA = all(importlib.util.find_spec(m) for m in ("miniwob", "selenium"))
MISSING = [p for p in chromium_paths() if not os.path.isfile(p)]
browser = pytest.mark.skipif(
    not HAVE_EXTRA or bool(MISSING),
    reason="needs the gui extra (pip install 'tempering[gui]')"
    if not HAVE_EXTRA
    else f"needs Debian's chromium and chromium-driver (missing: {', '.join(MISSING)})",
)


def out(action: Action) -> str:
    return format_output(action, ["do it"], "")


def test_missing_browser_is_named(monkeypatch):
    monkeypatch.setenv("TEMPERING_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(UserError) as e:
        check_browser()
    if HAVE_EXTRA:
        assert "Chromium not found at /nonexistent/chromium" in str(e.value)
        assert "apt-get install chromium chromium-driver" in str(e.value)
    else:
        assert "pip install 'tempering[gui]'" in str(e.value)


def test_dom_is_rendered_to_the_same_text_form():
    def el(ref, parent, tag, text=None, value=None):
        return {
            "ref": ref,
            "parent": parent,
            "left": [10.0],
            "top": [20.0],
            "width": [30.0],
            "height": [12.0],
            "tag": tag,
            "text": text or "",
            "value": value,
        }

    obs = {
        "utterance": "Select Ab and click Submit.",
        "dom_elements": [
            el(1, 0, "BODY"),
            el(2, 1, "div"),
            el(3, 2, "label"),
            el(4, 3, "INPUT_checkbox", value=True),
            el(-1, 3, "t", "Ab"),
            el(5, 2, "INPUT_text", value="hi"),
            el(6, 2, "span", "note"),
            el(7, 2, "BUTTON", "Submit"),
        ],
    }
    assert dom_screen(obs).render(boxes=True).splitlines() == [
        "Page",
        "#4 checkbox Ab [on] @10,20,30,12",
        "#5 textbox [hi] @10,20,30,12",
        "#6 text note @10,20,30,12",
        "#7 button Submit @10,20,30,12",
    ]


def test_family_splits_are_disjoint():
    fam = MiniWoBFamily()
    train, held = fam.tasks("train", 30), fam.tasks("heldout", 30)
    assert not {t.id for t in train} & {t.id for t in held}
    assert {t.meta["name"] for t in train} == set(fam.names)


@pytest.mark.slow
@browser
def test_click_and_type_tasks_get_miniwobs_reward():
    fam = MiniWoBFamily(names=("click-test-2", "enter-text"))
    click_task, type_task = fam.tasks("train", 2, seed=0)

    async def run():
        env = fam.make_env(click_task)
        try:
            obs = env.reset()
            assert obs.startswith("Task: Click button ONE.")
            ref = re.search(r"#(\d+) button ONE", obs).group(1)
            res = await env.step(out(Action("click", target=ref)))
            assert res.done and res.success and res.score > 0.5 and res.info["raw_reward"] == 1.0
        finally:
            await env.close()
        env = fam.make_env(type_task)
        try:
            obs = env.reset()
            word = re.search(r'Enter "(.*)" into', obs).group(1)
            box = re.search(r"#(\d+) textbox", obs).group(1)
            submit = re.search(r"#(\d+) button Submit", obs).group(1)
            res = await env.step(out(Action("type", target=box, value=word)))
            assert not res.done and f"textbox [{word}]" in res.feedback
            res = await env.step("{not json")
            assert res.status == "parse_error" and not res.done
            res = await env.step(out(Action("click", target="999")))
            assert res.status == "bad_action" and "no element #999 on screen" in res.feedback
            res = await env.step(out(Action("click", target=submit)))
            assert res.done and res.success and res.score > 0.5
        finally:
            await env.close()

    asyncio.run(run())


@pytest.mark.slow
@browser
def test_a_browser_that_fails_to_start_is_a_clear_error(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = MiniWoBEnv(MiniWoBFamily().tasks("train", 1)[0], chromium=str(fake), chromedriver=chromium_paths()[1])
    with pytest.raises(UserError, match=f"Chromium \\({fake}\\) failed to start"):
        env.reset()
