"""The steps after a forward case's timed loop (harness.workloads.forward.steps) see the options the case's runtime
ran with: a `threads=1` variant's profile and localisation are judged at 1 thread, not at the run's count."""

from __future__ import annotations

import math
from types import SimpleNamespace

from harness.results.schema import CaseId
from harness.runtimes import RuntimeOptions
from harness.workloads.forward import steps as st


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def profile(self, runtime, feed, case, p50_ms, threads, dims, budget_s=None):
        self.calls.append(("profile", threads))
        return {"threads": threads}


def _ctx(profile: bool, localize: bool, drift_passed: bool, pipeline=None, threads=1, run_threads=2):
    config = SimpleNamespace(
        measure=SimpleNamespace(profile=profile, threads=run_threads, repeats=1, noise_cv=0.1),
        accuracy=SimpleNamespace(localize=localize), process=SimpleNamespace(case_timeout_s=100.0),
        matrix=SimpleNamespace(shapes=()), inputs=SimpleNamespace(seed=0), scenarios=(),
        loadgen=SimpleNamespace(traffic_file=None))
    phases: list[str] = []
    ctx = st.CaseContext(
        case=CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu", variant="threads=1"),
        spec=SimpleNamespace(pipeline=pipeline), runtime=SimpleNamespace(), feed={}, config=config,
        options=RuntimeOptions(threads=threads), policy=None, timer=None, profiler=Recorder(),
        on_phase=phases.append, p50_ms=1.0, drift_passed=drift_passed, tolerance=None)
    return ctx, phases


def test_profile_and_localisation_get_the_cases_own_thread_count(monkeypatch):
    seen = {}

    def fake_localize(runtime, feed, tolerance, trigger, threads, budget_s=120.0):
        seen["localize"] = (trigger, threads, budget_s)
        return {"trigger": trigger}

    monkeypatch.setattr(st, "localize_case", fake_localize)
    monkeypatch.setattr(st, "run_scenarios", lambda *a, **k: [])
    ctx, phases = _ctx(profile=True, localize=False, drift_passed=False, threads=1, run_threads=2)
    out = st.run_steps(ctx)
    assert ctx.profiler.calls == [("profile", 1)] and out["profile"] == {"threads": 1}
    assert seen["localize"] == ("failure", 1, 25.0) and out["localization"] == {"trigger": "failure"}
    assert phases == ["localize", "profile"] and out["scenarios"] == [] and "end_to_end" not in out


def test_steps_not_asked_for_do_not_run(monkeypatch):
    monkeypatch.setattr(st, "run_scenarios", lambda *a, **k: [])
    monkeypatch.setattr(st, "localize_case", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    ctx, phases = _ctx(profile=False, localize=False, drift_passed=True)
    assert st.run_steps(ctx) == {"scenarios": []} and phases == [] and ctx.profiler.calls == []
    assert math.isfinite(ctx.p50_ms)
