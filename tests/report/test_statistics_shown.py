"""What people read of a case's statistics: the 95% intervals of p50 and p99, no p99 from too few samples, the
robust CV (labelled) that decides `noisy`, and the tail flag, alike in the CSV, the terminal, Markdown and HTML."""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.report.render import render_html, render_markdown
from harness.report.tables import cases_frame, percentile_text
from harness.report.terminal import terminal_table
from harness.results import CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats
from harness.results.records import GenerationRecord, GenerationStats
from harness.results.stored import RunEnvironmentRecord


def case(runtime: str, samples: list[int]) -> CaseResult:
    return CaseResult(CaseId("mlp", runtime, "fp32", 1, None, "cpu"), "passed", samples_ns=samples,
                      latency=latency_stats(samples), throughput_sps=1e3, reference_runtime="torch-cpu")


def fixture() -> RunResults:
    rng = np.random.default_rng(5)
    many = [int(v) for v in rng.normal(1_000_000, 20_000, size=1000)]  # 1000 samples of about 1 ms
    stalled = [50_000 + (i % 5) * 500 for i in range(1000)]
    for i in range(0, 1000, 40):  # 2.5% of the calls stalled for 24 ms: tail-heavy, not noisy
        stalled[i] = 24_000_000
    few = [40_000_000 + 100_000 * i for i in range(12)]  # 12 samples: no p99
    return RunResults("r", "t", environment=RunEnvironmentRecord.from_dict({"machine": "m"}), config={"noise_cv": 0.1},
                      cases=[case("torch-cpu", many), case("ort-cpu", stalled), case("tvm-cpu", few)], complete=True)


def test_csv_has_intervals_both_cvs_by_name_and_no_p99_from_12_samples():
    run = fixture()
    df = cases_frame(run)
    lat = run.cases[0].latency
    row = df.iloc[0]
    assert (row["latency_p50_ci_low_ms"], row["latency_p50_ci_high_ms"]) == (lat.p50_ci_low_ms, lat.p50_ci_high_ms)
    assert row["latency_p50_ci_low_ms"] < row["latency_p50_ms"] < row["latency_p50_ci_high_ms"]
    assert row["latency_p99_ci_low_ms"] < row["latency_p99_ms"] < row["latency_p99_ci_high_ms"]
    assert row["robust_cv"] == lat.rcv and row["plain_cv"] == lat.cv and "cv" not in df.columns
    few = df.iloc[2]
    assert few["iterations"] == 12 and few["latency_p50_ms"] > 0
    for col in ("latency_p99_ms", "latency_p95_ms", "latency_p99_ci_low_ms", "latency_p99_ci_high_ms"):
        assert few[col] is None or np.isnan(few[col]), col  # empty: too few samples
    assert few["latency_p90_ms"] > 0  # 12 samples are enough for a p90
    stalled = df.iloc[1]
    assert bool(stalled["tail_heavy"]) and not bool(stalled["noisy"]) and stalled["tail_ratio"] > 100


def test_the_percentile_text():
    run = fixture()
    lat = run.cases[0].latency
    assert percentile_text(lat, 50) == (f"{lat.p50_ms:.4g} [{lat.p50_ci_low_ms:.4g}, "
                                        f"{lat.p50_ci_high_ms:.4g}]")
    assert percentile_text(run.cases[2].latency, 99) == "n/a (n=12 < 100)"
    unbounded = latency_stats([1_000_000 + 100 * i for i in range(200)])
    assert percentile_text(unbounded, 99).endswith(", inf]")
    old = dataclasses.replace(latency_stats([1_500_000] * 500), ci_level=None)  # results from before the intervals
    assert percentile_text(old, 50) == "1.5" and percentile_text(None, 50) == "-"


def test_terminal_shows_intervals_the_robust_cv_and_the_flags():
    text = terminal_table(fixture())
    header = text.splitlines()[0]
    assert "p50_ms [95% CI]" in header and "robust_cv" in header and "flags" in header
    assert " cv " not in header
    assert "n/a (n=12 < 100)" in text
    stalled = next(line for line in text.splitlines() if "mlp-ort-cpu" in line)
    assert "tail-heavy" in stalled and "noisy" not in stalled


def test_html_and_markdown_show_the_same():
    run = fixture()
    lat = run.cases[0].latency
    html = render_html(run)
    assert "p50 ms [95% CI]" in html and "robust CV" in html and "(tail-heavy)" in html
    assert f"[{lat.p50_ci_low_ms:.4g}, {lat.p50_ci_high_ms:.4g}]" in html
    assert "n/a (n=12 &lt; 100)" in html
    md = render_markdown(run)
    assert "p50 ms [95% CI]" in md and "robust CV" in md and "n/a (n=12 < 100)" in md and "tail-heavy" in md


def test_a_generation_p99_from_too_few_decode_steps_is_not_shown():
    from harness.report.generation import generation_row
    from harness.results.stats import summary_ms

    c = CaseResult(CaseId("tiny-lm", "torch-cpu", "fp32", 1, 8, "cpu", gen=4), "passed")
    c.generation = GenerationRecord(tpot=GenerationStats(**summary_ms([1_000_000 + 1000 * i for i in range(40)],
                                                                      (50, 90, 99))))
    row = generation_row(c)
    assert row["tpot_p50_ms"] > 0 and row["tpot_p90_ms"] > 0 and row["tpot_p99_ms"] is None
    c.generation = GenerationRecord(tpot=GenerationStats(**summary_ms([1_000_000 + 1000 * i for i in range(400)],
                                                                      (50, 90, 99))))
    assert generation_row(c)["tpot_p99_ms"] > 0
    assert cases_frame(RunResults("r", "t", cases=[c])).loc[0, "tpot_p99_ms"] > 0
