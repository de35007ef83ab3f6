"""Figures believed (#58): a stored record whose figures cannot be (a latency "abc" in end_to_end, 1e34 inferences
per joule, negative joules with a per-inference figure, a rel L2 of -1, a cosine of 5) is refused by the one
reader with one line naming the file and the field; `harness report` exits 2 on it, never a traceback."""

from __future__ import annotations

import json

import pytest
from gating.gating_synth import make_run

from harness.cli import main
from harness.errors import ResultsError
from harness.results.schema import load_results
from harness.results.stats import latency_stats

ENERGY = {"status": "measured", "reason": "", "calls": 100, "batch": 4, "sources": [], "net_joules": 1.5,
          "uncertainty_j": 0.01, "joules_per_inference": 0.015, "joules_per_sample": 0.00375,
          "inferences_per_joule": 66.67, "method": "m"}
E2E = {"steps": "pre -> model -> post", "samples_ns": [1_000_000] * 5,
       "latency": latency_stats([1_000_000] * 5).as_dict(), "throughput_sps": 1000.0}
LOC = {"trigger": "failure", "checked": 3, "first_bad": [{"node": "n", "rel_l2": 0.5, "cosine": 0.9, "max_abs": 1.0}]}


def _write(tmp_path, field: str, value) -> str:
    run = make_run(1, n=20)
    doc = json.loads(run.to_json())
    doc["cases"][0][field] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("field, value", [("energy", ENERGY), ("end_to_end", E2E), ("localization", LOC)])
def test_the_honest_records_read(tmp_path, field, value):
    assert getattr(load_results(_write(tmp_path, field, value)).cases[0], field) is not None


@pytest.mark.parametrize("field, value, place, says", [
    ("end_to_end", {**E2E, "latency": {"p50_ms": "abc"}}, "end_to_end.latency", ""),
    ("energy", {**ENERGY, "joules_per_inference": 1e-34, "net_joules": 1e-32, "inferences_per_joule": 1e34,
                "joules_per_sample": 2.5e-35}, "energy", "physically impossible"),
    ("energy", {**ENERGY, "net_joules": -1.5}, "energy", "positive net_joules"),
    ("energy", {**ENERGY, "inferences_per_joule": 1e34}, "energy", "not 1 / joules_per_inference"),
    ("energy", {**ENERGY, "joules_per_inference": None}, "energy", "without joules_per_inference"),
    ("localization", {**LOC, "first_bad": [{"node": "n", "rel_l2": -1}]}, "localization.first_bad", "never negative"),
    ("localization", {**LOC, "first_bad": [{"node": "n", "cosine": 5}]}, "localization.first_bad", "[-1, 1]"),
])
def test_impossible_figures_are_refused_naming_the_file_and_field(tmp_path, field, value, place, says):
    path = _write(tmp_path, field, value)
    with pytest.raises(ResultsError) as info:
        load_results(path)
    text = str(info.value)
    assert text.startswith(path) and f"cases[0].{place}" in text and says in text, text


def test_harness_report_exits_2_on_them_with_one_line(tmp_path, capsys):
    path = _write(tmp_path, "end_to_end", {**E2E, "latency": {"p50_ms": "abc"}})
    assert main(["report", path, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and "end_to_end.latency" in err[0]
