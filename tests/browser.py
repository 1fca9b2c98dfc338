"""A real headless Chromium for the tests that check what a person sees (Debian's ``chromium``,
installed by ``make browser``).

- :func:`dump_dom`: the DOM after the page ran (``chromium --headless --dump-dom``), parsed into a
  small element tree (:class:`Element`, with ``select`` for ``tag.class#id[attr]`` steps);
- :class:`Browser`: Chromium driven over the DevTools protocol (a tiny client on ``websockets``),
  for pages whose content lives in an iframe (the Airflow UI's external views): navigate, then
  evaluate JavaScript until it returns what the test waits for.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--disable-extensions", "--mute-audio"]


def require_chromium() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (make test does)")
    return CHROMIUM


# -- the DOM --------------------------------------------------------------------------------------------
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)  # own text and children, in order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        out = []
        for p in self.parts:
            out.append(p.text if isinstance(p, Element) else p)
        return re.sub(r"\s+", " ", "".join(out)).strip()

    def iter(self) -> Iterator[Element]:
        yield self
        for c in self.children:
            yield from c.iter()

    def select(self, selector: str) -> list[Element]:
        """Descendants matching ``a b`` steps of ``tag.class#id[attr]`` (a small CSS subset)."""
        found = [self]
        for step in selector.split():
            m = re.fullmatch(r"([\w-]*)((?:[.#][\w-]+)*)((?:\[[\w-]+\])*)", step)
            assert m, f"unsupported selector step {step!r}"
            tag, marks, attrs = m.groups()
            classes = re.findall(r"\.([\w-]+)", marks)
            ident = re.findall(r"#([\w-]+)", marks)
            needed = re.findall(r"\[([\w-]+)\]", attrs)
            found = [e for root in found for e in list(root.iter())[1:]
                     if (not tag or e.tag == tag) and set(classes) <= e.classes
                     and all(e.attrs.get("id") == i for i in ident) and all(a in e.attrs for a in needed)]
            found = list({id(e): e for e in found}.values())
        return found

    def one(self, selector: str) -> Element:
        found = self.select(selector)
        assert len(found) == 1, f"{selector!r}: {len(found)} elements"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        e = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(e)
        self.stack[-1].parts.append(e)
        if tag not in _VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        e = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(e)
        self.stack[-1].parts.append(e)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].parts.append(data)


def parse(html: str) -> Element:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


def dump_dom(url: str, *, budget_ms: int | None = None, window: str = "1280,1000") -> Element:
    """The DOM Chromium built for ``url`` (after scripts ran, within ``budget_ms`` of virtual time)."""
    extra = [f"--virtual-time-budget={budget_ms}"] if budget_ms else []
    with tempfile.TemporaryDirectory(prefix="memwal-chromium-") as profile:
        proc = subprocess.run([require_chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={window}",
                               *extra, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout, proc.stderr[-2000:]
    return parse(proc.stdout)


def screenshot(url: str, out: str, *, window: str = "1400,2200") -> None:
    """A PNG of what Chromium draws for ``url`` at ``window`` (width,height) pixels."""
    with tempfile.TemporaryDirectory(prefix="memwal-chromium-") as profile:
        proc = subprocess.run([require_chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={window}",
                               "--hide-scrollbars", f"--screenshot={out}", url], capture_output=True, text=True,
                              timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]


# -- DevTools protocol ----------------------------------------------------------------------------------
class DevToolsError(AssertionError):
    """A DevTools command answered with an error."""

    def navigating(self) -> bool:
        """The page navigated while the command ran (a click that submits a form, a redirect):
        the command reached the document that went away, and the next one reaches the new one."""
        return any(m in str(self) for m in ("Inspected target navigated or closed",
                                             "Execution context was destroyed",
                                             "Cannot find context with specified id"))


class Browser:
    """Headless Chromium on a DevTools port; one page target."""

    def __init__(self) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="memwal-chromium-")
        self.proc = subprocess.Popen([require_chromium(), *FLAGS, f"--user-data-dir={self.profile}",
                                      "--remote-debugging-port=0", "--window-size=1400,1000", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            assert self.proc.poll() is None, "chromium exited"
            assert time.monotonic() < deadline, "chromium opened no DevTools port"
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30))
        self._ids = itertools.count(1)
        self._sessions: dict[str, str] = {}

    def call(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        """One DevTools command (to an attached target's ``session`` when given)."""
        n = next(self._ids)
        msg: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session is not None:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == n:
                if "error" in reply:
                    raise DevToolsError(reply["error"])
                return reply.get("result", {})

    def frame_evaluate(self, url_part: str, expression: str, *, user_gesture: bool = False) -> Any:
        """Evaluate ``expression`` on the DOM of the (i)frame whose URL contains ``url_part``,
        None while there is none: for frames the page itself may not reach (a sandboxed
        document has an opaque origin). In an isolated world: the frame's DOM, none of its
        script's globals. An out-of-process frame is reached through its own target.
        ``user_gesture``: as if a person did it (a click a sandbox allows only then, such as a
        link that navigates the top window)."""
        for target in self.call("Target.getTargets")["targetInfos"]:
            if target["type"] == "iframe" and url_part in target["url"]:
                session = self._sessions.get(target["targetId"])
                if session is None:
                    session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
                    self._sessions[target["targetId"]] = session
                result = self.call("Runtime.evaluate", session=session, expression=expression, returnByValue=True,
                                   userGesture=user_gesture)
                assert "exceptionDetails" not in result, result["exceptionDetails"]
                return result["result"].get("value")
        frames = [self.call("Page.getFrameTree")["frameTree"]]
        while frames:
            node = frames.pop()
            frames += node.get("childFrames", [])
            if node["frame"].get("parentId") and url_part in node["frame"]["url"]:
                world = self.call("Page.createIsolatedWorld", frameId=node["frame"]["id"], worldName="memwal-test")
                result = self.call("Runtime.evaluate", contextId=world["executionContextId"], expression=expression,
                                   returnByValue=True, userGesture=user_gesture)
                assert "exceptionDetails" not in result, result["exceptionDetails"]
                return result["result"].get("value")
        return None

    def wait_for_frame(self, url_part: str, expression: str, *, timeout: float = 60.0) -> Any:
        """:meth:`frame_evaluate` until it returns something truthy."""
        return _until(lambda: self.frame_evaluate(url_part, expression), timeout, f"in frame {url_part}: {expression}")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def type_into(self, selector: str, text: str) -> None:
        """Type ``text`` into the page's element ``selector`` as keystrokes would (a form that
        reads its inputs through its own script sees it)."""
        assert self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                             "if (!e) return false; e.focus(); return true; })()"), selector
        self.call("Input.insertText", text=text)

    def log_in(self, base: str, user: str, password: str) -> None:
        """Sign in through Airflow's login page (the simple auth manager's form): its session
        cookie is then the browser's, as after a person's login."""
        self.navigate(f"{base}/auth/login")
        self.wait_for("!!document.querySelector('input[name=password]')")
        self.type_into("input[name=username]", user)
        self.type_into("input[name=password]", password)
        self.evaluate("document.querySelector('button[type=submit]').click()")
        self.wait_for("document.cookie.split('; ').some(c => c.startsWith('_token='))")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60.0) -> Any:
        """Evaluate ``expression`` until it returns something truthy (the page is a live SPA)."""
        return _until(lambda: self.evaluate(expression), timeout, expression)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()
        stop_group(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)


def _until(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """``probe()`` every 0.1 s until it returns something truthy. A probe the page's navigation
    cut off (a submitted form, a redirect) counts as "not yet": the next reaches the new page."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except DevToolsError as e:
            if not e.navigating():
                raise
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.1)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process we started in its own session, and its children (SIGTERM, then SIGKILL)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()


class Canary:
    """A loopback HTTP server that records every request it gets: what a script or a fetch
    injected into a page would call. ``hits`` empty after the page was shown means nothing
    injected ran or loaded."""

    def __init__(self) -> None:
        import http.server
        import threading

        hits: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _hit(self) -> None:
                hits.append(f"{self.command} {self.path}")
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_GET = do_POST = do_OPTIONS = _hit  # noqa: N815 - http.server's names

            def log_message(self, *args: object) -> None:
                pass

        self.hits = hits
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def canary() -> Iterator[Canary]:
    c = Canary()
    try:
        yield c
    finally:
        c.close()
