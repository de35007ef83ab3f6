"""Every table that shows cases names the variant (and a pinned release); a speed-up names what it is against;
"best" never picks a cached setup time; "outside the model" is never negative; unrankable variant rows are said
so in words and rows go fastest first; the report's Summary carries the terminal's words on the machine.
Generated runs (seeded), not one example."""

from __future__ import annotations

import random
import re

import pytest

from harness.report import tables
from harness.report.render import render_html, render_markdown
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.records import EndToEndRecord
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

VARIANTS = (None, "opt=basic", "opt=disabled", "spin=off", "threads=1", "simplify=onnxsim")
RUNTIMES = ("ort-cpu", "ort-cpu@1.30.0", "openvino-cpu")


def _case(runtime, variant, precision, p50, *, contended=False, cached=False, reused=False, status="passed",
          seq=None, e2e=None, model="bert-mini"):
    ns = int(p50 * 1e6)
    return CaseResult(
        CaseId(model, runtime, precision, 1, seq, "cpu", variant=variant), status, samples_ns=[ns] * 5,
        latency=fake_latency(p50, 5, p99_ms=p50 * 1.2),
        throughput_sps=1000 / p50, accuracy={"rel_l2": 1e-7, "max_abs": 1e-7, "cosine": 1.0}, setup_s=0.5 + p50,
        reference_runtime="torch-cpu", artifact_cache_hit=cached, details={"activation_reused": reused},
        contention=CaseContentionRecord(contended=contended, cause="the worker's threads waited 60% of their runnable time")
        if contended else None, end_to_end=None if e2e is None else EndToEndRecord.from_dict(e2e))


def _random_run(seed: int, *, all_contended: bool = False) -> RunResults:
    rng = random.Random(seed)
    cases = []
    for runtime in rng.sample(RUNTIMES, rng.randint(1, len(RUNTIMES))):
        for precision in ("fp32", "int8"):
            for variant in rng.sample(VARIANTS, rng.randint(2, len(VARIANTS))):
                cases.append(_case(runtime, variant, precision, round(rng.uniform(0.5, 20.0), 3),
                                   contended=all_contended or rng.random() < 0.3, cached=rng.random() < 0.3,
                                   reused=rng.random() < 0.2, seq=128))
    cases.append(_case("torch-cpu", None, "fp32", 25.0, seq=128))
    cases.append(_case("ort-cpu", rng.choice(VARIANTS), "fp32", 0.5, model="mlp",  # a model without a seq axis
                       contended=all_contended))
    env = {"machine": "vm (AMD EPYC, 2 cpus, threads=2)", "hostname": "vm", "cpu_busy_others_percent": 64.0}
    return RunResults(run_id=f"r{seed}", started_at="t", environment=RunEnvironmentRecord.from_dict(env), config={}, cases=cases, complete=True)


def _label(c: CaseResult) -> str:
    return c.case.runtime_label


@pytest.mark.parametrize("seed", range(12))
def test_every_drift_row_names_its_variant_and_release_and_what_its_speed_up_is_against(seed):
    run = _random_run(seed)
    table = tables.drift_tables(run)["bert-mini"]
    measured = {(_label(c), c.case.precision) for c in run.cases if c.case.model == "bert-mini"}
    rows = list(zip(table["runtime"], table["precision"]))
    assert sorted(rows) == sorted(measured)  # one row per case: no two rows read the same
    assert len(set(rows)) == len(rows)
    for r in table.itertuples():
        variant = r.runtime.partition("~")[2] or None
        if r.precision == "fp32" and variant is None:
            assert r.speedup_vs_fp32 is None or r.speedup_vs_fp32 != r.speedup_vs_fp32  # the FP32 base itself
            continue
        base = r.runtime.partition("~")[0]
        own_fp32 = (r.runtime, "fp32") in measured
        base_fp32 = (base, "fp32") in measured
        if r.precision == "fp32":  # a variant's FP32 row: against the base, and it says so
            assert r.speedup_against == ("base fp32" if base_fp32 else "")
        else:
            assert r.speedup_against == ("fp32" if own_fp32 else "base fp32" if base_fp32 and variant else "")
        assert (r.speedup_against == "") == (r.speedup_vs_fp32 is None or r.speedup_vs_fp32 != r.speedup_vs_fp32)
    html = render_html(run)
    assert "ort-cpu@1.30.0" in html or not any(c.case.runtime == "ort-cpu@1.30.0" for c in run.cases)
    assert "vs base fp32" in html and "Speed-up vs FP32" not in html
    md = render_markdown(run)
    assert all(_label(c) in md for c in run.cases)
    assert "nan" not in md.lower().replace("nanosecond", "")


@pytest.mark.parametrize("seed", range(12))
def test_variant_rows_go_fastest_first_and_best_is_never_contended_or_failed(seed):
    for t in tables.variant_tables(_random_run(seed)):
        for precision in {r["precision"] for r in t["rows"]}:
            p50 = [r["p50_ms"] for r in t["rows"] if r["precision"] == precision]
            assert p50 == sorted(p50)
        best = [r for r in t["rows"] if r["best"]]
        ok = [r for r in t["rows"] if r["status"] == "passed" and not r["contended"]]
        assert len(best) == (1 if ok else 0)
        if best:
            assert best[0]["p50_ms"] == min(r["p50_ms"] for r in ok) and not t["unranked"]
        else:
            assert t["unranked"].startswith("No row is ranked")


@pytest.mark.parametrize("seed", range(6))
def test_when_every_row_is_contended_the_section_says_so_in_words(seed):
    run = _random_run(seed, all_contended=True)
    views = tables.variant_tables(run)
    assert views and all(t["unranked"] and not any(r["best"] for r in t["rows"]) for t in views)
    html = render_html(run)
    section = html[html.index('id="variants"'):html.index("Drift and speed per precision")]
    words = re.sub(r"<[^>]+>", " ", section)  # what a reader sees, not a tooltip
    assert words.count("No row is ranked") == len(views) and "were measured while the machine kept" in words
    assert "&#9733; <code>" not in section  # no row starred (the legend names the star)


@pytest.mark.parametrize("seed", range(12))
def test_a_cached_setup_time_is_never_the_best(seed):
    run = _random_run(seed)
    cached = {(_label(c), c.case.precision) for c in run.cases if c.case.model == "bert-mini"
              and (c.artifact_cache_hit or c.details.get("activation_reused"))}
    for t in tables.comparison_tables(run, {"bert-mini": "torch-cpu"}):
        if t["model"] != "bert-mini":
            continue
        row = next((r for r in t["rows"] if r["metric"].key == "setup_s"), None)
        if row is None:
            continue
        fresh = [v for c, v in row["values"].items() if (c, t["precision"]) not in cached and v is not None]
        assert row["best"] == (min(fresh) if fresh else None)
        for c in row["values"]:
            if (c, t["precision"]) in cached:
                assert row["cells"][c].endswith("(cached)")
    for t in tables.variant_tables(run):
        if t["model"] != "bert-mini":
            continue
        for r in t["rows"]:
            key = ((t["runtime"] + (f"~{r['variant']}" if r["variant"] else "")), r["precision"])
            assert r["setup_cached"] == (key in cached)


@pytest.mark.parametrize("seed", range(30))
def test_the_share_outside_the_model_is_never_negative(seed):
    rng = random.Random(seed)
    e2e, model_only = rng.uniform(0.01, 50), rng.uniform(0.01, 50)
    inner = rng.choice([None, e2e * rng.uniform(0.1, 1.0)])
    share, note = tables.outside_model_share(e2e, inner, model_only)
    assert 0.0 <= share < 100.0
    against = inner if inner else model_only
    assert share == pytest.approx(max(0.0, 100 * (e2e - against) / e2e))
    assert bool(note) == (against > e2e) and (not note or "timed apart" in note)
    c = _case("ort-cpu", rng.choice(VARIANTS), "fp32", model_only, model="digits-cnn",
              e2e={"latency": fake_latency(e2e, 5).as_dict(), "model_p50_ms": inner, "steps": "pgm decode"})
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[c], complete=True)
    (row,) = tables.end_to_end_tables(run)["digits-cnn"]
    assert row["runtime"] == c.case.runtime_label and row["outside_model_pct"] >= 0
    html = render_html(run)
    assert not re.search(r">-\d[\d.]*%<", html)


def test_the_summary_says_contended_and_cpu_busy_during_the_run_and_the_header_names_the_machine_once():
    run = _random_run(3)
    html = render_html(run)
    summary = re.sub(r"<[^>]+>", " ", html[html.index("<h2>Summary</h2>"):html.index("Skipped, and why")
                                           if "Skipped, and why" in html else html.index("<h2>Comparison")])
    assert "CPU busy during the run: other processes used 64% of the CPUs" in summary
    assert "contended:" in summary
    md = render_markdown(run)
    assert "- vm (AMD EPYC, 2 cpus, threads=2): " in md and "vm (vm" not in md
