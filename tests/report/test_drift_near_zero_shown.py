"""A drift passed by its absolute floor (a reference ~0 on random input) is said in words where people look: the
terminal's lines after the table (with the --feeds hint), the drift cells of the report and summary.md."""

from __future__ import annotations

import numpy as np
import pytest

from harness.accuracy import compare
from harness.precision import Precision, default_tolerance
from harness.report.render import render_html, render_markdown
from harness.report.terminal import drift_note_lines
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency


def _case(runtime: str, seed: int, near_zero: bool) -> CaseResult:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(400) - (16.0 if near_zero else 0.0)
    ref = (1 / (1 + np.exp(-logits))).astype(np.float32)
    out = (1 / (1 + np.exp(-(logits + rng.standard_normal(400) * 1e-2)))).astype(np.float32) if near_zero \
        else ref * np.float32(1 + 1e-7)
    acc = compare({"map": ref}, {"map": out}, default_tolerance(Precision.FP32), precision="fp32")
    assert acc, acc.message
    return CaseResult(CaseId("det", runtime, "fp32", 1, None, "cpu"), "passed", samples_ns=[1_000_000] * 5,
                      latency=fake_latency(1.0, 5), throughput_sps=1000.0,
                      accuracy=acc.as_dict(), reason="; ".join(acc.notes), reference_runtime="ort-cpu")


@pytest.mark.parametrize("seed", range(4))
def test_near_zero_references_are_said_on_the_terminal_and_in_the_report(seed):
    cases = [_case(f"rt{i}", seed * 10 + i, near_zero=i % 2 == 0) for i in range(8)]
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=cases, complete=True)
    noted = [c for c in cases if c.accuracy["notes"]]
    assert len(noted) == 4
    lines = drift_note_lines(run, limit=3)
    assert len(lines) == 4 and lines[-1].startswith("drift near zero: 1 more case(s)")
    for line, c in zip(lines[:3], noted[:3]):
        assert line.startswith(f"{c.case.id}: drift near zero: reference output 'map' is ~0 on random input")
        assert line.endswith("feed real inputs with --feeds")
    assert all(c.drift_note == ("reference ~0" if c in noted else "") for c in cases)
    html = render_html(run)
    assert html.count("(ref ~0: float noise)") >= len(noted)
    assert "(ref ~0: float noise)" in render_markdown(run)
