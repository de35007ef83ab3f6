"""The report in a real browser (#58): headless Chromium (Debian's `chromium`, installed by .ci/run) renders a
report of a quick-style run; the screenshot is not blank, the page logs no console error, and the comparison
table's key numbers are laid out visibly on the page (measured in the browser, not searched in the source).

Skips where Chromium is absent, except under CI (CI=true), where .ci/run installs it: there a missing browser
is a failure, so the test cannot quietly stop running."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.report.render import render_html
from harness.results import CaseId, CaseResult, RunResults
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "screenshot-report.sh"

pytestmark = [pytest.mark.e2e]  # a browser per test: seconds each (CI runs the tier)
if BROWSER is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI: chromium is not installed, and .ci/run installs it (apt-get install chromium)")
    pytestmark.append(pytest.mark.skip(reason="chromium not installed (Debian: apt-get install chromium)"))

# What a reader must see: the comparison's p50 cells and its change column, the conclusion.
KEY = ("18.24", "9.01", "2.0x faster", "fastest within drift tolerance: ort-cpu, 2.0x torch-cpu")

# Run inside the page once it is laid out: each key text must be in an element with a box inside the document
# and not hidden; the result goes into the DOM that --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", () => {
  const want = %s;
  const out = {};
  // the comparison table's cells first (table.cmp), then the rest of the page (the conclusions' list)
  const all = Array.from(document.querySelectorAll("table.cmp td, table.cmp caption b, li"));
  for (const text of want) {
    const el = all.find(e => e.children.length === 0 && e.textContent.includes(text))
            || all.find(e => e.textContent.includes(text));
    let seen = false;
    if (el) {
      const r = el.getBoundingClientRect(), s = getComputedStyle(el);
      seen = r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none" && s.opacity !== "0";
    }
    out[text] = seen;
  }
  const pre = document.createElement("pre");
  pre.id = "probe-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _case(runtime: str, p50: float, rel_l2: float) -> CaseResult:
    return CaseResult(CaseId("resnet18", runtime, "fp32", 1, None, "cpu"), "passed",
                      latency=fake_latency(p50, 400, p90_ms=p50 * 1.05, p95_ms=p50 * 1.1, p99_ms=p50 * 1.2, std_ms=0.05,
                                           cv=0.01, p50_ci_low_ms=p50 * 0.99, p50_ci_high_ms=p50 * 1.01,
                                           ci_level=0.95),
                      throughput_sps=1000.0 / p50, accuracy={"max_abs": rel_l2, "rel_l2": rel_l2, "cosine": 1.0},
                      reference_runtime="torch-cpu", samples_ns=[int(p50 * 1e6 * (1 + 0.001 * (i % 9)))
                                                                  for i in range(400)], host_peak_mb=512.0)


def _report(tmp_path: Path) -> Path:
    run = RunResults(run_id="browser", started_at="2026-11-29T00:00:00+00:00",
                     environment=RunEnvironmentRecord.from_dict({"machine": "ci", "git": {}, "threads": {}, "libraries": {}}),
                     config={"models": ["resnet18"], "runtimes": ["torch-cpu", "ort-cpu"], "precisions": ["fp32"],
                             "batch_sizes": [1], "seq_lens": [], "timing": {}, "isolation": True},
                     cases=[_case("torch-cpu", 18.24, 0.0), _case("ort-cpu", 9.012, 3e-7)], complete=True)
    html = render_html(run).replace("</body>", PROBE % repr(list(KEY)).replace("'", '"') + "</body>")
    path = tmp_path / "report.html"
    path.write_text(html)
    return path


def _chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"harness-chromium-{os.getpid()}"
    try:
        return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", "--disable-component-update",
                               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                               "--virtual-time-budget=5000", *args], capture_output=True, text=True,
                              timeout=timeout, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_the_key_numbers_are_laid_out_visibly_and_the_page_logs_no_error(tmp_path):
    page = _report(tmp_path)
    res = _chromium("--window-size=1300,2400", "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', res.stdout)
    assert found, "the page's probe did not run (scripts off, or the page failed to load)"
    import json

    seen = json.loads(found.group(1).replace("&quot;", '"'))
    assert seen == {k: True for k in KEY}, seen
    # console messages of the page (its own script errors, a blocked resource): Chromium logs them as CONSOLE
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line and "probe-result" not in line]
    errors = [line for line in console if re.search(r"error|uncaught|refused|failed", line, re.I)]
    assert not errors, errors


def test_the_screenshot_is_not_blank(tmp_path):
    import matplotlib.image

    page = _report(tmp_path)
    png = tmp_path / "report.png"
    res = subprocess.run(["bash", str(SCRIPT), str(page), str(png), "1300", "1600"], capture_output=True,
                         text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stderr
    pixels = np.asarray(matplotlib.image.imread(str(png)))[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1200
    ink = (pixels.mean(axis=2) < 0.6).mean()  # share of dark pixels: text, table rules, charts
    assert 0.005 < ink < 0.6, ink  # neither a white page nor a black one
    assert pixels.reshape(-1, 3).std(axis=0).max() > 0.05  # not one flat colour
