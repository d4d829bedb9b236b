"""The app in a real browser: `streamlit run app.py` in a subprocess, driven by Playwright through
Debian's Chromium (headless). Every tab is opened:

- **NQM explorer**: moves a slider and checks that the chart and the summary table were drawn
  again with new numbers, and downloads the chart as SVG (the deferred export, run by the server
  on the click).
- **Measured curves**: the shipped mnist_mlp sweep: its validation report's reconciliation, the
  sweep beside the NQM and the NQM calibrated on it; the measured and NQM curves must be drawn in
  colours of different hue.
- **Run a sweep**: a small sweep from the form (digits_mlp, two batch sizes) into the test's
  tmp_path, which must finish and draw its curve.
- **Plan**: the shipped digits_mlp sweep planned on a step time read from a throughput file
  written by the test (built by hand, nothing measured), with a price: the chart of time against
  cost must label every option on its Pareto front and mark the recommendation.

On every tab each Vega chart must have plot areas of real height with marks spread over them
(`assert_chart_drawn`): Streamlit squeezes a whole chart, legend and titles included, into its
height unless the chart says otherwise, which once left a plot area of 0 px and every curve on
one flat line.

Screenshots of each tab go to the test's tmp_path; with BATCHSCOPE_SCREENSHOTS=docs/screenshots
(a folder from the repository root) the tests also save the README's pictures there
(explorer.png, measured.png, run.png, plan.png):

    BATCHSCOPE_SCREENSHOTS=docs/screenshots python -m pytest -q -p no:cacheprovider tests/ui/test_browser.py

Needs /usr/bin/chromium (`apt-get install chromium`) and `playwright` (the `test` extra); it is
skipped without them. Playwright's own browser download (`playwright install`) is not used.
"""

from __future__ import annotations

import colorsys
import os
import re
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
SCREENSHOTS_VARIABLE = "BATCHSCOPE_SCREENSHOTS"

# The open tab's content: every chart and form below is looked for inside it
PANEL = '[role="tabpanel"]:visible'
CHART = f'{PANEL} >> [data-testid="stVegaLiteChart"]'
# The explorer's first chart (steps to target): its first line mark is the tuned curve.
STEPS_CHART = f'{CHART} >> nth=0'
STEPS_LINE = f'{STEPS_CHART} >> svg.marks g.mark-line path >> nth=0'
# The summary table under it (a canvas grid with an accessible table): row 0, column b_crit.
B_CRIT_CELL = '[data-testid="stDataFrame"] >> nth=0 >> [data-testid="glide-cell-2-0"]'

# A plot area shorter than this, or marks covering less of its height than this fraction, is a
# collapsed chart (the steps charts' plot areas are 380 px high, the others' 260 and 160 px).
MIN_PLOT_HEIGHT = 100
MIN_SPREAD = 0.25
# Hue (degrees) that must separate the measured curve from every predicted one
MIN_HUE_GAP = 60

# Per plot area of a chart's SVG, in page pixels: its size, and how many data marks (lines and
# points; not rules, text, axes or legends) lie in it and what fraction of its height they cover.
# A faceted chart has one plot area per cell, any other chart one (the root frame's background).
PLOT_AREAS_JS = """
(chart) => {
  const svg = chart.querySelector('svg.marks');
  if (!svg) return [];
  const cells = svg.querySelectorAll('g.role-scope.cell > g > path.background');
  const areas = cells.length ? [...cells]
                             : [svg.querySelector('g.role-frame.root > g > path.background')];
  const marks = [...svg.querySelectorAll(
      'g.mark-line.role-mark path, g.mark-symbol.role-mark path')].map(m => m.getBoundingClientRect());
  return areas.map(area => {
    const r = area.getBoundingClientRect();
    const inside = marks.filter(m => {
      const x = (m.left + m.right) / 2, y = (m.top + m.bottom) / 2;
      return x >= r.left - 2 && x <= r.right + 2 && y >= r.top - 2 && y <= r.bottom + 2; });
    const top = Math.min(...inside.map(m => m.top));
    const bottom = Math.max(...inside.map(m => m.bottom));
    return {width: r.width, height: r.height, marks: inside.length,
            spread: inside.length && r.height > 0 ? (bottom - top) / r.height : 0};
  });
}
"""

# {legend label: colour of its symbol} of the chart's legend titled `title`
LEGEND_COLOURS_JS = """
(chart, title) => {
  const legend = chart.querySelector(`g.role-legend[aria-label*="titled '${title}'"]`);
  if (!legend) return {};
  const out = {};
  for (const entry of legend.querySelectorAll('g.role-legend-entry g.role-scope > g')) {
    const symbol = entry.querySelector('.role-legend-symbol path');
    const label = entry.querySelector('.role-legend-label text');
    if (symbol && label) out[label.textContent] = getComputedStyle(symbol).fill;
  }
  return out;
}
"""

# Stroke colours of the chart's solid lines (the curves; perfect scaling, fits, bounds and rules
# are dashed or dotted)
SOLID_LINE_COLOURS_JS = """
(chart) => [...chart.querySelectorAll('svg.marks g.mark-line.role-mark path')]
  .filter(p => !p.getAttribute('stroke-dasharray'))
  .map(p => getComputedStyle(p).stroke)
"""


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


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The app served on a free loopback port, shared by this module's tests (each opens its own
    page, so its own session)."""
    port = free_port()
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
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


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for this module's tests (each test gets its own context)."""
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(app_url, browser):
    """A fresh page of the app, at the top of the first tab, in a browser context of its own (no
    cookies or storage from another test: a new Streamlit session)."""
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light", accept_downloads=True)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(app_url)
        yield page
    finally:
        context.close()


def wait_idle(page, timeout_ms: float = 60_000) -> None:
    """Until the script run is over: no stale (greyed) element and no 'Running...' widget."""
    page.wait_for_function(
        "() => !document.querySelector('[data-stale=\"true\"]')"
        " && !document.querySelector('[data-testid=\"stStatusWidget\"]')",
        timeout=timeout_ms)


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    page.wait_for_function(
        "(name) => [...document.querySelectorAll('[role=tab]')].some("
        "  t => t.textContent.trim() === name && t.getAttribute('aria-selected') === 'true')",
        arg=name)


def wait_charts(page, count: int) -> list:
    """The open tab's Vega charts once `count` of them are drawn and the run is over."""
    page.locator(f"{CHART} >> nth={count - 1} >> svg.marks").wait_for()
    wait_idle(page)
    charts = page.locator(CHART).all()
    assert len(charts) == count, f"{len(charts)} charts on the tab, expected {count}"
    return charts


def chart_text(chart) -> str:
    return " | ".join(chart.locator("svg.marks text").all_text_contents())


def assert_chart_drawn(chart, name: str) -> list[dict]:
    """Every plot area of `chart` has a real height and marks spread over it (a collapsed chart
    draws its curves on one flat line in a plot area a few pixels high); returns the areas."""
    areas = chart.evaluate(PLOT_AREAS_JS)
    assert areas, f"{name}: no plot area in the chart's SVG"
    for i, area in enumerate(areas):
        where = f"{name}, plot area {i + 1} of {len(areas)} ({area})"
        assert area["height"] >= MIN_PLOT_HEIGHT, f"{where}: plot area collapsed"
        assert area["marks"] > 0, f"{where}: no line or point in it"
        assert area["spread"] >= MIN_SPREAD, f"{where}: marks on one flat line"
    return areas


def hue(css_colour: str) -> float:
    """The hue in degrees of an 'rgb(r, g, b)' colour (as getComputedStyle writes it)."""
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css_colour)[:3])
    return 360 * colorsys.rgb_to_hsv(r, g, b)[0]


def hue_gap(a: str, b: str) -> float:
    gap = abs(hue(a) - hue(b)) % 360
    return min(gap, 360 - gap)


def assert_measured_apart(chart, name: str) -> dict:
    """The legend 'curve' of `chart` gives the measured curve a colour of another hue than each
    predicted one, and the solid lines drawn are in those colours, one per curve."""
    colours = chart.evaluate(LEGEND_COLOURS_JS, "curve")
    measured = [label for label in colours if label.startswith("measured")]
    assert len(measured) == 1 and len(colours) >= 2, f"{name}: legend {colours}"
    for label, colour in colours.items():
        if label != measured[0]:
            gap = hue_gap(colours[measured[0]], colour)
            assert gap >= MIN_HUE_GAP, (f"{name}: '{measured[0]}' ({colours[measured[0]]}) and "
                                        f"'{label}' ({colour}) are {gap:.0f} degrees of hue apart")
    lines = chart.evaluate(SOLID_LINE_COLOURS_JS)
    assert sorted(lines) == sorted(colours.values()), f"{name}: lines {lines}, legend {colours}"
    return colours


def scroll_to_top(locator) -> None:
    """Scrolls the page so that `locator` is at the top of the window (for a screenshot)."""
    locator.evaluate("e => e.scrollIntoView({block: 'start'})")


def screenshot(page, tmp_path: Path, name: str) -> None:
    """`name` in tmp_path, and in $BATCHSCOPE_SCREENSHOTS (a folder from the repository root)."""
    page.screenshot(path=tmp_path / name)
    if os.environ.get(SCREENSHOTS_VARIABLE):
        folder = ROOT / os.environ[SCREENSHOTS_VARIABLE]
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=folder / name)


def test_explorer_redraws_when_a_slider_moves(page, tmp_path):
    # First draw: the tuned SGD curve of the default problem (d = 10^4).
    page.locator(STEPS_LINE).wait_for()
    page.locator(B_CRIT_CELL).wait_for(state="attached")   # hidden: for screen readers
    steps, rate, noise = wait_charts(page, 3)
    for chart, name in ((steps, "steps to target"), (rate, "tuned rate"),
                        (noise, "noise scale")):
        assert_chart_drawn(chart, f"explorer, {name}")
    labels_before = page.locator(f"{STEPS_CHART} >> svg.marks text").all_text_contents()
    assert "batch size B" in labels_before and "steps to target" in labels_before
    assert "10,000,000" in labels_before      # S(B = 4) = 1.5e6 steps at d = 10^4
    line_before = page.locator(STEPS_LINE).get_attribute("d")
    b_crit_before = page.locator(B_CRIT_CELL).text_content()
    screenshot(page, tmp_path, "explorer.png")

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
    assert_chart_drawn(page.locator(STEPS_CHART), "explorer at d = 3000, steps to target")
    page.screenshot(path=tmp_path / "explorer_after.png")


def test_measured_curves_are_drawn_apart_from_the_nqm(page, tmp_path):
    page.locator(STEPS_LINE).wait_for()       # the explorer first, as a visitor sees it
    open_tab(page, "Measured curves")
    # The shipped mnist_mlp sweep (the default): the reconciliation of its validation report and
    # its quadratic path, the sweep beside the NQM, the NQM calibrated on it, the trials behind
    # each point, the measured noise scale.
    reconciliation, path, steps, calibrated, trials, noise = wait_charts(page, 6)
    assert "every estimate of B_crit" in chart_text(reconciliation)
    assert "its quadratic at the goal (dashed)" in chart_text(path)
    assert_chart_drawn(path, "measured curves, quadratic path")
    assert "measured: mnist_mlp" in chart_text(steps)
    assert "measured and predicted" in chart_text(calibrated)
    for chart, name in ((reconciliation, "reconciliation"), (steps, "measured vs NQM"),
                        (calibrated, "NQM calibrated on this network"),
                        (trials, "trials"), (noise, "measured noise scale")):
        assert_chart_drawn(chart, f"measured curves, {name}")
    colours = assert_measured_apart(reconciliation, "reconciliation")
    assert any(label.startswith("NQM predicted") for label in colours)
    colours = assert_measured_apart(steps, "measured vs NQM")
    assert any(label.startswith("NQM") for label in colours)
    colours = assert_measured_apart(calibrated, "NQM calibrated on this network")
    assert sum(label.startswith("calibrated NQM") for label in colours) >= 2
    scroll_to_top(page.get_by_role("heading", name="Steps to result measured on a network"))
    screenshot(page, tmp_path, "measured.png")
    scroll_to_top(page.get_by_role("heading", name="The NQM calibrated on this network"))
    page.screenshot(path=tmp_path / "measured_calibrated.png")


def test_a_sweep_run_from_the_form_finishes_and_draws_its_curve(page, tmp_path):
    open_tab(page, "Run a sweep")
    form = page.locator(f'{PANEL} >> [data-testid="stForm"]')
    form.wait_for()
    out = tmp_path / "digits"
    # The smallest workload (digits_mlp, the form's default) at two batch sizes both of whose
    # best trials reach its goal within the budget (seed 0: 156 and 43 steps).
    for key, value in (("run_batch_sizes", "64,256"), ("run_trials", "4"),
                       ("run_max_steps", "300"), ("run_out", str(out))):
        field = page.locator(f".st-key-{key} input")
        field.fill(value)
        field.press("Tab")                     # commits the value (Enter would submit the form)
    page.get_by_role("button", name="Run the sweep").click()
    done = page.locator(f'{PANEL} >> [data-testid="stAlert"]:has-text("Done:")')
    done.wait_for(timeout=180_000)
    assert "Done: 2 of 2 batch sizes reached the goal" in done.text_content()
    (chart,) = wait_charts(page, 1)
    assert_chart_drawn(chart, "run a sweep, steps to result")
    points = chart.locator("svg.marks g.mark-symbol.role-mark path")
    assert points.count() == 2               # one point per batch size
    labels = chart_text(chart)
    assert "batch size B" in labels and "measured: digits" in labels
    assert (out / "config.json").is_file() and (out / "trials.jsonl").is_file()
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2 * 4   # every trial
    scroll_to_top(page.locator(".st-key-run_out"))   # the form's end, the progress and the curve
    screenshot(page, tmp_path, "run.png")


def test_the_plan_of_a_shipped_sweep_is_drawn_with_its_front_and_recommendation(page, tmp_path):
    import json

    from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time

    # A step time by hand: a fixed cost, compute per example split over the devices and an
    # all-reduce, on 1 to 8 devices (so that the front holds several device counts).
    points = tuple(StepTimePoint(b, n, 1e-4 + 2e-5 * b / n + 1e-4 * (n - 1) / n, (1e-4, 1e-2),
                                 100, 3, 0.5)
                   for b in (8, 64, 512) for n in (1, 2, 4, 8))
    record = ThroughputRecord("digits_mlp", "momentum", "cpu", "cpu", 1, points,
                              fit_step_time(list(points)))
    path = tmp_path / "throughput.json"
    path.write_text(json.dumps(record.to_dict()))

    open_tab(page, "Plan")
    step_time = page.locator(f"{PANEL} >> .st-key-plan_step_time")
    step_time.get_by_text("a throughput file", exact=True).click()
    for key, value in (("plan_throughput_path", str(path)), ("plan_price", "2.5")):
        field = page.locator(f".st-key-{key} input")
        field.wait_for()
        field.fill(value)
        field.press("Enter")
        wait_idle(page)
    (chart,) = wait_charts(page, 1)
    page.wait_for_function(
        "(chart) => chart.textContent.includes('per device-hour')",
        arg=chart.element_handle())
    assert_chart_drawn(chart, "plan, time against cost")
    texts = chart.locator("svg.marks text").all_text_contents()
    assert "time to result (s)" in texts and "cost (at 2.5 per device-hour)" in texts
    front = [t for t in texts if re.fullmatch(r"B=\d+ x\d", t)]
    picked = [t for t in texts if t.startswith("recommended: B=")]
    assert len(front) >= 3 and len({t.split(" x")[1] for t in front}) >= 2, texts
    assert len(picked) == 1 and picked[0].removeprefix("recommended: ") in front
    advice = page.locator(f'{PANEL} >> [data-testid="stAlert"]:has-text("Recommendation:")')
    assert picked[0].removeprefix("recommended: B=").split(" x")[0] in advice.text_content()
    scroll_to_top(page.locator(".st-key-plan_step_time"))
    screenshot(page, tmp_path, "plan.png")

    # The same file uploaded instead: the same plan is drawn again
    step_time.get_by_text("upload a throughput file", exact=True).click()
    page.locator(f'{PANEL} >> [data-testid="stAlert"]:has-text("Upload a throughput file")'
                 ).wait_for()
    wait_idle(page)
    assert page.locator(CHART).count() == 0        # no file yet: no plan
    page.locator(f'{PANEL} >> .st-key-plan_throughput_upload input[type="file"]').set_input_files(
        path)
    page.locator(f'{PANEL} >> [data-testid="stAlert"]:has-text("Recommendation:")').wait_for()
    (chart,) = wait_charts(page, 1)
    assert_chart_drawn(chart, "plan from an uploaded file")
    assert picked[0] in chart.locator("svg.marks text").all_text_contents()
