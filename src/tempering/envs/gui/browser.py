"""Headless Chromium for live GUI pages: one process serves many episodes (one window each), and a pool
reuses processes and windows across episodes. Needs the `gui` extra (selenium) and Debian's `chromium`
and `chromium-driver`.

Chromium runs headless with background networking, sync, extensions and component updates off (the
machines have no internet) and without throttling of background windows (every episode's page keeps
its timers), through the system chromedriver named explicitly, so that selenium never tries to
download a driver. TEMPERING_CHROMIUM and TEMPERING_CHROMEDRIVER override the Debian paths.

A `Browser` is one Chromium process. Its driver talks to one window at a time, so every command on a
window goes through `Window.run`, which holds the browser's lock and switches to that window. Each window
is the only page of a browser context of its own (Chromium's incognito-like contexts, made through the
browser's DevTools endpoint): its storage, cookies and cache are its own, its focus is its own (headless
Chromium blurs no window when another takes the focus), the session's input state (keys or buttons held)
is released when it opens, and returning it disposes the context with everything the episode left: the
next episode loads its page afresh, with nothing on it from the one before. A `BrowserPool` lends such windows from the least busy of at
most `size` browsers: the processes are shared, nothing of one episode is visible to the next. Size 0 is
no pool: every window gets a private browser, quit when the window is returned. Browsers are closed with
their pool, when one stops answering, and at interpreter exit.

A browser that dies (Chromium or its chromedriver killed, out of memory) fails the command in flight with
`BrowserDied`, one line naming the browser and the cause (e.g. `connection refused`): the engine counts
it as an environment error of that episode, every other window of that browser fails the same way, and
the pool drops the browser and starts a new one for later episodes. chromedriver starts in a session of
its own, so Chromium and every process it forks share one process group: closing a browser (and
interpreter exit) kills that whole group, so nothing is left running after its driver died. Its
profile and every temporary file Chromium makes live in one folder of its own (TMPDIR), removed on close.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from tempering.errors import UserError

T = TypeVar("T")

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
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)

_LIVE: set[Browser] = set()
"""Every browser not yet closed (closed at interpreter exit)."""


class BrowserDied(RuntimeError):
    """The Chromium process serving a window (or its chromedriver) stopped answering."""


def _cause(e: BaseException) -> str:
    """The first line of the innermost reason of a driver error (`connection refused`, `chrome not
    reachable`), not the 100-line traceback of urllib3's retries."""
    text = (getattr(e, "msg", None) or str(e)).strip()
    os_error = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)|Error\(\d+, '([^']+)'\)|RemoteDisconnected\('([^']+)'\)", text)
    if os_error:
        return "".join(os_error[-1]).strip().lower()
    return (text.splitlines() or [type(e).__name__])[0][:200]


def _is_driver_error(e: BaseException) -> bool:
    """An error of the connection to the browser (not of the page or of what its user asked)."""
    from selenium.common.exceptions import WebDriverException
    from urllib3.exceptions import HTTPError
    from websocket import WebSocketException

    return isinstance(e, (WebDriverException, HTTPError, OSError, WebSocketException))


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


class Browser:
    """One headless Chromium process driven through chromedriver."""

    def __init__(self, chromium: str | None = None, chromedriver: str | None = None):
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service

        chromium, chromedriver = check_browser(chromium, chromedriver)
        urllib3_log = logging.getLogger("urllib3.connectionpool")
        if urllib3_log.level == logging.NOTSET:  # its retries to a dead driver: BrowserDied says it once
            urllib3_log.setLevel(logging.ERROR)
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROME_FLAGS:
            options.add_argument(flag)
        self.tmp = tempfile.mkdtemp(prefix="tempering-chromium-")
        options.add_argument(f"--user-data-dir={self.tmp}/profile")
        # its own session: chromedriver, Chromium and all Chromium's children form one process group
        service = Service(
            executable_path=chromedriver,
            env={**os.environ, "TMPDIR": self.tmp},
            popen_kw={"start_new_session": True},
        )
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except WebDriverException as e:
            _kill_group(service)
            shutil.rmtree(self.tmp, ignore_errors=True)
            msg = (e.msg or str(e)).strip().splitlines()[0]
            raise UserError(
                f"Chromium ({chromium}) failed to start through {chromedriver}: {msg}; check that "
                "the chromium and chromium-driver packages have the same version"
            ) from e
        self.lock = threading.Lock()
        self.anchor = self.driver.current_window_handle
        """The window Chromium opened at start: never lent (the driver's session lives in it)."""
        self.current: str | None = self.anchor
        """The window the driver talks to (None: none yet, after the one it talked to was closed)."""
        self.windows = 0
        """Windows lent now."""
        self._devtools: Any = None
        """The browser's own DevTools connection (browser contexts are made and disposed there)."""
        self._ids = itertools.count(1)
        self.pid = service.process.pid
        """chromedriver's pid, also the process group of every Chromium process of this browser."""
        self.died: str | None = None
        """Why the browser stopped answering (None: it answers, as far as anyone knows)."""
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"Chromium (chromedriver pid {self.pid})"

    def _answers(self) -> bool:
        try:
            self.driver.window_handles  # noqa: B018
        except Exception:
            return False
        return True

    def guarded(self, fn: Callable[[], T]) -> T:
        """`fn()` (the caller holds the lock); a failure because the browser died is `BrowserDied`."""
        if self.died is not None:
            raise BrowserDied(self.died)
        try:
            return fn()
        except Exception as e:
            if not _is_driver_error(e) or self._answers():
                raise
            self.died = f"the browser serving this window died ({self!r}: {_cause(e)}); the pool starts a new one"
            raise BrowserDied(self.died) from e

    def cdp(self, method: str, **params: Any) -> dict[str, Any]:
        """One command on the browser's DevTools endpoint (the caller holds the lock); chromedriver's own
        commands reach a page only, and contexts are the browser's."""
        if self._devtools is None:
            import websocket

            address = self.driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
            with urllib.request.urlopen(f"http://{address}/json/version", timeout=10) as r:
                url = json.load(r)["webSocketDebuggerUrl"]
            self._devtools = websocket.create_connection(url, timeout=30, suppress_origin=True)
        n = next(self._ids)
        self._devtools.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:  # no domain is enabled on this connection: only answers come, in order
            msg = json.loads(self._devtools.recv())
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"Chromium refused {method}: {msg['error'].get('message')}")
                return msg.get("result", {})

    def open(self) -> Window:
        """A new window, the only page of a new browser context (nothing shared with other windows)."""
        from selenium.webdriver.remote.command import Command

        def new() -> Window:
            context = self.cdp("Target.createBrowserContext", disposeOnDetach=False)["browserContextId"]
            made = self.cdp("Target.createTarget", url="about:blank", browserContextId=context, newWindow=True)
            handle = made["targetId"]
            deadline = time.monotonic() + 10
            while handle not in self.driver.window_handles:  # chromedriver learns of new pages by itself
                if time.monotonic() > deadline:
                    raise RuntimeError(f"chromedriver never listed the new window {handle}")
                time.sleep(0.02)
            self.driver.switch_to.window(handle)
            self.current = handle
            self.driver.execute(Command.W3C_CLEAR_ACTIONS)  # no key or button of an earlier episode held
            return Window(self, handle, context)

        with self.lock:
            window = self.guarded(new)
            self.windows += 1
            return window

    def dispose(self, window: Window) -> None:
        """Close the window with its browser context (its page, storage, cookies: all of the episode)."""
        with self.lock:
            self.guarded(lambda: self.cdp("Target.disposeBrowserContext", browserContextId=window.context))
            self.windows -= 1
            if self.current == window.handle:
                self.current = None

    def alive(self) -> bool:
        """Whether the browser still answers (a round trip; any failure means it does not)."""
        if self.died is not None:
            return False
        with self.lock:
            return self._answers()

    def close(self) -> None:
        """Quit Chromium, then kill what is left of its process group (everything, when its driver or
        Chromium died: their children would otherwise live on, reparented to pid 1). Idempotent."""
        if self not in _LIVE:
            return
        _LIVE.discard(self)
        try:
            if self._devtools is not None:
                self._devtools.close()
            if self.died is None:
                self.driver.quit()
        except Exception:  # it died already (that error was reported where it happened): stop what is left
            pass
        finally:
            _kill_group(self.driver.service)
            shutil.rmtree(self.tmp, ignore_errors=True)


class Window:
    """One browser window, in a browser context of its own: the page of one episode."""

    def __init__(self, browser: Browser, handle: str, context: str = ""):
        self.browser, self.handle, self.context = browser, handle, context
        self.page: str | None = None
        """URL of the page loaded in this window (None: nothing yet)."""
        self.state: dict[str, Any] = {}
        """Whatever its user keeps about the loaded page (e.g. the viewport size)."""

    def run(self, fn: Callable[[Any], T]) -> T:
        """`fn(driver)` with the driver switched to this window, holding the browser for the call."""
        b = self.browser

        def call() -> T:
            if b.current != self.handle:
                b.driver.switch_to.window(self.handle)
                b.current = self.handle
            return fn(b.driver)

        with b.lock:
            return b.guarded(call)


class BrowserPool:
    """Lends episodes windows of shared browsers, each in a browser context of its own."""

    def __init__(self, size: int = 1, chromium: str | None = None, chromedriver: str | None = None):
        if size < 0:
            raise UserError(f"browsers must be >= 0 (0 = a private browser per episode), got {size}")
        self.size, self.chromium, self.chromedriver = size, chromium, chromedriver
        self.browsers: list[Browser] = []
        self.lock = threading.Lock()
        self.started = 0
        """Browsers started so far (a measure of what the pool saved)."""

    def acquire(self) -> Window:
        """A new window in the least busy browser (started when fewer than `size` run). A browser found
        dead (it died while nobody used it) is dropped and the window opened in a new one."""
        if self.size == 0:  # started outside the lock: private browsers start side by side
            with self.lock:
                self.started += 1
            return Browser(self.chromium, self.chromedriver).open()
        for attempt in (1, 2):
            with self.lock:
                dead = [b for b in self.browsers if b.died is not None]
                self.browsers = [b for b in self.browsers if b.died is None]
                if len(self.browsers) < self.size:
                    self.browsers.append(Browser(self.chromium, self.chromedriver))
                    self.started += 1
                browser = min(self.browsers, key=lambda b: b.windows)
            for b in dead:
                b.close()
            try:
                return browser.open()
            except BrowserDied:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def release(self, window: Window, healthy: bool = True) -> None:
        """Take a window back: its browser context is disposed. A browser that stopped answering is
        closed with all its windows (every window of a dead browser comes back; the first drops it)."""
        b = window.browser
        if self.size == 0:
            b.close()
            return
        if b.died is None and (healthy or b.alive()):
            try:
                b.dispose(window)
                return
            except BrowserDied:
                pass
        with self.lock:
            if b in self.browsers:
                self.browsers.remove(b)
        b.close()

    def close(self) -> None:
        with self.lock:
            browsers, self.browsers = self.browsers, []
        for b in browsers:
            b.close()


def _kill_group(service) -> None:
    """SIGKILL chromedriver's process group (Chromium and its children) and reap chromedriver."""
    process = getattr(service, "process", None)
    if process is None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is gone already
    try:
        process.wait(timeout=10)
    except Exception:  # reaped elsewhere (selenium's own stop) or stuck in the kernel: nothing left to do
        pass


@atexit.register
def _close_all() -> None:
    for b in list(_LIVE):
        b.close()
