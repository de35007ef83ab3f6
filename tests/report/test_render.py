"""Report rendering from fixture results: the comparison table, problems, escaping."""

from __future__ import annotations

from harness.report.render import render_html
from harness.report.tables import CSV_COLUMNS, cases_frame, comparison_tables
from harness.results import CaseId, CaseResult, RunResults

EVIL = "<img src=x onerror=alert(1)>"


def measured(model, runtime, p50, thr, rel_l2=0.0, status="passed"):
    return CaseResult(CaseId(model, runtime, "fp32", 1, None, "cpu"), status,
                      latency={"p50_ms": p50, "p90_ms": p50 * 1.1, "p95_ms": p50 * 1.2, "p99_ms": p50 * 1.5,
                               "mean_ms": p50, "std_ms": 0.1, "iterations": 10, "cv": 0.01, "noisy": False},
                      throughput_sps=thr, accuracy={"max_abs": rel_l2, "rel_l2": rel_l2, "cosine": 1.0},
                      reference_runtime="torch-cpu", samples_ns=[int(p50 * 1e6)] * 10)


def fixture_run() -> RunResults:
    cases = [measured(EVIL, "torch-cpu", 128.0, 78.0), measured(EVIL, "ort-cpu", 89.0, 112.0, 3e-7),
             CaseResult(CaseId(EVIL, "ort-cuda", "fp32", 1, None, "cuda"), "skipped",
                        reason="CUDAExecutionProvider not available: <no GPU>"),
             CaseResult(CaseId(EVIL, "tensorrt", "fp32", 1, None, "cuda"), "crashed", phase="run",
                        signal="SIGSEGV", reason="worker killed by SIGSEGV in phase run", stderr_tail="Fatal <b>")]
    return RunResults(run_id="r", started_at="t", environment={"machine": "m", "git": {}, "threads": {},
                                                               "libraries": {}},
                      config={"models": [EVIL], "runtimes": ["torch-cpu"], "precisions": ["fp32"],
                              "batch_sizes": [1], "seq_lens": [], "timing": {}, "isolation": True},
                      cases=cases, complete=True)


def test_seed_style_table_improvement_matches_the_seed_arithmetic():
    (table,) = comparison_tables(fixture_run(), {EVIL: "torch-cpu"})
    assert table["runtimes"] == ["torch-cpu", "ort-cpu"] and table["others"] == ["ort-cpu"]
    rows = {r["metric"].key: r for r in table["rows"]}
    # the seed's table: latency 128 -> 89 ms is +30%, throughput 78 -> 112 QPS is +43%
    assert round(rows["latency_p50_ms"]["improvement"]["ort-cpu"]) == 30
    assert round(rows["throughput_sps"]["improvement"]["ort-cpu"]) == 44  # (112-78)/78 = 43.6%
    assert rows["latency_p50_ms"]["best"] == 89.0 and rows["throughput_sps"]["best"] == 112.0


def test_html_escapes_names_and_lists_problems():
    html = render_html(fixture_run())
    assert EVIL not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "Fatal &lt;b&gt;" in html and "&lt;no GPU&gt;" in html
    assert "SIGSEGV" in html and "crashed" in html
    assert "ort-cpu vs torch-cpu" in html and "+30.5%" in html


def test_csv_frame_has_the_documented_columns():
    df = cases_frame(fixture_run())
    assert list(df.columns) == list(CSV_COLUMNS)
    assert df.loc[3, "signal"] == "SIGSEGV" and df.loc[2, "status"] == "skipped"
