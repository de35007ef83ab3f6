"""`harness run --history`: each run is recorded as it finishes and its report gets the trend section."""

from __future__ import annotations

import pytest

import re
import subprocess
import sys

from gating_synth import make_run

from harness.history import open_history
from harness.history.record import record_run
from harness.report.render import render_html
from harness.report.trend import trend_chart
from harness.results import load_results


@pytest.mark.e2e
def test_run_records_itself_and_draws_the_trend(fake_env, tmp_path):
    url = f"sqlite:///{tmp_path / 'h.db'}"
    args = [sys.executable, "-m", "harness.cli", "run", "--models", "fake-linear", "--runtimes", "fake-ok",
            "--batch-sizes", "1,2", "--min-time", "0.01", "--min-iters", "3", "--repeats", "1", "--no-isolation"]
    for i in range(2):
        proc = subprocess.run([*args, "--out", str(tmp_path / f"r{i}"), "--history", url], capture_output=True,
                              text=True, check=False, env=fake_env, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"history: recorded 2 cases in {url}" in proc.stdout
    h = open_history(url)
    try:
        assert len(h.runs()) == 2  # run ids are the start second: two runs one second apart are two runs
        assert {s.case for s in h.series()} == {"fake-linear-fake-ok-fp32-b1", "fake-linear-fake-ok-fp32-b2"}
    finally:
        h.close()
    html = (tmp_path / "r1" / "report.html").read_text()
    assert '<h2 id="trend">Trend</h2>' in html and html.count("p50 and p99 over 2 recorded runs</title>") == 2
    assert 'id="trend"' not in render_html(load_results(tmp_path / "r1"))  # no history given: no section


def test_an_unreachable_database_costs_the_history_not_the_run(tmp_path):
    run = make_run(1)
    notes: list[str] = []
    assert record_run(run, "postgresql+psycopg://u:pw@127.0.0.1:1/h", "r.json", notes.append) is None
    assert notes[0].startswith("history: not recorded: history postgresql+psycopg://u:***@127.0.0.1:1/h: "
                               "cannot open")
    run.complete = False
    assert record_run(run, f"sqlite:///{tmp_path / 'h.db'}", "r.json", notes.append) is None
    assert "is incomplete: not recorded" in notes[1]


def test_trend_chart_marks_change_points():
    row = {"case": "m-r-fp32-b1", "machine": "x", "runs": [f"run-{i}" for i in range(6)],
           "p50": [1.0, 1.0, 1.0, 1.1, 1.1, 1.1], "p99": [1.5, 1.5, 1.6, None, 1.7, 1.7], "changes": [(3, 10.0)]}
    svg = trend_chart(row)
    assert svg.startswith("<svg") and "+10.0%" in svg
    assert "change point: +10.0% p50 from run run-3" in svg
    assert len(re.findall(r"<title>run-\d: p(50|99) ", svg)) == 11  # the missing p99 figure is left out


def test_trend_chart_marks_where_the_model_changed():
    row = {"case": "m-r-fp32-b1", "machine": "x", "runs": [f"run-{i}" for i in range(6)],
           "p50": [1.0, 1.0, 1.0, 1.8, 1.8, 1.8], "p99": [1.5] * 6, "changes": [(3, 80.0)],
           "model_changes": [(3, "aaaaaaaaaaaa", "bbbbbbbbbbbb")]}
    svg = trend_chart(row)
    assert "model changed at run run-3: fingerprint aaaaaaaaaaaa -&gt; bbbbbbbbbbbb" in svg or \
        "model changed at run run-3: fingerprint aaaaaaaaaaaa -> bbbbbbbbbbbb" in svg
    assert "model changed" in svg and "change point: +80.0% p50 from run run-3" in svg
    assert "model changed" not in trend_chart({**row, "model_changes": []})
