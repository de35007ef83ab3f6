"""The --profile section: "where the time goes" per model (runtimes side by side per layer, top layers and the
rest, drift beside), the roofline chart and the percent of peak per case, in HTML and Markdown."""

from __future__ import annotations

from harness.report.profile import peak_rows, where_time_goes
from harness.report.render import render_html, render_markdown
from harness.results import CaseId, CaseResult, RunResults
from harness.results.records import LocalizationRecord
from harness.results.stored import ProfileRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

EVIL = "<b>x</b>"


def _roof(gflops, intensity):
    return {"achieved_gflops": gflops, "achieved_gbs": gflops / intensity, "intensity": intensity,
            "percent_of_roof": 40.0, "percent_of_peak": 30.0, "bound": "compute", "over_roof": False,
            "peak_gflops": 100.0, "bandwidth_gbs": 10.0, "flops": 1e9, "bytes_moved": 1e8}


def case(runtime, times, p50, localization=None, profile_extra=None):
    nodes = [{"node": n, "op_type": "Conv", "time_ms": t, "share": t / sum(times.values()), "gflops": 10.0,
              "fusion": "FusedConv" if n == "conv1" else ""} for n, t in times.items()]
    total = sum(times.values())
    profile: dict = {"nodes": nodes, "unmapped": [{"name": "reorder", "op_type": "Reorder", "time_ms": 0.05}],
               "unmapped_ms": 0.05, "total_ms": total + 0.05, "measured_p50_ms": p50,
               "gap_percent": 100 * (total + 0.05 - p50) / p50, "adjacent_p50_ms": p50, "adjacent_gap_percent": 1.0, "wall_ms": p50 * 1.1, "runs": 10, "method": "m",
               "cost": {"flops": 1e9, "bytes_moved": 1e8}, "roofline": _roof(50.0, 10.0), **(profile_extra or {})}
    return CaseResult(CaseId("net", runtime, "fp32", 1, None, "cpu"), "passed",
                      latency=fake_latency(p50, 10),
                      throughput_sps=1e3 / p50, samples_ns=[int(p50 * 1e6)] * 10,
                      profile=ProfileRecord.from_dict(profile),
                      localization=None if localization is None else LocalizationRecord.from_dict(localization))


def run():
    layers = {f"conv{i}": float(20 - i) for i in range(1, 15)}  # with torch-cpu's two: 15 layers, 10 shown; ort-cpu has 5 in "the rest"
    cases = [case("ort-cpu", layers, 200.0, {"trigger": "request", "checked": 14, "first_bad": [{"node": "conv2", "op_type": "Conv", "tensor": "t2", "max_abs": 0.5, "rel_l2": 0.125, "cosine": 0.99}]}),
             case("torch-cpu", {EVIL: 25.0, "conv1": 30.0}, 40.0),
             case("tvm-cpu", {}, 9.0, profile_extra={"unsupported": "tvm-cpu cannot profile: reasons",
                                                      "nodes": [], "roofline": _roof(5.0, 10.0)})]
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "m"}), config={}, cases=cases,
                      complete=True)


def test_runtimes_side_by_side_per_layer_with_the_rest_and_drift():
    (t,) = where_time_goes([run()], ["m"])
    assert t["columns"] == ["ort-cpu", "torch-cpu"]
    assert [r["layer"] for r in t["rows"]][:3] == ["conv1", EVIL, "conv2"] and len(t["rows"]) == 10
    conv1 = t["rows"][0]
    assert conv1["cells"]["ort-cpu"]["time_ms"] == 19.0 and conv1["cells"]["torch-cpu"]["time_ms"] == 30.0
    assert t["rows"][2]["drift"] == {"ort-cpu": 0.125}
    ort = next(s for s in t["summary"] if s["column"] == "ort-cpu")
    assert ort["rest_layers"] == 5 and ort["rest_ms"] == sum(20.0 - i for i in range(10, 15))
    assert t["unsupported"] == [{"column": "tvm-cpu", "why": "tvm-cpu cannot profile: reasons"}]
    assert [r["percent_of_peak"] for r in peak_rows([run()], ["m"])] == [30.0, 30.0, 30.0]


def test_html_shows_the_section_the_chart_and_escapes_names():
    html = render_html(run())
    assert "Where the time goes (--profile)" in html and "roofline: cases under the measured ceilings" in html
    assert EVIL not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "FusedConv" in html and "tvm-cpu cannot profile: reasons" in html and "5 layers" in html


def test_markdown_lists_percent_of_peak_and_the_top_layers():
    md = render_markdown(run())
    assert "### Where the time goes (--profile)" in md and "% of peak" in md
    assert "#### net b1" in md and "the rest" in md and "profile total / p50" in md and "adjacent p50 (gap)" in md
