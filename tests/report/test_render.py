"""Report rendering from fixture results: the comparison table, problems, escaping."""

from __future__ import annotations

import dataclasses

from harness.report.render import render_html
from harness.report.tables import CSV_COLUMNS, cases_frame, comparison_tables
from harness.results import CaseId, CaseResult, RunResults
from harness.results.records import LocalizationFinding, LocalizationRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

EVIL = "<img src=x onerror=alert(1)>"


def measured(model, runtime, p50, thr, rel_l2=0.0, status="passed"):
    return CaseResult(CaseId(model, runtime, "fp32", 1, None, "cpu"), status,
                      latency=fake_latency(p50, 10, p90_ms=p50 * 1.1, p95_ms=p50 * 1.2, p99_ms=p50 * 1.5, std_ms=0.1,
                                           cv=0.01),
                      throughput_sps=thr, accuracy={"max_abs": rel_l2, "rel_l2": rel_l2, "cosine": 1.0},
                      reference_runtime="torch-cpu", samples_ns=[int(p50 * 1e6)] * 10)


def fixture_run() -> RunResults:
    cases = [measured(EVIL, "torch-cpu", 128.0, 78.0), measured(EVIL, "ort-cpu", 89.0, 112.0, 3e-7),
             CaseResult(CaseId(EVIL, "ort-cuda", "fp32", 1, None, "cuda"), "skipped",
                        reason="CUDAExecutionProvider not available: <no GPU>"),
             CaseResult(CaseId(EVIL, "tensorrt", "fp32", 1, None, "cuda"), "crashed", phase="run",
                        signal="SIGSEGV", reason="worker killed by SIGSEGV in phase run", stderr_tail="Fatal <b>")]
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "m", "git": {}, "threads": {},
                                                               "libraries": {}}),
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
    assert "ort-cpu vs torch-cpu" in html and "1.4x faster" in html  # 128 -> 89 ms


def test_csv_frame_has_the_documented_columns():
    df = cases_frame(fixture_run())
    assert list(df.columns) == list(CSV_COLUMNS)
    assert df.loc[3, "signal"] == "SIGSEGV" and df.loc[2, "status"] == "skipped"


def two_machines() -> list[RunResults]:
    """The same fixture measured on two 'machines' (thread settings), the second one slower."""
    a = fixture_run()
    b = fixture_run()
    a.environment.add(hostname="box", machine="box (threads=2)")
    b.environment.add(hostname="box", machine="box (threads=1)")
    a.config["threads"], b.config["threads"] = 2, 1
    b.run_id = "r2"
    for c in b.cases:
        if c.latency:
            c.latency = dataclasses.replace(c.latency, p50_ms=c.latency.p50_ms * 2)
    return [a, b]


def test_merged_runs_are_columns_labelled_by_machine_never_averaged():
    runs = two_machines()
    (table,) = comparison_tables(runs, {EVIL: "torch-cpu"})
    assert table["runtimes"] == ["torch-cpu @ box 2t", "ort-cpu @ box 2t", "torch-cpu @ box 1t",
                                 "ort-cpu @ box 1t"]
    p50 = next(r for r in table["rows"] if r["metric"].key == "latency_p50_ms")
    assert p50["values"] == {"torch-cpu @ box 2t": 128.0, "ort-cpu @ box 2t": 89.0,
                             "torch-cpu @ box 1t": 256.0, "ort-cpu @ box 1t": 178.0}
    # improvement against the reference runtime of the same machine
    assert table["vs"] == {"ort-cpu @ box 2t": "torch-cpu @ box 2t", "ort-cpu @ box 1t": "torch-cpu @ box 1t"}
    assert round(p50["improvement"]["ort-cpu @ box 1t"], 1) == 30.5
    html = render_html(runs)
    assert "box (threads=2)" in html and "box (threads=1)" in html
    assert EVIL not in html and "<svg" in html  # charts drawn inline, names escaped inside them too


def test_drift_table_speedup_and_localisation_render():
    run = fixture_run()
    run.cases.append(CaseResult(CaseId(EVIL, "ort-cpu", "int8", 1, None, "cpu"), "failed",
                                latency=fake_latency(44.5, p99_ms=50.0),
                                accuracy={"rel_l2": 0.3, "max_abs": 2.0, "cosine": 0.9},
                                reason="drift over tolerance: rel_l2=0.3 > 0.15", samples_ns=[44_500_000] * 5))
    run.cases[-1].localization = LocalizationRecord(trigger="failure", checked=12, first_bad=[LocalizationFinding(
        node="/fc/Gemm", op_type="Gemm", tensor="fc_out", max_abs=2.0, rel_l2=0.3, cosine=0.9)])
    (tables,) = [render_html(run)]
    assert "Drift and speed per precision" in tables and "/fc/Gemm" in tables
    from harness.report.tables import drift_tables

    d = drift_tables(run)[EVIL]
    int8 = d[(d["runtime"] == "ort-cpu") & (d["precision"] == "int8")].iloc[0]
    assert int8["speedup_vs_fp32"] == 2.0 and int8["status"] == "failed"


def test_markdown_summary_escapes_and_lists_problems():
    from harness.report.render import render_markdown

    md = render_markdown(fixture_run())
    assert EVIL not in md and "&lt;img src=x onerror=alert(1)>" in md  # shown as text, never as markup
    assert "n=12 &lt;" not in md
    assert "crashed" in md and "CUDAExecutionProvider not available" in md
    assert "1.4x faster" in md and "+30.5%" not in md  # ort-cpu p50 (89 ms) vs the torch-cpu reference (128)
    assert md.count("samples/s = batch / p50 latency") == 1  # the throughput definition, said once
    verdicts = [{"case": "a", "metric": "p50", "verdict": "regressed", "baseline": 1.0, "current": 1.3,
                 "reason": "p50 +30% (CI excludes +5%)"}]
    md = render_markdown(fixture_run(), verdicts)
    assert "Verdicts against the baseline" in md and "regressed" in md


def test_screenshot_script_renders_a_png(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        import pytest

        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    html = tmp_path / "report.html"
    html.write_text(render_html(two_machines()))
    script = Path(__file__).resolve().parents[2] / "tools" / "screenshot-report.sh"
    res = subprocess.run(["bash", str(script), str(html), str(tmp_path / "r.png"), "800", "600"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_onnx_only_models_say_their_reference_is_onnx_runtime():
    run = fixture_run()
    for c in run.cases:
        c.reference_runtime = "ort-cpu"
        c.details = {"model_has_torch_module": False}
    assert "an ONNX-only model (no PyTorch module)" in render_html(run)
    assert "ONNX-only" not in render_html(fixture_run())


def test_the_reference_case_reads_reference_in_every_drift_table():
    from harness.report.render import render_markdown
    from harness.report.terminal import terminal_table

    run = fixture_run()
    ref, other = run.cases[0], run.cases[1]
    ref.is_reference, ref.reference_deterministic = True, True
    other.reference_deterministic = True
    (table,) = comparison_tables(run, {EVIL: "torch-cpu"})
    drift_row = next(r for r in table["rows"] if r["metric"].key == "rel_l2")
    assert drift_row["cells"] == {"torch-cpu": "reference", "ort-cpu": "3e-07"}
    html = render_html(run)
    assert "<td>reference</td>" in html and html.count(">reference<") >= 6
    md = render_markdown(run)
    assert "| reference " in md
    assert "reference" in terminal_table(run).splitlines()[1]
    assert list(cases_frame(run)["drift_note"]) == ["reference", "", "", ""]
    other.reference_deterministic = False  # the reference's two runs differed: the figure is marked, kept
    assert "3e-07 (nondeterministic ref)" in terminal_table(run)


def test_large_speed_ups_read_as_times_faster_not_percent():
    """A throughput 78 -> 6,220 samples/s is "79.7x faster", not "+7873.9%"; a p50 128 -> 17 ms "7.5x faster",
    not "+86.7%"; the page states the one throughput definition (batch / p50)."""
    from harness.report.render import render_markdown

    run = fixture_run()
    run.cases[1] = measured(EVIL, "ort-cpu", 128.0 / 7.53, 78.0 * 79.74, 3e-7)
    (table,) = comparison_tables(run, {EVIL: "torch-cpu"})
    rows = {r["metric"].key: r for r in table["rows"]}
    assert rows["throughput_sps"]["change"]["ort-cpu"] == "79.7x faster"
    assert rows["latency_p50_ms"]["change"]["ort-cpu"] == "7.5x faster"
    html = render_html(run)
    assert "79.7x faster" in html and "7.5x faster" in html
    assert "7873" not in html and "+86.7%" not in html
    assert "Throughput = batch / p50 latency" in html
    md = render_markdown(run)
    assert "7.5x faster" in md and "+86.7%" not in md
    slow = fixture_run()
    slow.cases[1] = measured(EVIL, "ort-cpu", 128.0 * 1.3, 78.0 / 1.3)
    (table,) = comparison_tables(slow, {EVIL: "torch-cpu"})
    rows = {r["metric"].key: r for r in table["rows"]}
    assert rows["latency_p50_ms"]["change"]["ort-cpu"] == "1.3x slower"
    assert rows["throughput_sps"]["change"]["ort-cpu"] == "1.3x slower"
