"""Open rendered reports in headless Chromium (Debian's ``chromium``) and check what a reader
sees: no console errors, every chart decoded and drawn at half its pixels (sharp on HiDPI
screens), the findings, the blog check, "why: each device against its limit" and the tips
section present and not empty, and a full-page screenshot saved under ``test-artifacts/`` for
a person to look at; at a phone's width, the page no wider than the screen with the "why"
section shown.

Chromium is driven over the DevTools protocol with a minimal stdlib WebSocket client. The
test is skipped where /usr/bin/chromium is absent, unless MNISTBENCH_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from mnistbench.report import charts, plots
from mnistbench.report import render as report
from mnistbench.results import aggregate
from tests.fakes import make_study, with_tips
from tests.report.test_report_studies import (
    GPU_WIDTHS,
    QUICK,
    QUICK_WIDTHS,
    with_limits,
    with_scale,
)

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTH = 1400  # CSS px of the browser window
PHONE = 390  # CSS px of a phone's screen (an iPhone 12-15), laid out through DevTools
#: What a page laid out at a phone's width reports: its scroll width, the elements that reach
#: past the screen outside a box that scrolls, and the elements styled to break words anywhere.
PHONE_PROBE = """(() => {
  const width = document.documentElement.clientWidth;
  const scrolls = el => { for (let e = el.parentElement; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX === 'auto' || s.overflowX === 'scroll') return true; } return false; };
  const label = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
      + (el.className && typeof el.className === 'string' ? '.' + el.className : '');
  const wide = [], breaking = [];
  for (const el of document.body.querySelectorAll('*')) {
    const s = getComputedStyle(el);
    if (s.wordBreak === 'break-all' || s.overflowWrap === 'anywhere') breaking.push(label(el));
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 0.5 && !scrolls(el)) wide.push(label(el));
  }
  const tables = Array.from(document.querySelectorAll('table')).filter(t => !scrolls(t))
      .map(label);
  const why = document.getElementById('why');
  const box = why ? why.getBoundingClientRect() : null;
  const charts = Array.from(document.querySelectorAll('figure.chart img'))
      .map(i => [i.alt.slice(0, 40), i.getBoundingClientRect().width, i.naturalWidth]);
  return {scroll_width: document.documentElement.scrollWidth, client_width: width,
          wide: wide.slice(0, 20), breaking: breaking.slice(0, 20), bare_tables: tables,
          charts: charts,
          why: why ? {text: why.innerText.length, width: box.width, height: box.height,
                      shown: getComputedStyle(why).display !== 'none'
                             && getComputedStyle(why).visibility !== 'hidden'} : null};
})()"""
#: The sections a reader must find, not empty, on every report.
READ_SECTIONS = ("findings", "blog", "why", "tips")

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def chromium() -> Path:
    """The Chromium binary, or a skip (a failure with MNISTBENCH_REQUIRE_BROWSER=1)."""
    if not CHROMIUM.exists():
        if os.environ.get("MNISTBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing but MNISTBENCH_REQUIRE_BROWSER=1: install it "
                        "with `apt-get install -y --no-install-recommends chromium`")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium); set "
                    "MNISTBENCH_REQUIRE_BROWSER=1 to make this a failure")
    return CHROMIUM


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, client masking,
    fragmented and large messages, ping/pong."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
             "Upgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = bytearray()
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        end = self.buf.index(b"\r\n\r\n") + 4
        status = bytes(self.buf[:end]).split(b"\r\n", 1)[0]
        del self.buf[:end]
        if b" 101 " not in status:
            raise ConnectionError(f"WebSocket handshake refused: {status!r}")

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("DevTools connection closed")
        self.buf += chunk

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _send(self, opcode: int, payload: bytes) -> None:
        header = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def send(self, text: str) -> None:
        self._send(0x1, text.encode())

    def recv(self) -> str:
        message = bytearray()
        while True:
            b1, b2 = self._read(2)
            opcode, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b2 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
            if opcode == 0x8:
                raise ConnectionError("DevTools connection closed by the browser")
            if opcode == 0x9:
                self._send(0xA, data)
                continue
            message += data
            if b1 & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


class DevTools:
    """Commands and events of one page target; console errors are collected as they come."""

    def __init__(self, ws_url: str, timeout: float = 60.0) -> None:
        self.ws = WebSocket(ws_url, timeout)
        self.next_id = 0
        self.events: list[dict] = []
        self.errors: list[str] = []

    def _note(self, event: dict) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + json.dumps(params.get("exceptionDetails"))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry.get('source')}): {entry.get('text')} "
                               f"{entry.get('url', '')}")

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)

    def wait_for(self, method: str, timeout: float) -> dict:
        deadline = time.perf_counter() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while time.perf_counter() < deadline:
            message = json.loads(self.ws.recv())
            if "method" in message:
                self._note(message)
                if message["method"] == method:
                    return message
        raise TimeoutError(f"no {method} within {timeout} s")


def _start(chromium: Path, profile: Path) -> tuple[subprocess.Popen, str]:
    """Start headless Chromium on a free DevTools port; return it and the page's WS URL."""
    log = (profile.parent / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--window-size={WIDTH},900", "--hide-scrollbars", "about:blank"],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    port_file = profile / "DevToolsActivePort"
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}: "
                               + (profile.parent / "chromium.log").read_text(errors="replace"))
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text().split()[0])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                            timeout=5) as response:
                    targets = json.load(response)
            except OSError:
                time.sleep(0.2)
                continue
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return proc, pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("chromium did not open its DevTools port within 60 s")


def _check_in_browser(chromium: Path, html: Path, screenshot: Path, tmp: Path) -> dict:
    """Load ``html`` in Chromium; return console errors, images and page size, and save a
    full-page screenshot to ``screenshot``."""
    profile = tmp / "profile"
    profile.mkdir()
    proc, ws_url = _start(chromium, profile)
    try:
        tools = DevTools(ws_url)
        for domain in ("Page", "Runtime", "Log"):
            tools.call(f"{domain}.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900,
                   deviceScaleFactor=1, mobile=False)
        tools.call("Page.navigate", url=html.resolve().as_uri())
        tools.wait_for("Page.loadEventFired", timeout=60)
        images = tools.call(
            "Runtime.evaluate", awaitPromise=True, returnByValue=True,
            expression="Promise.all(Array.from(document.images).map(i => i.decode()"
                       ".then(() => [i.alt, i.naturalWidth, i.naturalHeight, i.width])"
                       ".catch(e => [i.alt, 0, 0, 0, String(e)])))")["result"]["value"]
        sections = tools.call(
            "Runtime.evaluate", returnByValue=True,
            expression=f"Object.fromEntries({list(READ_SECTIONS)}.map(id => {{"
                       "const s = document.getElementById(id); const h = s && "
                       "s.querySelector('h2'); return [id, s ? (s.innerText.length - "
                       "(h ? h.innerText.length : 0)) : -1]; }))")["result"]["value"]
        size = tools.call("Page.getLayoutMetrics")["cssContentSize"]
        height = min(int(size["height"]), 30000)
        tools.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height,
                   deviceScaleFactor=1, mobile=False)
        shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": WIDTH, "height": height,
                                "scale": 1})
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        overflow = tools.call(
            "Runtime.evaluate", returnByValue=True,
            expression="document.documentElement.scrollWidth")["result"]["value"]
        tools.ws.close()
        return {"errors": tools.errors, "images": images, "height": height,
                "scroll_width": overflow, "sections": sections}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _at_phone_width(chromium: Path, html: Path, screenshot: Path, tmp: Path) -> dict:
    """Lay ``html`` out at :data:`PHONE` CSS px through the DevTools device metrics (a
    window size alone lays out at 500 px): what :data:`PHONE_PROBE` reports, with a
    screenshot of the first screens saved to ``screenshot``."""
    profile = tmp / "phone-profile"
    profile.mkdir()
    proc, ws_url = _start(chromium, profile)
    try:
        tools = DevTools(ws_url)
        for domain in ("Page", "Runtime"):
            tools.call(f"{domain}.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=PHONE, height=844,
                   deviceScaleFactor=2, mobile=True)
        tools.call("Page.navigate", url=html.resolve().as_uri())
        tools.wait_for("Page.loadEventFired", timeout=60)
        tools.call("Runtime.evaluate", awaitPromise=True,
                   expression="Promise.all(Array.from(document.images).map(i => i.decode()"
                              ".catch(() => null)))")
        probe = tools.call("Runtime.evaluate", returnByValue=True,
                           expression=PHONE_PROBE)["result"]["value"]
        shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": PHONE, "height": 3 * 844,
                                "scale": 1})
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        tools.ws.close()
        return probe
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _render(tmp: Path, tips: bool = False, scale=None, scale_precisions=("fp32", "bf16"),
            **study) -> Path:
    """A fake study (tests/fakes.py's ``make_study`` options) rendered with its charts; with
    tips cells (``tips``), and with scale cells of ``scale`` (device -> widths) in
    ``scale_precisions`` and the devices' measured limits (``scale`` given)."""
    make_study(tmp / "runs", **study)
    aggregate.aggregate(tmp / "runs", tmp / "results")
    tables = aggregate.load_tables(tmp / "results")
    if tips:
        tables = with_tips(tables)
    if scale is not None:
        tables = with_limits(with_scale(tables, widths=scale, precisions=scale_precisions))
    return report.write_report(tables, tmp / "report" / "index.html", results=tmp / "results",
                               command="snakemake --cores all")


def _assert_reads_well(result: dict) -> None:
    """No console errors, every image decoded and shown at half its pixels, the page no
    wider than the window, and the findings, blog check, why and tips sections not
    empty."""
    assert result["errors"] == []
    assert result["images"], "expected the charts that have data"
    for alt, natural_width, _, shown_width, *error in result["images"]:
        assert natural_width > 0, (alt, error)
        assert shown_width == natural_width // 2, (alt, natural_width, shown_width)
    assert result["scroll_width"] <= WIDTH, "the page is wider than the window"
    for section, length in result["sections"].items():
        assert length > 40, (section, length)


def test_full_report_in_chromium(chromium, tmp_path):
    """A synthetic GPU study with failures, tips cells, scale cells and measured limits opens
    without console errors, decodes every chart, fits the window's width, shows its findings,
    blog check, why and tips, and leaves a screenshot in test-artifacts/report.png."""
    html = _render(tmp_path, tips=True, scale=GPU_WIDTHS, repeats=3,
                   batch_sizes=(32, 128, 512, 2048),
                   overrides={"cuda-fp16-resident-b2048-r1": ("oom", "CUDA out of memory. "
                                                              "Tried to allocate 2.00 GiB"),
                              "cpu-bf16-dataloader-b32-r0": ("failed", "<script>alert(1)"
                                                             "</script> worker crashed")})
    result = _check_in_browser(chromium, html, ARTIFACTS / "report.png", tmp_path)
    _assert_reads_well(result)
    assert len(result["images"]) == len(charts.CHARTS), result["images"]
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000


def _quick(tmp: Path) -> Path:
    """The quick study's shape (tests/report/test_report_studies.py's QUICK) on a machine without a
    GPU, with its scale cells (widths 1 and 2, fp32) and the CPU's measured limit."""
    return _render(tmp, gpu=False, scale=QUICK_WIDTHS, scale_precisions=("fp32",), **QUICK)


def test_quick_report_in_chromium(chromium, tmp_path):
    """The quick study's shape (a subset, one epoch, two repeats, scale cells) on a machine
    without a GPU also opens cleanly with its findings, blog check, why (the GPU side not
    measured) and tips note, and leaves test-artifacts/report-quick.png."""
    result = _check_in_browser(chromium, _quick(tmp_path), ARTIFACTS / "report-quick.png",
                               tmp_path)
    _assert_reads_well(result)


def test_degraded_report_in_chromium(chromium, tmp_path):
    """A CPU-only, one-repeat study (charts missing, no intervals) also opens cleanly, and
    leaves test-artifacts/report-cpu-only.png."""
    html = _render(tmp_path, devices=("cpu",), repeats=1, batch_sizes=(64, 256))
    result = _check_in_browser(chromium, html, ARTIFACTS / "report-cpu-only.png", tmp_path)
    _assert_reads_well(result)


@pytest.mark.parametrize("study", ["gpu", "quick"])
def test_report_fits_a_phone(chromium, tmp_path, study):
    """Laid out at 390 CSS px (a phone, through DevTools' device metrics), the page is no
    wider than the screen: every table sits in a box that scrolls sideways, nothing else
    reaches past the screen, and no text is styled to break mid-word; the why section is
    shown, within the screen. On a GPU study of two machines with tips and scale cells
    (first screens saved to test-artifacts/report-phone.png) and on the quick study
    (report-phone-quick.png)."""
    if study == "gpu":
        html = _render(tmp_path, tips=True, scale=GPU_WIDTHS,
                       envs=("alpha", "beta-with-a-long-environment-name"), repeats=2,
                       batch_sizes=(32, 128, 2048))
        shot = ARTIFACTS / "report-phone.png"
    else:
        html, shot = _quick(tmp_path), ARTIFACTS / "report-phone-quick.png"
    probe = _at_phone_width(chromium, html, shot, tmp_path)
    assert probe["client_width"] == PHONE, probe
    assert probe["scroll_width"] <= PHONE, probe
    assert probe["wide"] == [] and probe["bare_tables"] == [], probe
    assert probe["breaking"] == [], probe
    # every chart's smallest text (8 pt, drawn at plots.DPI) is at least 10 CSS px as shown
    assert probe["charts"], probe
    for alt, shown, natural in probe["charts"]:
        assert natural > 0 and 8 / 72 * plots.DPI * shown / natural >= 10, (alt, shown, natural)
    why = probe["why"]
    assert why and why["shown"] and why["text"] > 200, probe
    assert 0 < why["width"] <= PHONE and why["height"] > 0, probe
