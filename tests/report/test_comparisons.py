"""Comparisons a team can choose a runtime from (#58): every precision against the FP32 reference, same-precision
columns labelled, ratios from contended figures marked, `contended` among the flags, a precision slower than its
own FP32 said with its likely cause, no floor drawn as a measurement, and a conclusion per model, precision and
shape that ranks only where the figures allow."""

from __future__ import annotations

from harness.report.conclusions import conclusion_lines, conclusions
from harness.report.render import render_html, render_markdown
from harness.report.tables import comparison_tables, drift_tables, flags_text, slower_than_fp32
from harness.results import CaseId, CaseResult, RunResults
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency


def case(runtime: str, p50: float, precision: str = "fp32", ci: tuple[float | None, float | None] | None = None,
         contended: bool = False, status: str = "passed", rel_l2: float = 1e-7, recipe: str | None = None,
         model: str = "m", batch: int = 1) -> CaseResult:
    lo, hi = ci if ci is not None else (p50 * 0.99, p50 * 1.01)
    return CaseResult(CaseId(model, runtime, precision, batch, None, "cpu"), status,
                      latency=fake_latency(p50, 400, p90_ms=p50 * 1.1, p95_ms=p50 * 1.2, p99_ms=p50 * 1.5, std_ms=0.01,
                                           cv=0.01, p50_ci_low_ms=lo, p50_ci_high_ms=hi, p99_ci_low_ms=p50 * 1.4,
                                           p99_ci_high_ms=None, ci_level=0.95),
                      throughput_sps=batch * 1000.0 / p50, accuracy={"max_abs": rel_l2, "rel_l2": rel_l2,
                                                                      "cosine": 1.0},
                      reference_runtime="torch-cpu", samples_ns=[int(p50 * 1e6)] * 10, precision_recipe=recipe,
                      contention=CaseContentionRecord(contended=contended, cause="run-queue wait 40%") if contended else None,
                      reason="drift over tolerance" if status == "failed" else "")


def run_of(*cases: CaseResult) -> RunResults:
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "box", "git": {}, "threads": {},
                                                               "libraries": {}}),
                      config={"models": ["m"], "runtimes": [], "precisions": [], "batch_sizes": [1], "seq_lens": [],
                              "timing": {}, "isolation": True}, cases=list(cases), complete=True)


def test_int8_columns_compare_with_the_fp32_reference_and_label_the_same_precision_ones():
    """torch-cpu INT8 quantised 4% of resnet18 and sat at 24 ms: against it, ort-cpu INT8 read "9.3x faster". The
    comparison columns now say ort-cpu INT8 against torch-cpu FP32, and the same-precision column says what it
    is."""
    run = run_of(case("torch-cpu", 20.0), case("ort-cpu", 10.0), case("torch-cpu", 24.0, "int8"),
                 case("ort-cpu", 2.58, "int8"))
    tables = {t["precision"]: t for t in comparison_tables(run, {"m": "torch-cpu"})}
    int8 = tables["int8"]
    assert int8["others"] == ["torch-cpu", "ort-cpu", "ort-cpu (same precision)"]
    assert int8["headers"]["ort-cpu"] == "ort-cpu vs torch-cpu fp32"
    assert int8["headers"]["ort-cpu (same precision)"] == "ort-cpu vs torch-cpu int8 (same precision)"
    p50 = {r["metric"].key: r for r in int8["rows"]}["latency_p50_ms"]
    assert p50["change"]["ort-cpu"] == "7.8x faster"  # 20 / 2.58, against FP32
    assert p50["change"]["torch-cpu"] == "1.2x slower"  # torch INT8 against torch FP32
    assert p50["change"]["ort-cpu (same precision)"] == "9.3x faster"
    html = render_html(run)
    assert "ort-cpu vs torch-cpu fp32" in html and "(same precision)" in html
    fp32 = tables["fp32"]
    assert fp32["others"] == ["ort-cpu"] and fp32["vs"] == {"ort-cpu": "torch-cpu"}


def test_a_ratio_built_from_a_contended_figure_is_marked_everywhere():
    """summary.md said "1078.6x faster" for mlp ort-cpu b4 against a torch-cpu reference stalled at 24 ms by the
    machine; neither row was marked."""
    run = run_of(case("torch-cpu", 24.0, contended=True), case("ort-cpu", 0.0223))
    [t] = comparison_tables(run, {"m": "torch-cpu"})
    p50 = {r["metric"].key: r for r in t["rows"]}["latency_p50_ms"]
    assert p50["change"]["ort-cpu"].endswith("faster (contended)")
    md = render_markdown(run)
    assert "faster (contended)" in md and "p50 vs FP32 ref" in md
    [torch_row] = [line for line in md.splitlines() if line.startswith("| m ") and "torch-cpu" in line]
    assert "| contended " in torch_row  # the flags column of the measured cases
    assert flags_text(fake_latency(1.0, noisy=True), CaseContentionRecord(contended=True)) == "contended, noisy"
    assert flags_text(fake_latency(1.0), None) == "" and flags_text(None, None) == ""


def test_the_conclusion_ranks_only_where_the_figures_allow():
    ranked = conclusions(run_of(case("torch-cpu", 20.0), case("ort-cpu", 10.0), case("openvino-cpu", 7.7)))
    assert [c.text for c in ranked] == ["fastest within drift tolerance: openvino-cpu, 1.3x ort-cpu"]
    assert ranked[0].ranked and round(ranked[0].factor, 2) == 1.30
    overlap = conclusions(run_of(case("ort-cpu", 10.0, ci=(9.5, 10.6)), case("openvino-cpu", 9.9, ci=(9.4, 10.5))))[0]
    assert not overlap.ranked and overlap.text.startswith("not ranked: the p50 intervals of openvino-cpu [9.4, 10.5] "
                                                          "and ort-cpu [9.5, 10.6] overlap")
    runner_hot = conclusions(run_of(case("ort-cpu", 12.0, contended=True), case("openvino-cpu", 10.0)))[0]
    assert not runner_hot.ranked and "ort-cpu's figure was contended" in runner_hot.text
    best_hot = conclusions(run_of(case("ort-cpu", 12.0), case("openvino-cpu", 10.0, contended=True)))[0]
    assert best_hot.ranked and "quiet it can only be faster" in best_hot.text
    every = conclusions(run_of(case("ort-cpu", 12.0, contended=True), case("openvino-cpu", 10.0, contended=True)))
    assert "every configuration's figure was contended" in every[0].text
    drifted = conclusions(run_of(case("ort-cpu", 12.0), case("openvino-cpu", 1.0, status="failed", rel_l2=0.5)))[0]
    assert drifted.text == "only ort-cpu measured within its drift tolerance (openvino-cpu left out: drift over " \
                           "tolerance)"
    lines = conclusion_lines(conclusions(run_of(case("ort-cpu", 12.0), case("openvino-cpu", 9.0),
                                                case("ort-cpu", 40.0, batch=4), case("openvino-cpu", 30.0, batch=4))))
    assert lines == ["m fp32: b1: fastest within drift tolerance: openvino-cpu, 1.3x ort-cpu; b4: fastest within "
                     "drift tolerance: openvino-cpu, 1.3x ort-cpu"]


def test_the_report_and_summary_carry_the_conclusions():
    run = run_of(case("torch-cpu", 20.0), case("ort-cpu", 10.0), case("openvino-cpu", 7.7))
    html = render_html(run)
    assert 'id="conclusions"' in html and "fastest within drift tolerance: openvino-cpu, 1.3x ort-cpu" in html
    md = render_markdown(run)
    assert "### Conclusions" in md and "- m fp32: b1: fastest within drift tolerance: openvino-cpu, 1.3x ort-cpu" \
        in md
    assert "not ranked: every configuration's figure was contended" in render_markdown(
        run_of(case("ort-cpu", 12.0, contended=True), case("openvino-cpu", 10.0, contended=True)))


def test_a_precision_slower_than_its_fp32_says_the_likely_cause():
    assert slower_than_fp32("int8", "int8: QDQ ONNX (compiled by OpenVINO CPU)", 0.6, False).startswith(
        "likely cause: the Quantize/DequantizeLinear pairs")
    assert "dynamic quantisation" in slower_than_fp32("int8", "int8: dynamic (ORT quantize_dynamic)", 0.7, False)
    assert "only 4.1% of the parameters" in slower_than_fp32(
        "int8", "int8: torch.ao dynamic quantisation of nn.Linear (qint8), 1 layer, 4.1% of the parameters", 0.8,
        False)
    assert slower_than_fp32("int8", "anything", 0.6, True).startswith("contended")
    assert slower_than_fp32("int8", "anything", 1.4, False) == "" and slower_than_fp32("fp32", "", 0.5, False) == ""
    run = run_of(case("openvino-cpu", 10.0), case("openvino-cpu", 16.0, "int8", recipe="int8: QDQ ONNX"))
    rows = drift_tables(run)["m"]
    assert rows[rows["precision"] == "int8"].iloc[0]["slower_note"].startswith("likely cause")
    assert "slower than its FP32: likely cause" in render_html(run)


def test_no_floor_is_drawn_as_a_measurement_and_unbounded_intervals_are_explained():
    run = run_of(case("torch-cpu", 20.0, rel_l2=0.0), case("ort-cpu", 10.0), case("ort-cpu", 5.0, "int8", rel_l2=0.01),
                 case("torch-cpu", 18.0, "int8", rel_l2=0.02))
    html = render_html(run)
    assert "Not drawn: 1 case(s) with no drift at all" in html and "torch-cpu fp32 b1 (1.00x)" in html
    assert "unbounded on that side" in html  # the p99 intervals end in inf


def test_an_untuned_compiler_is_said_wherever_its_figures_are():
    """TVM's "untuned" was on the terminal but not in report.html or summary.md ("41.6x slower")."""
    untuned = case("tvm-cpu", 832.0)
    untuned.details = {"caveat": "untuned: TVM's default Relax pipeline applies no schedule; tune with --variants "
                                 "tune=N"}
    run = run_of(case("torch-cpu", 20.0), untuned)
    [t] = comparison_tables(run, {"m": "torch-cpu"})
    p50 = {r["metric"].key: r for r in t["rows"]}["latency_p50_ms"]
    assert p50["change"]["tvm-cpu"] == "41.6x slower (untuned)"
    assert "tvm-cpu: untuned: TVM's default Relax pipeline" in render_html(run).replace("&#39;", "'")
    md = render_markdown(run)
    assert "### Caveats" in md and "- tvm-cpu: untuned: TVM's default Relax pipeline" in md
    assert "41.6x slower (untuned)" in md


def test_the_summary_names_seq_lens_only_for_runs_with_a_sequence_axis():
    html = render_html(run_of(case("torch-cpu", 20.0)))
    assert "no model with a sequence axis in this run" in html
