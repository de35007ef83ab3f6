"""The deployment-variants view: rows per variant, fastest first, the fastest within tolerance starred."""

from __future__ import annotations

from harness.report.render import render_html
from harness.report.tables import comparison_tables, variant_tables
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency


def _case(variant, p50_ms, status="passed", rel_l2=1e-7, precision="fp32", runtime="ort-cpu"):
    ns = int(p50_ms * 1e6)
    return CaseResult(CaseId("mlp", runtime, precision, 1, None, "cpu", variant=variant), status,
                      samples_ns=[ns] * 5, latency=fake_latency(p50_ms),
                      throughput_sps=1000 / p50_ms, accuracy={"rel_l2": rel_l2}, setup_s=0.5,
                      reference_runtime="torch-cpu")


def _run():
    cases = [_case(None, 2.0), _case("opt=disabled", 3.0), _case("simplify=onnxsim", 1.9),
             _case("prune=0.3", 1.0, status="failed", rel_l2=0.2), _case(None, 1.5, precision="int8"),
             _case("int8=dynamic", 1.2, precision="int8"), _case(None, 4.0, runtime="torch-cpu")]
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "m"}), config={}, cases=cases,
                      complete=True)


def test_rows_per_variant_and_the_best_within_tolerance():
    (t,) = variant_tables(_run())  # torch-cpu ran no variant: no table for it
    assert (t["model"], t["runtime"], t["batch"]) == ("mlp", "ort-cpu", 1)
    rows = [(r["precision"], r["variant"]) for r in t["rows"]]
    assert rows == [("fp32", "prune=0.3"), ("fp32", "simplify=onnxsim"), ("fp32", None), ("fp32", "opt=disabled"),
                    ("int8", "int8=dynamic"), ("int8", None)]  # fastest first within each precision
    best = [r["variant"] for r in t["rows"] if r["best"]]
    assert best == ["int8=dynamic"]  # prune=0.3 is faster but outside the drift tolerance
    by = {(r["precision"], r["variant"]): r for r in t["rows"]}
    assert round(by[("fp32", "simplify=onnxsim")]["vs_base"], 3) == round(2.0 / 1.9, 3)
    assert by[("int8", "int8=dynamic")]["vs_base"] == 1.5 / 1.2 and by[("fp32", None)]["vs_base"] is None


def test_variants_are_their_own_columns_and_the_reference_is_the_base(tmp_path):
    tables = comparison_tables(_run(), {"mlp": "torch-cpu"})
    fp32 = next(t for t in tables if t["precision"] == "fp32")
    assert fp32["runtimes"] == ["ort-cpu", "ort-cpu~opt=disabled", "ort-cpu~simplify=onnxsim", "ort-cpu~prune=0.3",
                                "torch-cpu"]
    assert fp32["reference"] == "torch-cpu"
    html = render_html(_run())
    assert 'id="variants"' in html and "&#9733; <code>int8=dynamic</code>" in html


def test_markdown_names_variants_and_keeps_the_reference_the_base():
    from harness.report.render import render_markdown

    run = _run()
    run.cases.append(_case("prune=0.3", 2.0, runtime="torch-cpu"))
    md = render_markdown(run)
    rows = {line.split("|")[2].strip(): line for line in md.splitlines() if line.startswith("| mlp")}
    assert "ort-cpu~opt=disabled" in rows and "torch-cpu~prune=0.3" in rows
    def cell(row):
        return [c.strip() for c in row.split("|")][11]

    assert cell(rows["torch-cpu"]) == "ref" and cell(rows["torch-cpu~prune=0.3"]) == "2.0x faster"
    assert cell(rows["ort-cpu~opt=disabled"]) == "1.3x faster"  # against the base torch-cpu case (4.0 ms)
