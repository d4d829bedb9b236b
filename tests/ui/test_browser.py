"""The app in a real browser: `streamlit run app.py` in a subprocess, driven by Playwright through
Debian's Chromium (headless). It opens the NQM explorer, moves a slider, checks that the chart
and the summary table were drawn again with new numbers, and downloads the chart as SVG (the
deferred export, run by the server on the click).

Screenshots go to the test's tmp_path; with BATCHSCOPE_SCREENSHOT=docs/app.png (a path from the
repository root) the test also saves the README's picture of the app there.

Needs /usr/bin/chromium (`apt-get install chromium`) and `playwright` (the `test` extra); it is
skipped without them. Playwright's own browser download (`playwright install`) is not used.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 1000}

# The explorer's first chart (steps to target): its first line mark is the tuned curve.
STEPS_CHART = '[data-testid="stVegaLiteChart"] >> nth=0'
STEPS_LINE = f'{STEPS_CHART} >> svg.marks g.mark-line path >> nth=0'
# The summary table under it (a canvas grid with an accessible table): row 0, column b_crit.
B_CRIT_CELL = '[data-testid="stDataFrame"] >> nth=0 >> [data-testid="glide-cell-2-0"]'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"streamlit exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"streamlit not healthy after {timeout} s:\n{log.read_text()}")


@pytest.fixture
def app_url(tmp_path):
    """The app served on a free loopback port for the test's duration."""
    port = free_port()
    log = tmp_path / "streamlit.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
             "--client.toolbarMode", "minimal"],   # no "Deploy" button in the pictures
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_idle(page, timeout_ms: float = 60_000) -> None:
    """Until the script run is over: no stale (greyed) element and no 'Running...' widget."""
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]')"
        " && !document.querySelector('[data-testid=\"stStatusWidget\"]')",
        timeout=timeout_ms)


def test_explorer_redraws_when_a_slider_moves(app_url, tmp_path):
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            tmp_path / "chromium-profile", executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport=VIEWPORT, color_scheme="light", accept_downloads=True)
        try:
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.goto(app_url)

            # First draw: the tuned SGD curve of the default problem (d = 10^4).
            page.locator(STEPS_LINE).wait_for()
            page.locator(B_CRIT_CELL).wait_for(state="attached")   # hidden: for screen readers
            page.locator('[data-testid="stVegaLiteChart"] >> nth=2 >> svg.marks').wait_for()
            wait_idle(page)
            labels_before = page.locator(f"{STEPS_CHART} >> svg.marks text").all_text_contents()
            assert "batch size B" in labels_before and "steps to target" in labels_before
            assert "10,000,000" in labels_before      # S(B = 4) = 1.5e6 steps at d = 10^4
            line_before = page.locator(STEPS_LINE).get_attribute("d")
            b_crit_before = page.locator(B_CRIT_CELL).text_content()
            page.screenshot(path=tmp_path / "explorer_before.png")
            if os.environ.get("BATCHSCOPE_SCREENSHOT"):
                target = ROOT / os.environ["BATCHSCOPE_SCREENSHOT"]
                target.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=target)

            # The export: a click runs vl-convert on the server and serves the file.
            with page.expect_download() as download_info:
                page.get_by_role("button", name="Download the chart (SVG)").first.click()
            download = download_info.value
            assert download.suggested_filename == "nqm_steps_to_target.svg"
            svg = Path(download.path()).read_text()
            assert svg.startswith("<svg") and "steps to target" in svg

            # Move "dimensions d" one notch left (10000 -> 3000) from the keyboard.
            slider = page.locator(".st-key-dim input[type=range]")
            slider.focus()
            slider.press("ArrowLeft")
            assert slider.get_attribute("aria-valuetext") == "3000"

            # The rerun tunes the new problem and draws both again with other numbers.
            page.wait_for_function(
                "([line, cell, before]) => {"
                "  const path = document.querySelector(line);"
                "  const b = document.querySelector(cell);"
                "  return path && b && path.getAttribute('d') !== before[0]"
                "    && b.textContent !== before[1]; }",
                arg=[
                    '[data-testid="stVegaLiteChart"] svg.marks g.mark-line path',
                    '[data-testid="stDataFrame"] [data-testid="glide-cell-2-0"]',
                    [line_before, b_crit_before],
                ])
            wait_idle(page)
            b_crit_after = page.locator(B_CRIT_CELL).text_content()
            assert float(b_crit_after) != pytest.approx(float(b_crit_before), rel=1e-3)
            assert page.locator(STEPS_LINE).get_attribute("d") != line_before
            # d = 3000 needs about 3x fewer steps: the y axis drops a decade
            labels_after = page.locator(f"{STEPS_CHART} >> svg.marks text").all_text_contents()
            assert "10,000,000" not in labels_after and "0.01" in labels_after
            assert "steps to target" in labels_after
            page.screenshot(path=tmp_path / "explorer_after.png")
        finally:
            context.close()
