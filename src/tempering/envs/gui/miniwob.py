"""MiniWoB++ pages in headless Chromium: the same text screens and JSON actions as the offline apps,
scored by the task's own success reward. Needs the `gui` extra (`miniwob`, `selenium`) and Debian's
`chromium` and `chromium-driver` (see `browser.py`).

The pages come from the `miniwob` package; this module drives them itself through selenium, so that
one browser window serves episode after episode of any task (`BrowserPool`), and so that what the
policy reads and does is what docs/gui.md says:

- the screen lists the page's targets (links, buttons, text fields, boxes, lists with their options
  and choice, ARIA widgets, and elements with click handlers) with stable ids, and the rest of the
  page as plain text lines without ids; `boxes=True` adds each target's box for clicks by point;
- `click` is a real mouse click, `type` replaces the field's content with real key strokes, `select`
  chooses an option of a list, `scroll` turns the wheel over the task area, `wait` lets the page
  change; a bad action is reported in the step result, never raised;
- after every action (and after the first screen appears) the page is given time to settle: until no
  short timer is pending and the DOM has been quiet for `QUIET_S`, at most `SETTLE_S`;
- the page's own ten-second episode timer is switched off, and the score is the task's success reward
  max(0, raw) in [0, 1], whatever the time; `reward="time_scaled"` scales it as MiniWoB does, by the
  time from the first action to the end of the episode.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.gui.action import Action, parse_output
from tempering.envs.gui.app import norm
from tempering.envs.gui.browser import BrowserDied, BrowserPool, Window, check_browser
from tempering.envs.gui.env import FEEDBACK_TEMPLATE, observation
from tempering.envs.gui.miniwob_oracle import ORACLE_TASKS
from tempering.envs.gui.screen import Element, Screen
from tempering.errors import UserError
from tempering.types import Task

SUPPORTED_TASKS = ORACLE_TASKS
"""MiniWoB tasks the screen text and the actions are known to be enough for: a scripted policy that reads
only the observation solves each one through the rollout engine (tests/envs/gui/test_gui_miniwob.py)."""

_EXCLUDED_BY_REASON = {
    "the screen does not show colours (the task names a colour)": (
        "click-color",
        "click-shades",
        "use-colorwheel",
        "use-colorwheel-2",
        "simon-says",
    ),
    "its targets are shapes drawn on a canvas or SVG, which the screen text does not describe": (
        "click-shape",
        "count-shape",
        "count-sides",
        "identify-shape",
        "visual-addition",
        "grid-coordinate",
        "circle-center",
        "find-midpoint",
        "right-angle",
        "bisect-angle",
    ),
    "it needs a drag (press, move, release: also to select text), and the actions have no drag": (
        "drag-box",
        "drag-circle",
        "drag-cube",
        "drag-items",
        "drag-items-grid",
        "drag-shapes",
        "drag-shapes-2",
        "drag-single-shape",
        "drag-sort-numbers",
        "draw-circle",
        "draw-line",
        "highlight-text",
        "highlight-text-2",
        "resize-textarea",
        "text-editor",
        "use-slider",
        "use-slider-2",
    ),
    "it needs the pointer to hover, and the actions have no hover": ("hover-shape",),
    "its targets move: a screen is stale by the time the click arrives": ("chase-circle", "moving-items"),
    "it needs the Enter key, and `type` enters text only": ("terminal",),
}
_NOT_CHECKED = (
    "no scripted policy solves it from the screen text yet, so whether the observation and the actions are "
    "enough for it is unchecked"
)
UNSUPPORTED_TASKS: dict[str, str] = {n: why for why, names in _EXCLUDED_BY_REASON.items() for n in names} | {
    n: _NOT_CHECKED
    for n in """
        ascending-numbers book-flight book-flight-nodelay button-delay buy-ticket choose-date
        choose-date-easy choose-date-medium choose-date-nodelay click-button-sequence
        click-checkboxes-large click-checkboxes-soft click-menu click-menu-2 click-checkboxes-transfer
        click-collapsible-2 click-collapsible-2-nodelay click-collapsible-nodelay click-pie
        click-pie-nodelay click-tab-2-easy click-tab-2-hard click-tab-2-medium click-test-transfer
        copy-paste copy-paste-2 daily-calendar email-inbox email-inbox-delete email-inbox-forward
        email-inbox-forward-nl email-inbox-forward-nl-turk email-inbox-important email-inbox-nl-turk
        email-inbox-noscroll email-inbox-reply email-inbox-star-reply enter-date enter-time
        find-greatest find-word form-sequence form-sequence-2 form-sequence-3 generate-number
        guess-number hot-cold login-user-popup multi-layouts multi-orderings navigate-tree
        number-checkboxes odd-or-even order-food phone-book read-table read-table-2 scroll-text
        scroll-text-2 search-engine sign-agreement simple-algebra social-media social-media-all
        social-media-some stock-market text-transform tic-tac-toe unicode-test use-autocomplete-nodelay
        use-spinner
    """.split()  # noqa: SIM905
}
"""Every other task page of the `miniwob` package, with the reason it is refused (a test checks that the
two lists cover every page)."""

DEFAULT_TASKS = ("click-test-2", "click-button", "click-link", "click-checkboxes", "enter-text", "focus-text")
"""Small MiniWoB tasks whose actions fit the element-id action format."""


def check_task(name: str) -> None:
    """Refuse a task that is not in `SUPPORTED_TASKS`, with the reason."""
    if name in SUPPORTED_TASKS:
        return
    if name in UNSUPPORTED_TASKS:
        why = UNSUPPORTED_TASKS[name]
    elif importlib.util.find_spec("miniwob"):
        page_url(name)  # no such page: says so
        why = "it is newer than this list: " + _NOT_CHECKED
    else:
        why = "it is not a task this list knows"
    raise UserError(
        f"miniwob: task {name!r} is not supported: {why}. Supported tasks: {', '.join(SUPPORTED_TASKS)} "
        "(see docs/gui.md)"
    )


SETTLE_S = 2.0
"""Longest wait for a page to settle after an action."""
QUIET_S = 0.05
"""A page has settled when no short timer is pending and its DOM has not changed for this long."""
WAIT_S = 1.0
"""What the `wait` action waits (then the page settles as after any action)."""
EPISODE_MS = 86_400_000
"""The page's episode timer while an episode runs (a day: it never ends an episode by itself)."""

INSTALL_JS = r"""
var trackMs = arguments[0];
if (window.__tp) return;
var tp = window.__tp = {last: Date.now(), timers: new Set(), next: 1, maxTime: core.EPISODE_MAX_TIME};
var hud = document.getElementById('reward-display');
new MutationObserver(function (records) {
  for (var i = 0; i < records.length; i++) {
    if (!(hud && hud.contains(records[i].target))) { tp.last = Date.now(); return; }
  }
}).observe(document.documentElement, {subtree: true, childList: true, attributes: true, characterData: true});
var setT = window.setTimeout, clearT = window.clearTimeout;
window.setTimeout = function (fn, ms) {
  if (typeof fn !== 'function' || ms > trackMs) return setT.apply(window, arguments);
  var args = Array.prototype.slice.call(arguments, 2);
  var id = setT(function () { tp.timers.delete(id); fn.apply(window, args); }, ms);
  tp.timers.add(id);
  return id;
};
window.clearTimeout = function (id) { tp.timers.delete(id); return clearT(id); };
return [window.innerWidth, window.innerHeight];
"""
"""Once per page load: count pending short timers and note DOM changes (outside MiniWoB's own reward
display), so that Python can tell when the page has settled; keeps the page's episode time."""

BEGIN_JS = r"""
Math.seedrandom(arguments[0]);
core.setDataMode('train');
core.EPISODE_MAX_TIME = arguments[1];
document.querySelectorAll('[data-tp-id]').forEach(function (e) { delete e.dataset.tpId; });
window.__tp.next = 1;
core.startEpisodeReal();
core.clearTimer();
return window.__tp.maxTime;
"""
"""A new episode from a seed, with the page's timer pushed out of reach (its countdown display off)."""

SETTLED_JS = "return window.__tp.timers.size === 0 && Date.now() - window.__tp.last >= arguments[0];"
STATUS_JS = "return [WOB_TASK_READY, WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];"

OBSERVE_JS = r"""
var tp = window.__tp;
var SKIP = {'reward-display': 1, 'sync-task-cover': 1, 'click-canvas': 1, 'query': 1, 'attention-canvas': 1};
var ARIA = {button: 1, link: 1, tab: 1, checkbox: 1, radio: 1, menuitem: 1, option: 1, 'switch': 1,
            treeitem: 1, textbox: 1, combobox: 1, slider: 1, spinbutton: 1};
var CONTROLS = 'input:not([type=hidden]),select,textarea,button';
var NATIVE = CONTROLS + ',a,[role]';
function clean(s, n) { s = (s || '').replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 3) + '...' : s; }
function textOf(el) { return el.innerText !== undefined ? el.innerText : el.textContent; }
function shown(el) {
  var s = getComputedStyle(el);
  return s.display !== 'none' && s.visibility !== 'hidden' && parseFloat(s.opacity) > 0;
}
function hasHandler(el) {
  if (el.onclick || el.onmousedown || el.onmouseup || el.__onclick || el.__onmousedown || el.__onmouseup) return true;
  if (el.__on) for (var i = 0; i < el.__on.length; i++) if (/^(click|mousedown|mouseup)$/.test(el.__on[i].type)) return true;
  var jq = window.jQuery && jQuery._data && jQuery._data(el, 'events');
  return !!(jq && (jq.click || jq.mousedown || jq.mouseup));
}
function pointerInside(el) {
  return Array.prototype.some.call(el.querySelectorAll('*'), function (d) { return getComputedStyle(d).cursor === 'pointer'; });
}
function roleOf(el) {
  var tag = el.tagName.toLowerCase(), aria = (el.getAttribute('role') || '').toLowerCase();
  if (tag === 'input') {
    var t = (el.getAttribute('type') || 'text').toLowerCase();
    if (t === 'checkbox' || t === 'radio') return t;
    if (t === 'button' || t === 'submit' || t === 'reset' || t === 'image') return 'button';
    if (t === 'range') return 'slider';
    return 'textbox';
  }
  if (tag === 'textarea') return 'textarea';
  if (tag === 'select') return el.multiple ? 'listbox' : 'combobox';
  if (tag === 'button') return 'button';
  if (el.querySelector(CONTROLS)) return null;  // a container of controls: its controls are the targets
  if (ARIA[aria]) return aria;
  if (tag === 'a') return 'link';
  if (el.querySelector(NATIVE)) return null;
  if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';
  var pointer = getComputedStyle(el).cursor === 'pointer';
  var own = pointer ? !(el.parentElement && getComputedStyle(el.parentElement).cursor === 'pointer')
                    : hasHandler(el) && !pointerInside(el);  // a handler for its pointer-shaped items
  if (own) {
    return getComputedStyle(el).textDecorationLine.indexOf('underline') >= 0 ? 'link' : 'button';
  }
  return null;
}
function label(el, role) {
  if (role === 'checkbox' || role === 'radio' || role === 'textbox' || role === 'textarea' || role === 'slider') {
    var l = el.labels && el.labels.length ? textOf(el.labels[0]) : '';
    return clean(l || el.getAttribute('aria-label') || el.getAttribute('placeholder') || '', 60);
  }
  if (el.tagName.toLowerCase() === 'input') return clean(el.value || el.getAttribute('aria-label') || '', 60);
  if (role === 'combobox' || role === 'listbox') return clean(el.getAttribute('aria-label') || '', 60);
  var cls = typeof el.className === 'string' ? el.className : '';  // an icon's class often names it
  return clean(textOf(el) || el.getAttribute('aria-label') || el.getAttribute('title') || el.getAttribute('alt') || cls, 60);
}
function stateOf(el, role) {
  var tag = el.tagName.toLowerCase();
  if (tag === 'select') {
    var chosen = Array.prototype.filter.call(el.options, function (o) { return o.selected; });
    return chosen.map(function (o) { return clean(o.text, 60); }).join(', ');
  }
  if (role === 'checkbox' || role === 'radio') {
    if (tag === 'input') return el.checked ? 'on' : 'off';
    return el.getAttribute('aria-checked') === 'true' ? 'on' : 'off';
  }
  if (role === 'textbox' || role === 'textarea') {
    return clean(tag === 'input' || tag === 'textarea' ? el.value : textOf(el), 100);
  }
  if (el.hasAttribute('aria-selected')) return el.getAttribute('aria-selected') === 'true' ? 'selected' : '';
  if (el.hasAttribute('aria-expanded')) return el.getAttribute('aria-expanded') === 'true' ? 'expanded' : 'collapsed';
  if (el.disabled) return 'disabled';
  return '';
}
function target(el, role) {
  if (!el.dataset.tpId) el.dataset.tpId = String(tp.next++);
  var r = el.getBoundingClientRect();
  var item = {id: el.dataset.tpId, role: role, text: label(el, role), state: stateOf(el, role),
              box: [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)], options: []};
  if (el.tagName.toLowerCase() === 'select') {
    item.options = Array.prototype.map.call(el.options, function (o) { return clean(o.text, 60); });
  }
  return item;
}
function walk(el) {
  if (SKIP[el.id] || /^(script|style|noscript|head|template)$/i.test(el.tagName) || !shown(el)) return [];
  var role = roleOf(el);
  if (role) return [target(el, role)];
  var items = [], run = '', isLabel = el.tagName.toLowerCase() === 'label' && el.control;
  el.childNodes.forEach(function (child) {
    if (child.nodeType === 3) { if (!isLabel) run += ' ' + child.data; return; }
    if (child.nodeType !== 1) return;
    if (clean(run, 200)) items.push({id: '', role: 'text', text: clean(run, 200)});
    run = '';
    items = items.concat(walk(child));
  });
  if (clean(run, 200)) items.push({id: '', role: 'text', text: clean(run, 200)});
  if (items.some(function (x) { return x.id; })) return items;
  if (isLabel) return [];
  var text = clean(textOf(el), 200);
  return text ? [{id: '', role: 'text', text: text}] : [];
}
return {utterance: core.getUtterance(), elements: walk(document.body)};
"""
"""The page as a screen: targets with ids (kept across steps of an episode), the rest as text lines."""


class ActionFailed(Exception):
    """The action cannot be done on this page; the message says why (shown to the policy)."""


def page_url(name: str) -> str:
    """The file URL of a task's page in the `miniwob` package."""
    try:
        import miniwob
    except ImportError as e:
        raise UserError("the MiniWoB environment needs the `gui` extra: pip install 'tempering[gui]'") from e

    path = Path(miniwob.__file__).parent / "html" / "miniwob" / f"{name}.html"
    if not path.is_file():
        raise UserError(f"miniwob: no task page named {name!r} (looked for {path})")
    return path.as_uri()


def page_screen(elements: list[dict[str, Any]]) -> Screen:
    """The page's elements (OBSERVE_JS) -> a screen; text lines have the empty id."""
    return Screen(
        "Page",
        [
            Element(
                e["id"],
                e["role"],
                e["text"],
                tuple(e.get("box", (0, 0, 0, 0))),
                e.get("state", ""),
                tuple(e.get("options", ())),
            )
            for e in elements
        ],
    )


def _targets(screen: Screen) -> str:
    return ", ".join(f"#{e.id}" for e in screen.elements if e.id) or "none"


def _act(driver, window: Window, action: Action, screen: Screen) -> None:
    """Do `action` on the page; ActionFailed says why it cannot be done."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        InvalidElementStateException,
        MoveTargetOutOfBoundsException,
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    width, height = window.state["viewport"]
    if action.type == "scroll":
        x, y, w, h = driver.execute_script(
            "var r = (document.getElementById('area') || document.body).getBoundingClientRect();"
            "return [r.left, r.top, r.width, r.height];"
        )
        cx, cy = int(min(max(x + w / 2, 0), width - 1)), int(min(max(y + h / 2, 0), height - 1))
        dy = 100 if action.value == "down" else -100
        ActionChains(driver).scroll_from_origin(ScrollOrigin.from_viewport(cx, cy), 0, dy).perform()
        return
    if action.point is not None:
        x, y = action.point
        if not (0 <= x < width and 0 <= y < height):
            raise ActionFailed(f"point ({x:g}, {y:g}) is outside the page ({width} x {height})")
        chain = ActionChains(driver, duration=0)
        chain.w3c_actions.pointer_action.move_to_location(int(x), int(y))
        chain.w3c_actions.pointer_action.click()
        try:
            chain.w3c_actions.perform()
        except MoveTargetOutOfBoundsException as e:
            raise ActionFailed(f"point ({x:g}, {y:g}) is outside the page") from e
        return
    el = screen.find(action.target or "") if action.target else None
    if el is None:
        raise ActionFailed(f"no element #{action.target} on screen (targets: {_targets(screen)})")
    name = f"#{el.id} ({el.role}{' ' + el.text if el.text else ''})"
    try:
        node = driver.find_element(By.CSS_SELECTOR, f'[data-tp-id="{el.id}"]')
        if action.type == "click":
            node.click()
        elif action.type == "type":
            if el.role not in ("textbox", "textarea"):
                raise ActionFailed(f"{name} is not a text field")
            node.clear()
            node.send_keys(action.value or "")
        elif action.type == "select":
            if el.role not in ("combobox", "listbox") or node.tag_name.lower() != "select":
                raise ActionFailed(f"{name} is not a list of options")
            index = next((i for i, o in enumerate(el.options) if norm(o) == norm(action.value or "")), None)
            if index is None:
                raise ActionFailed(f"{name} has no option {action.value!r} (options: {', '.join(el.options)})")
            Select(node).select_by_index(index)
    except NoSuchElementException as e:
        raise ActionFailed(f"{name} is gone from the page") from e
    except StaleElementReferenceException as e:
        raise ActionFailed(f"{name} changed while it was used; look at the new screen") from e
    except ElementClickInterceptedException as e:
        raise ActionFailed(f"{name} is covered by another element: a click there would hit that one") from e
    except (ElementNotInteractableException, InvalidElementStateException) as e:
        raise ActionFailed(f"{name} cannot be used now (hidden, disabled or read-only)") from e


class MiniWoBEnv(Env):
    """One MiniWoB episode in a window lent by the family's browser pool (taken on `reset`, given back by
    `close`)."""

    def __init__(
        self,
        task: Task,
        pool: BrowserPool,
        max_steps: int = 10,
        boxes: bool = False,
        reward: str = "success",
    ):
        super().__init__(task)
        self.pool, self.max_steps, self.boxes, self.reward = pool, max_steps, boxes, reward
        self.url = page_url(task.meta["name"])
        self.window: Window | None = None
        self.broken = False
        """An unexpected error happened: the window's page (or browser) is in doubt."""
        self.screen = Screen("Page", [])
        self.utterance = ""
        self.steps = 0
        self.page_ms = 10_000
        """The page's own episode time (the scale of the time-scaled reward)."""
        self.t_first: float | None = None
        """When the first action arrived (the clock of the time-scaled reward)."""
        self.over = False

    # -- blocking core (selenium), run in worker threads by the async methods --

    def _settle(self, extra_s: float = 0.0) -> None:
        assert self.window is not None
        if extra_s:
            time.sleep(extra_s)
        deadline = time.monotonic() + SETTLE_S
        while not self.window.run(lambda d: d.execute_script(SETTLED_JS, int(QUIET_S * 1000))):
            if time.monotonic() >= deadline:
                return
            time.sleep(QUIET_S / 2)

    def _observe(self) -> str:
        assert self.window is not None
        page = self.window.run(lambda d: d.execute_script(OBSERVE_JS))
        self.utterance, self.screen = page["utterance"], page_screen(page["elements"])
        return self.observation()

    def observation(self) -> str:
        return observation(self.utterance, self.screen, self.boxes)

    def _begin(self, driver) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as EC
        from selenium.webdriver.support.wait import WebDriverWait

        assert self.window is not None
        if self.window.page != self.url:
            driver.get(self.url)
            WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "sync-task-cover")))
            self.window.state["viewport"] = driver.execute_script(INSTALL_JS, int(SETTLE_S * 1000))
            self.window.page = self.url
        self.page_ms = int(driver.execute_script(BEGIN_JS, self.task.meta["seed"], EPISODE_MS))

    def reset_sync(self) -> str:
        self.steps, self.t_first, self.over = 0, None, False
        for attempt in (1, 2):  # a window of a browser that died since its last episode: once more, anew
            try:
                if self.window is None:
                    self.window = self.pool.acquire()
                return self._start_page()
            except BrowserDied:
                if attempt == 2:
                    self.broken = True
                    self.close_sync()
                    raise
                if self.window is not None:
                    window, self.window = self.window, None
                    self.pool.release(window, healthy=False)
            except BaseException:
                self.broken = True
                self.close_sync()  # nobody closes an environment whose reset failed
                raise
        raise AssertionError("unreachable")

    def _start_page(self) -> str:
        assert self.window is not None
        self.window.run(self._begin)
        for _ in range(100):  # a page may say it is still building its task
            if self.window.run(lambda d: d.execute_script(STATUS_JS))[0]:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"MiniWoB page {self.task.meta['name']} did not get ready within 5 s")
        self._settle()
        return self._observe()

    def step_sync(self, text: str) -> StepResult:
        if self.window is None:
            raise UserError("MiniWoBEnv.step before reset(): the rollout engine resets every environment first")
        if self.t_first is None:
            self.t_first = time.monotonic()
        if self.over:
            return StepResult(0.0, False, True, "the episode is over", "over")
        parsed = parse_output(text)
        self.steps += 1
        out_of_steps = self.steps >= self.max_steps
        info: dict[str, Any] = {"format_ok": parsed.ok, "action": parsed.action.to_json() if parsed.action else None}
        try:
            if not parsed.ok:
                self.over = out_of_steps
                return StepResult(
                    0.0, False, out_of_steps, f"Error: {parsed.error}\n{self._observe()}", "parse_error", info
                )
            action = parsed.action
            assert action is not None
            error = ""
            if action.type != "wait":
                try:
                    window = self.window  # checked above; a lambda does not keep the narrowing of self.window
                    self.window.run(lambda d: _act(d, window, action, self.screen))
                except ActionFailed as e:
                    error = str(e)
            self._settle(WAIT_S if action.type == "wait" else 0.0)
            _, done, raw, reason = self.window.run(lambda d: d.execute_script(STATUS_JS))
        except BaseException:
            self.broken = True
            raise
        info.update(error=error, raw_reward=float(raw or 0.0) if done else None, reason=reason)
        if done:
            self.over = True
            raw = float(raw or 0.0)
            success = raw >= 1.0 - 1e-9
            score = max(0.0, raw)
            seconds = time.monotonic() - self.t_first
            if self.reward == "time_scaled":
                score *= max(0.0, 1.0 - seconds * 1000 / self.page_ms)
            info.update(outcome="success" if success else "failed", seconds=seconds)
            return StepResult(score, success, True, "", "success" if success else "failed", info)
        self.over = out_of_steps
        info["outcome"] = "max_steps" if out_of_steps else ""
        screen = self._observe()
        if error:
            return StepResult(0.0, False, out_of_steps, f"Error: {error}\n{screen}", "bad_action", info)
        return StepResult(0.0, False, out_of_steps, screen, "ok", info)

    # -- the Env interface --

    async def reset(self) -> str:
        return await asyncio.to_thread(self.reset_sync)

    async def step(self, action: str) -> StepResult:
        return await asyncio.to_thread(self.step_sync, action)

    def close_sync(self) -> None:
        if self.window is not None:
            window, self.window = self.window, None
            self.pool.release(window, healthy=not self.broken)

    async def close(self) -> None:
        await asyncio.to_thread(self.close_sync)


@dataclass
class MiniWoBFamily(TaskFamily):
    """MiniWoB++ tasks; a task is (page, episode seed), and splits are disjoint by hash."""

    names: tuple[str, ...] = DEFAULT_TASKS
    """MiniWoB task names (the page file names, e.g. `click-test-2`)."""
    heldout_share: float = 0.2
    """Share of (page, seed) pairs reserved for the held-out split."""
    max_steps: int = 10
    """Step limit per episode."""
    boxes: bool = False
    """Show each target's box `@x,y,w,h` (for clicks by point; longer prompts)."""
    reward: str = "success"
    """`success`: the task's success reward max(0, raw) in [0, 1], whatever the time; `time_scaled`:
    scaled by the time from the first action to the end of the episode, as MiniWoB's own reward."""
    browsers: int = 1
    """Chromium processes shared by all episodes (one window each, reused across episodes); 0: every
    episode starts and quits its own browser (no pool)."""
    name: str = "miniwob"
    feedback_template: ClassVar[str] = FEEDBACK_TEMPLATE
    """The `rollout.feedback_template` for these tasks: the new screen, last (see docs/gui.md)."""
    pool: BrowserPool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.names = tuple(self.names)
        if not self.names:
            raise UserError("miniwob: names must list at least one task")
        for n in self.names:
            check_task(n)
        if self.reward not in ("success", "time_scaled"):
            raise UserError(f"miniwob: reward must be 'success' or 'time_scaled', got {self.reward!r}")
        if self.max_steps < 1:
            raise UserError(f"miniwob: max_steps must be >= 1, got {self.max_steps}")
        self.pool = BrowserPool(self.browsers)

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "heldout"):
            raise UserError(f"miniwob: split must be 'train' or 'heldout', got {split!r}")
        out = []
        for i in range(n):
            page = self.names[i % len(self.names)]
            rng = random.Random(f"{seed}:{page}:{i}")
            while True:
                ep = rng.randrange(2**31)
                bucket = int(hashlib.sha1(f"{page}:{ep}".encode()).hexdigest()[:8], 16) % 1000
                if (bucket < self.heldout_share * 1000) == (split == "heldout"):
                    break
            out.append(
                Task(
                    id=f"miniwob/{page}/{ep}",
                    prompt="",  # the page makes the task: the first observation comes from reset()
                    family=self.name,
                    meta={"name": page, "seed": ep, "split": split},
                )
            )
        return out

    def make_env(self, task: Task) -> MiniWoBEnv:
        check_browser()
        return MiniWoBEnv(task, self.pool, self.max_steps, self.boxes, self.reward)

    def close(self) -> None:
        """Quit the pool's browsers (they are also quit at interpreter exit)."""
        self.pool.close()
