"""Synthetic RunResults for gating tests: lognormal latency samples, no timing involved."""

from __future__ import annotations

import numpy as np

from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, throughput_sps
from harness.results.stored import RunEnvironmentRecord

ENV = {"cpu_model": "Test CPU 9000", "cpu_cores_logical": 2, "threads": {"harness_threads": 2},
       "libraries": {"torch": "2.13.0", "onnxruntime": "1.31.1"}, "machine": "test (Test CPU 9000, 2 cpus)"}

CASES = [CaseId(m, r, "fp32", b, None, "cpu") for m in ("mlp", "resnet18") for r in ("torch-cpu", "ort-cpu")
         for b in (1, 4)]


def samples(median_ms: float, n: int, seed: int, sigma: float = 0.05) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(v) for v in median_ms * 1e6 * rng.lognormal(0.0, sigma, n)]


def case_result(case: CaseId, ns: list[int] | None = None, status: str = "passed", rel_l2: float = 1e-7,
                **kw) -> CaseResult:
    if status not in ("passed", "failed"):
        return CaseResult(case, status, reason=kw.pop("reason", f"it {status}"), **kw)
    stats = latency_stats(ns)
    acc = {"passed": status == "passed", "rel_l2": rel_l2, "max_abs": rel_l2, "failures": []}
    kw.setdefault("model_fingerprint", f"fp-{case.model}")
    kw.setdefault("timing_scope", "host_to_host")
    return CaseResult(case, status, reason=kw.pop("reason", ""), samples_ns=ns, latency=stats,
                      throughput_sps=throughput_sps(case.batch, stats.mean_ms), accuracy=acc, **kw)


def make_run(seed: int, n: int = 200, scale: dict[str, float] | None = None, env: dict | None = None,
             cases: list[CaseId] | None = None) -> RunResults:
    """One run of CASES: median 1 ms x (1 + index), lognormal spread; `scale` multiplies a runtime's samples."""
    scale = scale or {}
    out = []
    for i, case in enumerate(cases or CASES):
        ns = samples(1.0 + i, n, seed * 1000 + i)
        f = scale.get(case.runtime, 1.0)
        out.append(case_result(case, [int(v * f) for v in ns]))
    return RunResults(run_id=f"synthetic-{seed}", started_at="2026-11-23T00:00:00+00:00",
                      environment=RunEnvironmentRecord.from_dict(dict(env or ENV)), config={"noise_cv": 0.1}, cases=out, complete=True)
