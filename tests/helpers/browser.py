"""A real headless browser for the tests: Debian's `chromium`, driven over the DevTools protocol
through a pipe (`--remote-debugging-pipe`: JSON messages separated by NUL bytes on file
descriptors 3 and 4), so no websocket library or port is needed.

`open_page` loads a page and returns what a person would notice — console errors, uncaught
exceptions, every request the page made — and lets the test evaluate JavaScript in it and take a
full-page screenshot. Without chromium the tests that need it skip, unless
COMPILEBENCH_REQUIRE_BROWSER is set (.ci/run sets it): then it is an error.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REQUIRE_ENV = "COMPILEBENCH_REQUIRE_BROWSER"
#: The flags chromium needs here: no sandbox as root, no GPU, and nothing that reaches for the
#: network (on a closed network it waits on refused connections otherwise).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
LOAD_TIMEOUT_S = 60.0
#: How long chromium may take to close on its own before its processes are killed.
CLOSE_TIMEOUT_S = 10.0
WINDOW = (1200, 900)


def chromium() -> str:
    """The chromium executable; skips the test (fails under COMPILEBENCH_REQUIRE_BROWSER) without one."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "no chromium on PATH (Debian: apt-get install chromium; tests/run.sh installs it as root)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Page:
    """A loaded page: what it logged and requested, and a way to ask it more."""

    _browser: _Pipe
    _session: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value: JSON-like)."""
        reply = self._browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, self._session
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the window) as a PNG file."""
        reply = self._browser.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, self._session
        )
        path.write_bytes(base64.b64decode(reply["data"]))
        return path


class _Pipe:
    """A chromium process and the DevTools protocol over its pipe."""

    def __init__(self, process: subprocess.Popen, to_browser: int, from_browser: int):
        self.process, self._out, self._in = process, to_browser, from_browser
        self._buffer, self._next_id, self.events = b"", 0, []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise EOFError(f"chromium closed its pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> None:
        """Send one command, not waiting for its answer."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and wait for its answer; events that arrive meanwhile are kept in `events`."""
        self.send(method, params, session)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        """Until the event `method` has arrived (kept in `events` with the rest)."""
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not any(event.get("method") == method for event in self.events):
            self.events.append(self._read(deadline))


def _collect(page: Page, events: list[dict[str, Any]]) -> None:
    """Console errors, uncaught exceptions, failed loads and the URLs requested, from the events."""
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            page.errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            page.errors.append(f"exception: {params['exceptionDetails']}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            page.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed":
            page.errors.append(f"failed to load: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent":
            page.requests.append(params["request"]["url"])


def _close(browser: _Pipe) -> None:
    """Ask chromium to close, which ends its helper processes (renderer, GPU, network) and their
    writes into the profile; then kill its process group (its own session) for what is left."""
    with contextlib.suppress(OSError):
        browser.send("Browser.close")
    with contextlib.suppress(subprocess.TimeoutExpired):
        browser.process.wait(timeout=CLOSE_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(browser.process.pid, signal.SIGKILL)
    browser.process.wait()


def _above_four(fd: int) -> int:
    """The descriptor moved above 4 (close-on-exec), so that placing the child's 3 and 4 cannot
    overwrite it."""
    if fd > 4:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


def open_page(url: str) -> Iterator[Page]:
    """A generator for a fixture: chromium started with a fresh profile, `url` loaded (until its
    load event), the Page; chromium stopped afterwards."""
    to_read, to_browser = map(_above_four, os.pipe())  # chromium reads commands on its fd 3
    from_browser, to_write = map(_above_four, os.pipe())  # and writes answers and events on its fd 4

    def pipes_as_3_and_4() -> None:  # in the child, before it closes every descriptor but pass_fds
        os.dup2(to_read, 3)
        os.dup2(to_write, 4)

    # A helper process killed late may leave a file in the profile: the directory is only scratch.
    with tempfile.TemporaryDirectory(prefix="chromium-profile-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=pipes_as_3_and_4,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_read)
        os.close(to_write)
        browser = _Pipe(process, to_browser, from_browser)
        try:
            target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            for domain in ("Runtime", "Page", "Network", "Log"):
                browser.call(f"{domain}.enable", None, session)
            browser.call("Page.navigate", {"url": url}, session)
            browser.wait_for("Page.loadEventFired")
            page = Page(browser, session)
            _collect(page, browser.events)
            yield page
        finally:
            _close(browser)
            os.close(to_browser)
            os.close(from_browser)
