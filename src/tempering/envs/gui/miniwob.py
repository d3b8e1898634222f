"""MiniWoB++ pages in headless Chromium: the same text screens and JSON actions as the offline apps,
scored by MiniWoB's own reward. Needs the `gui` extra (`miniwob`, `selenium`) and Debian's `chromium`
and `chromium-driver`.

Chromium runs headless with background networking, sync, extensions and component updates off (the
machines have no internet), through the system chromedriver named explicitly, so that selenium never
tries to download a driver. Paths: TEMPERING_CHROMIUM and TEMPERING_CHROMEDRIVER override the
Debian defaults.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from dataclasses import dataclass
from typing import Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.gui.action import Action, parse_output
from tempering.envs.gui.env import observation
from tempering.envs.gui.screen import Element, Screen
from tempering.errors import UserError
from tempering.types import Task

CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
)
DEFAULT_TASKS = ("click-test-2", "click-button", "click-link", "click-checkboxes", "enter-text", "focus-text")
"""Small MiniWoB tasks whose actions fit the element-id action format."""

ROLES = {
    "button": "button",
    "input_button": "button",
    "input_submit": "button",
    "a": "link",
    "select": "combobox",
    "input_text": "textbox",
    "input_password": "textbox",
    "input_number": "textbox",
    "input_email": "textbox",
    "textarea": "textbox",
    "input_checkbox": "checkbox",
    "input_radio": "radio",
}
"""DOM tag (MiniWoB's `INPUT_type` form, lower-cased) -> role; other tags with text become `text`."""


def chromium_paths() -> tuple[str, str]:
    return (
        os.environ.get("TEMPERING_CHROMIUM", "/usr/bin/chromium"),
        os.environ.get("TEMPERING_CHROMEDRIVER", "/usr/bin/chromedriver"),
    )


def check_browser(chromium: str | None = None, chromedriver: str | None = None) -> tuple[str, str]:
    """The Chromium and chromedriver paths, or an error naming what is missing and how to install it."""
    default_chromium, default_driver = chromium_paths()
    chromium, chromedriver = chromium or default_chromium, chromedriver or default_driver
    try:
        import miniwob  # noqa: F401
        import selenium  # noqa: F401
    except ImportError as e:
        raise UserError(
            f"the MiniWoB environment needs the `gui` extra ({e.name} is missing): pip install 'tempering[gui]'"
        ) from e
    needed = (("Chromium", chromium, "TEMPERING_CHROMIUM"), ("chromedriver", chromedriver, "TEMPERING_CHROMEDRIVER"))
    for what, path, var in needed:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UserError(
                f"{what} not found at {path}: install Debian's packages (apt-get install chromium "
                f"chromium-driver) or point {var} at it"
            )
    return chromium, chromedriver


def _environment(task_name: str, chromium: str, chromedriver: str):
    """A MiniWoB gymnasium environment whose browser is launched with our flags and driver."""
    from miniwob.environment import MiniWoBEnvironment
    from miniwob.selenium_instance import SeleniumInstance
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.wait import WebDriverWait

    class Instance(SeleniumInstance):
        def create_driver(self):
            options = webdriver.ChromeOptions()
            options.binary_location = chromium
            for flag in CHROME_FLAGS:
                options.add_argument(flag)
            try:
                self.driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
            except WebDriverException as e:
                msg = (e.msg or str(e)).strip().splitlines()[0]
                raise UserError(
                    f"Chromium ({chromium}) failed to start through {chromedriver}: {msg}; check that "
                    "the chromium and chromium-driver packages have the same version"
                ) from e
            self.driver.implicitly_wait(5)
            self.driver.get(self.url)
            WebDriverWait(self.driver, 5).until(EC.element_to_be_clickable((By.ID, self.SYNC_SCREEN_ID)))
            self.inner_width, self.inner_height = self.driver.execute_script(
                "return [window.innerWidth, window.innerHeight];"
            )

    class Environment(MiniWoBEnvironment):
        def _hard_reset_instance(self):
            if getattr(self, "instance", None):
                self.instance.close()
            self.instance = Instance(index=0, **self.instance_kwargs)
            self.instance.start()

    return Environment(subdomain=task_name)


def dom_screen(obs: dict[str, Any]) -> Screen:
    """MiniWoB's DOM elements -> a screen: interactive elements and leaves with text, ids = MiniWoB refs.
    A box without text takes the text that follows it in its label (`<label><input> text</label>`)."""
    els: list[Element] = []
    last_parent: dict[int, Element] = {}
    for d in obs["dom_elements"]:
        tag = str(d["tag"]).lower()
        role = ROLES.get(tag)
        text = str(d.get("text") or "").strip()
        parent = int(d.get("parent") or 0)
        if role is None:
            if not text or tag in ("body", "html"):
                continue
            prev = last_parent.get(parent)
            if tag == "t" and prev is not None and prev.role in ("checkbox", "radio") and not prev.text:
                prev.text = text[:40]
                continue
            role = "text"
        state = ""
        value = d.get("value")
        if role in ("checkbox", "radio"):
            state = "on" if value in (True, "true", "True", 1) else "off"
        elif role == "textbox":
            state = str(value or "")
        box = tuple(
            int(round(float(v if not hasattr(v, "__len__") else v[0])))
            for v in (d["left"], d["top"], d["width"], d["height"])
        )
        els.append(Element(str(int(d["ref"])), role, text[:40], box, state))
        last_parent[parent] = els[-1]
    return Screen("Page", els)


def to_miniwob(env, action: Action, screen: Screen):
    """Our action -> a MiniWoB action dict; raises ValueError for what the page cannot do."""
    import numpy as np

    if action.type == "scroll":
        kind = "SCROLL_DOWN_COORDS" if action.value == "down" else "SCROLL_UP_COORDS"
        return env.create_action(kind, coords=np.array([80.0, 105.0], dtype=np.float32))
    if action.type == "click" and action.point is not None:
        return env.create_action("CLICK_COORDS", coords=np.array(action.point, dtype=np.float32))
    if screen.find(action.target or "") is None:
        ids = ", ".join(f"#{e.id}" for e in screen.elements)
        raise ValueError(f"no element #{action.target} on screen (ids: {ids})")
    ref = int(action.target)
    if action.type == "click":
        return env.create_action("CLICK_ELEMENT", ref=ref)
    if action.type == "type":
        return env.create_action("FOCUS_ELEMENT_AND_TYPE_TEXT", ref=ref, text=action.value or "")
    raise ValueError("select is not supported on MiniWoB pages; click the option instead")


class MiniWoBEnv(Env):
    """One MiniWoB episode in its own headless browser (started on `reset`, closed by `close`)."""

    def __init__(self, task: Task, max_steps: int = 10, chromium: str | None = None, chromedriver: str | None = None):
        super().__init__(task)
        self.max_steps = max_steps
        self.chromium, self.chromedriver = chromium, chromedriver
        self.env = None
        self.obs: dict[str, Any] | None = None
        self.steps = 0

    def reset(self) -> str:
        if self.env is None:
            chromium, chromedriver = check_browser(self.chromium, self.chromedriver)
            self.env = _environment(self.task.meta["name"], chromium, chromedriver)
        self.obs, _ = self.env.reset(seed=self.task.meta["seed"], options={"record_screenshots": False})
        self.steps = 0
        return self.observation()

    def observation(self) -> str:
        return observation(self.obs["utterance"], dom_screen(self.obs))

    def step_sync(self, text: str) -> StepResult:
        if self.obs is None:
            self.reset()
        parsed = parse_output(text)
        self.steps += 1
        out_of_steps = self.steps >= self.max_steps
        info: dict[str, Any] = {"format_ok": parsed.ok, "action": parsed.action.to_json() if parsed.action else None}
        if not parsed.ok:
            feedback = f"Error: {parsed.error}\n{self.observation()}"
            return StepResult(0.0, False, out_of_steps, feedback, "parse_error", info)
        try:
            action = to_miniwob(self.env, parsed.action, dom_screen(self.obs))
        except ValueError as e:
            return StepResult(0.0, False, out_of_steps, f"Error: {e}\n{self.observation()}", "bad_action", info)
        self.obs, reward, done, _, meta = self.env.step(action)
        raw = float(meta.get("raw_reward") or 0.0)
        info.update(raw_reward=raw, reason=meta.get("reason"))
        success = bool(done) and raw >= 1.0 - 1e-9
        status = ("success" if success else "failed") if done else "ok"
        feedback = "" if done else self.observation()
        return StepResult(float(reward), success, bool(done) or out_of_steps, feedback, status, info)

    async def step(self, action: str) -> StepResult:
        return await asyncio.to_thread(self.step_sync, action)

    async def close(self) -> None:
        if self.env is not None:
            env, self.env = self.env, None
            await asyncio.to_thread(env.close)


@dataclass
class MiniWoBFamily(TaskFamily):
    """MiniWoB++ tasks; a task is (page, episode seed), and splits are disjoint by hash."""

    names: tuple[str, ...] = DEFAULT_TASKS
    """MiniWoB task names (the page file names, e.g. `click-test-2`)."""
    heldout_share: float = 0.2
    """Share of (page, seed) pairs reserved for the held-out split."""
    max_steps: int = 10
    """Step limit per episode."""
    name: str = "miniwob"

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
                    prompt="",
                    family=self.name,
                    meta={"name": page, "seed": ep, "split": split},
                )
            )
        return out

    def make_env(self, task: Task) -> MiniWoBEnv:
        return MiniWoBEnv(task, self.max_steps)
