"""The report in a real browser: headless Debian Chromium, driven over the DevTools protocol.

Chromium speaks the protocol over a pipe (`--remote-debugging-pipe`: commands on fd 3,
replies on fd 4, NUL-separated JSON), so no WebDriver and no Python package beyond the
standard library is needed; `tools/install-chromium.sh` installs Chromium. Each test
renders a report, loads it from a file:// URL, takes a full-page screenshot a person can
look at, and asserts: no console errors or uncaught exceptions, every <img> decoded
(naturalWidth > 0), the results tables present, every in-page link has its target.

Screenshots: `results/report/screenshot.png` (the report of the suite's real pipeline run,
tests/tiny_pipeline.py) and `results/report/screenshot-fixture.png` (the hand-made fixture
grid); set
DLBENCH_SCREENSHOT_DIR to write them elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from dlbench import report
from dlbench.analysis import environment, profiles
from tests.conftest import REPO
from tests.test_profiles import fixture_profiles
from tests.test_report import PROTOCOL, REFERENCE_CONFIG, fixture_references, fixture_results

CHROMIUM = os.environ.get("DLBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOT_DIR = Path(os.environ.get("DLBENCH_SCREENSHOT_DIR", REPO / "results" / "report"))
WIDTH, HEIGHT = 1280, 900
FLAGS = [
    "--headless",
    "--no-sandbox",  # root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
    f"--window-size={WIDTH},{HEIGHT}",
]

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):  # CI installs Chromium (tools/test.sh): a missing one is a failure, not a skip
        raise RuntimeError(f"no Chromium at {CHROMIUM}: tools/install-chromium.sh did not run")
    pytestmark = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM}: run tools/install-chromium.sh")


class DevToolsError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium and one page in it, over the DevTools pipe."""

    def __init__(self, user_data_dir: Path, timeout: float = 60.0):
        self.timeout = timeout
        self.events: list[dict] = []
        self._next_id = 0
        self._buffer = b""
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def child_fds() -> None:
            # fd 3 = commands in, fd 4 = replies out; dup high first so neither clobbers the other.
            import fcntl

            r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.close(r)
            os.close(w)

        self.stderr_path = user_data_dir.parent / "chromium.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=child_fds,
                close_fds=False,  # keep fds 3 and 4 (Python's own descriptors are non-inheritable anyway)
            )
        os.close(to_child_r)
        os.close(from_child_w)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(domain, session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    # -- protocol plumbing
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DevToolsError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise DevToolsError(f"Chromium exited: {self.stderr_path.read_text(errors='replace')[-2000:]}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        seen = next((e for e in self.events if e["method"] == method), None)
        while seen is None:
            event = self._read_message(deadline)
            if "method" in event:
                self.events.append(event)
                seen = event if event["method"] == method else None
        return seen

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, session=True
        )
        if "exceptionDetails" in result:
            raise DevToolsError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    # -- what a test needs
    def open(self, url: str) -> None:
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for_event("Page.loadEventFired")

    def console_errors(self) -> list[str]:
        errors = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                errors.append("exception: " + details.get("exception", {}).get("description", details.get("text", "")))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}".strip())
        return errors

    def screenshot(self, path: Path) -> Path:
        height = int(self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]["height"])
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": WIDTH, "height": min(height, 16000), "scale": 1},
            },
            session=True,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(DevToolsError, OSError):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)


IMAGES = """
Promise.all(Array.from(document.images).map(img => img.decode().then(() => null, () => null)))
  .then(() => Array.from(document.images).map(img => ({alt: img.alt, complete: img.complete,
                                                      width: img.naturalWidth, height: img.naturalHeight})))
"""
PAGE_FACTS = """
({
  title: document.title,
  tables: document.querySelectorAll('table.results.throughput').length,
  numbers: Array.from(document.querySelectorAll('table.results.throughput td.status-ok, '
                                                + 'table.results.throughput td.status-partial')).length,
  protocol: !!document.querySelector('table#protocol'),
  software: document.querySelectorAll('table#software tbody tr').length,
  findings: document.querySelectorAll('ul.findings li').length,
  images: document.images.length,
  brokenLinks: Array.from(document.querySelectorAll('a[href^="#"]'))
      .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id)),
  width: document.documentElement.scrollWidth,
})
"""


# What any report must keep to, at any grid size (issue #29): the page (HTML with its embedded
# figures) at most PAGE_BYTES, loaded with every figure decoded within LOAD_SECONDS in headless
# Chromium (the CAICT-sized report: ~2.5 MB, under 1 s here), and nothing wider than the page.
PAGE_BYTES = 10_000_000
LOAD_SECONDS = 5.0
OVERFLOW = """
(() => {
  const page = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll('table, figure, img, details, section, div.figures, pre, ul, ol, p')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0) continue;  // not rendered (inside a closed <details>)
    const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : '');
    if (box.right > page + 1) wide.push(name + ' ends at ' + Math.round(box.right) + ' px');
    if (!['img', 'p', 'ul', 'ol'].includes(el.tagName.toLowerCase()) && el.scrollWidth > el.clientWidth + 1)
      wide.push(name + ' scrolls: ' + el.scrollWidth + ' > ' + el.clientWidth);
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth) wide.push('document: ' + doc.scrollWidth + ' > ' + doc.clientWidth);
  return wide;
})()
"""
OPEN_ALL = "document.querySelectorAll('details').forEach(d => { d.open = true; }); true"


def check_scale(browser: Chromium, html_path: Path) -> dict:
    """Page weight, load time and overflow, with the collapsed sections closed and then open;
    the page must already be open in `browser`. Returns what it measured."""
    started = time.monotonic()
    browser.open(html_path.resolve().as_uri())
    images = browser.evaluate(IMAGES)
    seconds = time.monotonic() - started
    weight = html_path.stat().st_size + sum(
        (html_path.parent / src).stat().st_size
        for src in browser.evaluate("Array.from(document.images).map(i => i.getAttribute('src'))")
        if not src.startswith("data:")
    )
    closed = browser.evaluate(OVERFLOW)
    browser.evaluate(OPEN_ALL)
    opened = browser.evaluate(OVERFLOW)
    print(f"\n{html_path}: {weight / 1e6:.2f} MB, loaded with its {len(images)} figures in {seconds:.2f} s")
    assert weight <= PAGE_BYTES, f"{weight} bytes"
    assert seconds <= LOAD_SECONDS, f"{seconds:.2f} s to load"
    assert closed == [] and opened == [], (closed, opened)
    assert [i for i in images if not (i["complete"] and i["width"] > 0)] == []
    assert browser.console_errors() == []
    return {"bytes": weight, "seconds": seconds, "images": len(images)}


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    chromium = Chromium(profile)
    yield chromium
    chromium.close()


def check_report(browser: Chromium, html_path: Path, screenshot: Path) -> dict:
    browser.open(html_path.resolve().as_uri())
    images = browser.evaluate(IMAGES)
    facts = browser.evaluate(PAGE_FACTS)
    shot = browser.screenshot(screenshot)
    print(f"\nscreenshot of {html_path}: {shot}")
    assert browser.console_errors() == []
    assert images, "the report has figures"
    assert [i for i in images if not (i["complete"] and i["width"] > 0)] == []
    assert facts["tables"] >= 1 and facts["numbers"] >= 1, facts
    assert facts["protocol"] and facts["software"] >= 1 and facts["findings"] >= 1, facts
    assert facts["brokenLinks"] == []
    assert facts["width"] <= WIDTH, "nothing overflows the page horizontally"
    assert shot.stat().st_size > 10_000
    check_scale(browser, html_path)
    return facts


def test_fixture_report_in_chromium(tmp_path, browser):
    root = tmp_path / "work"
    root.mkdir()
    cells, runs = fixture_results(root)
    refs = fixture_references(cells)
    html = report.render(
        cells,
        runs,
        PROTOCOL,
        REFERENCE_CONFIG,
        environment=environment.table(runs, root),
        references=refs,
        generated="2026-01-02 03:04 UTC",
        profiles=fixture_profiles(root),
    )
    (root / "index.html").write_text(html, encoding="utf-8")
    facts = check_report(browser, root / "index.html", SCREENSHOT_DIR / "screenshot-fixture.png")
    assert browser.evaluate("document.querySelectorAll('table.profiles td').length") == 2 * profiles.TOP
    assert facts["tables"] == 3  # ResNet-50, VGG-16, BERT-base
    assert facts["images"] == 6  # the summary figure, two per measured model, the published-vs-measured one


def test_real_report_in_chromium(tiny_pipeline, browser):
    """The report of the session's real pipeline run (tests/tiny_pipeline.py), as the pipeline
    wrote it: measured cells, an N/A cell, real data, figures."""
    facts = check_report(browser, tiny_pipeline / "results/report/index.html", SCREENSHOT_DIR / "screenshot.png")
    assert facts["tables"] >= 1 and facts["images"] >= 3, facts


def test_the_check_catches_a_broken_page(tmp_path, browser):
    """The assertions are not vacuous: a missing image and a script error are seen."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>x</title></head><body>'
        '<img src="missing.png" alt="gone"><script>undefinedFunction();</script></body></html>'
    )
    browser.open(page.as_uri())
    images = browser.evaluate(IMAGES)
    assert images == [{"alt": "gone", "complete": True, "width": 0, "height": 0}]
    errors = browser.console_errors()
    assert any("undefinedFunction" in e for e in errors), errors
    assert any("missing.png" in e or "ERR_FILE_NOT_FOUND" in e for e in errors), errors
