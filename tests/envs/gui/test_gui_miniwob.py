"""MiniWoB++ pages in headless Chromium. The browser tests are slow and skip, saying why, when the
`gui` extra or Debian's chromium / chromium-driver are missing; the rest runs everywhere."""

import asyncio
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.browser import BrowserPool, Window, chromium_paths
from tempering.envs.gui.miniwob import (
    DEFAULT_TASKS,
    SUPPORTED_TASKS,
    UNSUPPORTED_TASKS,
    MiniWoBEnv,
    MiniWoBFamily,
    check_browser,
    page_screen,
)
from tempering.envs.gui.miniwob_oracle import ORACLE_TASKS, answer, read_line, solve
from tempering.envs.gui.screen import Element
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


def test_page_elements_render_as_targets_and_plain_text():
    screen = page_screen(
        [
            {"id": "", "role": "text", "text": "Pick a city"},
            {
                "id": "1",
                "role": "combobox",
                "text": "",
                "box": [8, 50, 150, 20],
                "state": "Rome",
                "options": ["Oslo", "Rome"],
            },
            {"id": "2", "role": "link", "text": "more", "box": [8, 80, 30, 12]},
            {"id": "3", "role": "textbox", "text": "Name", "box": [8, 100, 90, 20], "state": "Ana"},
        ]
    )
    assert screen.render().splitlines() == [
        "Page",
        "Pick a city",
        "#1 combobox [Rome] {Oslo|Rome}",
        "#2 link more",
        "#3 textbox Name [Ana]",
    ]
    assert screen.render(boxes=True).splitlines()[2] == "#1 combobox [Rome] {Oslo|Rome} @8,50,150,20"


def test_the_oracle_reads_the_rendered_lines_back():
    els = [Element("4", "checkbox", "Ab [x]", state="on"), Element("5", "combobox", "", state="", options=("a", "b"))]
    assert [read_line(e.render()) for e in els] == [
        read_line("#4 checkbox Ab [x] [on]"),
        read_line("#5 combobox [] {a|b}"),
    ]
    assert read_line("#4 checkbox Ab [x] [on]").text == "Ab [x]" and read_line("#5 combobox [] {a|b}").options == (
        "a",
        "b",
    )
    lines = [
        read_line(x)
        for x in ("#1 checkbox Ab [on]", "#2 checkbox Cd [off]", "#3 checkbox Ef [off]", "#4 button Submit")
    ]
    assert solve("Select Cd and click Submit.", lines) == Action("click", target="1")  # Ab must be off
    lines[0].state = "off"
    assert solve("Select Cd and click Submit.", lines) == Action("click", target="2")
    lines[1].state = "on"
    assert solve("Select Cd and click Submit.", lines) == Action("click", target="4")
    # the last observation in the context decides, whatever came before it
    context = "Task: Click button ONE.\nPage\n#1 button ONE\n{...}\nTask: Click button ONE.\nPage\n#7 button ONE\n"
    assert '"target":"7"' in answer(context)


def test_family_splits_are_disjoint_and_bad_settings_are_named():
    fam = MiniWoBFamily()
    train, held = fam.tasks("train", 30), fam.tasks("heldout", 30)
    assert not {t.id for t in train} & {t.id for t in held}
    assert {t.meta["name"] for t in train} == set(fam.names)
    with pytest.raises(UserError, match="reward must be 'success' or 'time_scaled'"):
        MiniWoBFamily(reward="raw")
    with pytest.raises(UserError, match="browsers must be >= 0"):
        MiniWoBFamily(browsers=-1)
    if HAVE_EXTRA:
        with pytest.raises(UserError, match="no task page named 'click-everything'"):
            MiniWoBFamily(names=("click-everything",))


def test_every_page_is_supported_or_refused_by_name_with_its_reason():
    assert set(SUPPORTED_TASKS) == set(ORACLE_TASKS) and set(DEFAULT_TASKS) <= set(SUPPORTED_TASKS)
    assert not set(SUPPORTED_TASKS) & set(UNSUPPORTED_TASKS)
    if HAVE_EXTRA:
        import miniwob

        pages = {p.stem for p in (Path(miniwob.__file__).parent / "html" / "miniwob").glob("*.html")}
        assert pages == set(SUPPORTED_TASKS) | set(UNSUPPORTED_TASKS)
    for name, why in [
        ("click-color", "does not show colours"),
        ("click-shape", "shapes drawn on a canvas or SVG"),
        ("drag-box", "the actions have no drag"),
        ("email-inbox", "unchecked"),
    ]:
        with pytest.raises(UserError, match=f"task '{name}' is not supported: .*{why}.*Supported tasks: click-test"):
            MiniWoBFamily(names=("click-test", name))


class FakeBrowser:
    """A browser that died: it never answers, and counts how often it is closed."""

    def __init__(self):
        self.died, self.windows, self.closed = None, 0, 0

    def alive(self):
        return False

    def close(self):
        self.closed += 1


def test_every_dead_window_of_one_browser_comes_back_without_error():
    pool = BrowserPool(1)
    dead = FakeBrowser()
    windows = [Window(dead, str(i)) for i in range(3)]
    pool.browsers = [dead]
    for w in windows:  # three episodes of the dead browser end: the first drops it, none raises
        pool.release(w, healthy=False)
    assert pool.browsers == [] and dead.closed == 3


@pytest.fixture(scope="module")
def family():
    fam = MiniWoBFamily(names=SUPPORTED_TASKS, browsers=1, max_steps=10)
    yield fam
    fam.close()


def play(fam: MiniWoBFamily, name: str, seed: int = 0, **env_args) -> MiniWoBEnv:
    task = next(t for t in fam.tasks("train", len(fam.names), seed) if t.meta["name"] == name)
    return MiniWoBEnv(task, fam.pool, **env_args)


def target(obs: str, pattern: str) -> str:
    return re.search(rf"^#(\d+) {pattern}", obs, re.M).group(1)


@pytest.mark.slow
@browser
def test_a_text_only_oracle_solves_every_supported_task_through_the_rollout_engine(family, text_rollout):
    tasks = family.tasks("train", len(SUPPORTED_TASKS), seed=3)
    assert [t.meta["name"] for t in tasks] == list(SUPPORTED_TASKS)  # one episode of each
    groups, sampler = text_rollout(answer, tasks, family.make_env, max_turns=10)
    episodes = [g.episodes[0] for g in groups]
    failed = {
        e.task.id: [t.info.get("error") or t.status for t in e.turns] for e in episodes if e.stop_reason != "success"
    }
    assert not failed
    assert all(e.reward == 1.0 for e in episodes)
    for e in episodes:  # the first prompt is the page's task and screen, not the empty task.prompt
        assert e.task.prompt == "" and e.prompt.startswith("Task: ") and re.search(r"^#\d+ ", e.prompt, re.M)
    assert set(sampler.contexts) >= {e.prompt for e in episodes}
    assert len(SUPPORTED_TASKS) >= 12 and family.pool.started == 1


@pytest.mark.slow
@browser
def test_actions_do_what_the_docs_say_and_bad_ones_are_reported(family):
    async def run():
        env = play(family, "enter-text", boxes=True)
        try:
            obs = await env.reset()
            word = re.search(r'Enter "(.*)" into', obs).group(1)
            box, submit = target(obs, r"textbox"), target(obs, r"button Submit")
            assert re.search(rf"^#{submit} button Submit @\d+,\d+,\d+,\d+$", obs, re.M)  # boxes shown
            res = await env.step(out(Action("type", target=box, value="something else")))
            res = await env.step(out(Action("type", target=box, value=word)))
            assert res.status == "ok" and f"textbox [{word}]" in res.feedback  # type replaces the content
            assert res.feedback.startswith("Task: Enter")  # the feedback is the current screen
            bad = {
                "{not json": "parse_error",
                out(Action("click", target="999")): "no element #999 on screen",
                out(Action("click", point=(5000.0, 10.0))): "is outside the page",
                out(Action("type", target=submit, value="x")): "is not a text field",
                out(Action("select", target=box, value="x")): "is not a list of options",
            }
            for text, why in bad.items():
                res = await env.step(text)
                assert not res.done and res.score == 0.0 and res.status in ("parse_error", "bad_action")
                assert why in (res.status + res.feedback) and f"textbox [{word}]" in res.feedback
            x, y, w, h = map(
                int, re.search(rf"^#{submit} button Submit @(\S+)$", res.feedback, re.M).group(1).split(",")
            )
            res = await env.step(out(Action("click", point=(x + w / 2, y + h / 2))))  # a click by point
            assert res.done and res.success and res.score == 1.0 and res.status == "success"
            res = await env.step(out(Action("click", target=submit)))
            assert res.status == "over" and res.done
        finally:
            await env.close()

        env = play(family, "choose-list")
        try:
            obs = await env.reset()
            want = re.search(r"Select (.*) from the list", obs).group(1)
            lst = re.search(r"^#(\d+) combobox \[(.*)\] \{(.*)\}$", obs, re.M)
            assert want in lst.group(3).split("|")  # the options and the choice are shown
            res = await env.step(out(Action("select", target=lst.group(1), value="Atlantis")))
            assert res.status == "bad_action" and "has no option 'Atlantis'" in res.feedback
            res = await env.step(out(Action("select", target=lst.group(1), value=want.upper())))
            assert f"combobox [{want}]" in res.feedback
            res = await env.step(out(Action("wait")))
            assert res.status == "ok" and f"combobox [{want}]" in res.feedback
            res = await env.step(out(Action("click", target=target(obs, "button Submit"))))
            assert res.success and res.score == 1.0
        finally:
            await env.close()

    asyncio.run(run())


@pytest.mark.slow
@browser
def test_the_reward_does_not_depend_on_time_unless_asked(family):
    async def run():
        env = play(family, "click-test-2")
        try:
            obs = await env.reset()
            time.sleep(11)  # past the page's own ten seconds, which once ended the episode with -1
            res = await env.step(out(Action("click", target=target(obs, "button ONE"))))
            assert res.success and res.score == 1.0 and res.info["raw_reward"] == 1.0
        finally:
            await env.close()
        env = play(family, "click-test-2", reward="time_scaled")
        try:
            obs = await env.reset()
            env.t_first = time.monotonic() - 5  # as if the first action had come 5 s ago (of 10)
            res = await env.step(out(Action("click", target=target(obs, "button ONE"))))
            assert res.success and 0.0 < res.score <= 0.5
        finally:
            await env.close()

    asyncio.run(run())


@pytest.mark.slow
@browser
def test_the_pool_shares_a_browser_gives_each_episode_a_new_context_and_drops_a_dead_browser():
    pool = BrowserPool(1)
    fam = MiniWoBFamily(names=("click-test",))
    task = fam.tasks("train", 1)[0]

    async def episode() -> MiniWoBEnv:
        env = MiniWoBEnv(task, pool)
        await env.reset()
        return env

    async def run():
        first = await episode()
        handle, context = first.window.handle, first.window.context
        await first.close()
        second = await episode()  # the same browser, a new context (the first one is gone)
        assert second.window.browser is pool.browsers[0] and pool.started == 1
        assert second.window.context != context and handle not in second.window.browser.driver.window_handles
        second.window.browser.driver.quit()  # the browser dies under a live episode
        with pytest.raises(Exception):  # noqa: B017 (the engine reports it as env_error)
            await second.step(out(Action("click", target="1")))
        await second.close()
        assert pool.browsers == []
        third = await episode()
        assert pool.started == 2
        await third.close()

    try:
        asyncio.run(run())
    finally:
        pool.close()
    assert pool.browsers == []
    fam.close()


STATE_JS = """
localStorage.setItem('episode', arguments[0]); sessionStorage.setItem('episode', arguments[0]);
var left = document.createElement('div'); left.id = 'left-behind'; left.textContent = 'left by ' + arguments[0];
document.body.appendChild(left);
"""
READ_JS = """return [localStorage.getItem('episode'), sessionStorage.getItem('episode'),
        !!document.getElementById('left-behind'),
        document.hasFocus(), document.activeElement && document.activeElement.id];"""


@pytest.mark.slow
@browser
def test_no_state_of_one_episode_is_visible_in_another():
    """Storage, the page and the focus are each episode's own, in one shared browser."""
    pool = BrowserPool(1)
    task = MiniWoBFamily(names=("use-autocomplete",)).tasks("train", 1)[0]

    async def run():
        a, b = MiniWoBEnv(task, pool), MiniWoBEnv(task, pool)
        await a.reset()
        await b.reset()  # two live episodes in one browser, side by side
        assert a.window.browser is b.window.browser and a.window.context != b.window.context
        a.window.run(lambda d: d.execute_script(STATE_JS, "a"))
        a.window.run(lambda d: d.execute_script("document.getElementById('tags').focus()"))
        b.window.run(lambda d: d.execute_script("document.getElementById('tags').focus()"))
        seen_by_b = b.window.run(lambda d: d.execute_script(READ_JS))
        seen_by_a = a.window.run(lambda d: d.execute_script(READ_JS))
        assert seen_by_b == [None, None, False, True, "tags"]  # nothing of a's, and its own focus
        assert seen_by_a == ["a", "a", True, True, "tags"]  # b taking the focus did not blur a's field
        await a.close()
        c = MiniWoBEnv(task, pool)  # the next episode, after a's window came back
        await c.reset()
        assert c.window.run(lambda d: d.execute_script(READ_JS))[:3] == [None, None, False]
        assert "left by" not in c.observation() and pool.started == 1
        await b.close()
        await c.close()

    try:
        asyncio.run(run())
    finally:
        pool.close()


@pytest.mark.slow
@browser
def test_a_browser_that_fails_to_start_is_a_clear_error(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = MiniWoBEnv(MiniWoBFamily().tasks("train", 1)[0], BrowserPool(0, chromium=str(fake)))
    with pytest.raises(UserError, match=f"Chromium \\({fake}\\) failed to start"):
        asyncio.run(env.reset())


def live_in_group(pgid: int) -> list[int]:
    """Processes of process group `pgid` still running (zombies are dead: only their exit status is left)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            out.append(int(stat.parent.name))
    return out


def wait_until_gone(pgid: int, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := live_in_group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.slow
@browser
def test_a_browser_dying_under_several_windows_ends_those_episodes_and_leaves_no_process(text_rollout):
    fam = MiniWoBFamily(names=("click-test", "click-button"), browsers=1, max_steps=3)
    killed = []

    def killer(context: str) -> str:  # the first policy call kills chromedriver under three live windows
        if not killed:
            b = fam.pool.browsers[0]
            assert b.windows == 3 and len(live_in_group(b.pid)) > 3  # chromedriver, Chromium and its children
            os.kill(b.pid, signal.SIGKILL)
            killed.append(b)
        return answer(context)

    try:
        groups, _ = text_rollout(killer, fam.tasks("train", 3), fam.make_env, max_turns=3)
        episodes = [e for g in groups for e in g.episodes]
        assert [e.stop_reason for e in episodes] == ["env_error"] * 3  # the rollout itself went through
        for e in episodes:
            error = e.turns[-1].info["error"]
            assert error.startswith("BrowserDied: the browser serving this window died") and "\n" not in error
            assert re.search(
                r"(connection refused|connection reset by peer|remote end closed connection without response)\)", error
            )  # the cause, not urllib3's retries
            assert f"chromedriver pid {killed[0].pid}" in error
        assert fam.pool.browsers == []
        assert wait_until_gone(killed[0].pid) == []  # nothing reparented to pid 1 lives on
        groups, _ = text_rollout(answer, fam.tasks("train", 2, seed=1), fam.make_env, max_turns=3)
        assert all(e.success for g in groups for e in g.episodes) and fam.pool.started == 2  # a new browser
    finally:
        fam.close()
    assert all(wait_until_gone(b.pid) == [] for b in killed)


@pytest.mark.slow
@browser
def test_a_browser_that_died_idle_is_replaced_at_reset():
    pool = BrowserPool(1)
    task = MiniWoBFamily(names=("click-test",)).tasks("train", 1)[0]

    async def run():
        env = MiniWoBEnv(task, pool)
        await env.reset()
        await env.close()
        dead = pool.browsers[0]
        os.kill(dead.pid, signal.SIGKILL)  # dies while nobody uses it
        env = MiniWoBEnv(task, pool)
        assert "Task: " in await env.reset()  # on a new browser
        assert pool.started == 2 and dead not in pool.browsers
        await env.close()
        return dead

    try:
        dead = asyncio.run(run())
    finally:
        pool.close()
    assert wait_until_gone(dead.pid) == []


@pytest.mark.slow
@browser
def test_nothing_outlives_an_interpreter_whose_chromedriver_was_killed(tmp_path):
    script = (
        "import os, signal, sys\n"
        "from tempering.envs.gui.browser import BrowserPool\n"
        "pool = BrowserPool(2)\n"
        "windows = [pool.acquire() for _ in range(3)]\n"
        "print(' '.join(str(b.pid) for b in pool.browsers), flush=True)\n"
        "os.kill(pool.browsers[0].pid, signal.SIGKILL)\n"
        "sys.exit(0)  # the pool is never closed: interpreter exit closes what is left\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2 and all(wait_until_gone(p) == [] for p in pids)
