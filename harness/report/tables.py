"""pandas tables built from results: one row per case (results.csv) and the seed-style comparison tables."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.metrics import COMPARISON_METRICS, Metric
from harness.results.schema import CaseResult, RunResults

# results.csv columns, documented in the README.
CSV_COLUMNS = (
    "model", "runtime", "precision", "batch", "seq", "device", "status",
    "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_mean_ms", "latency_std_ms",
    "iterations", "cv", "noisy", "throughput_sps", "scenario", "timing_scope",
    "max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "setup_s", "phase", "signal",
    "reason", "onnx_path", "host_peak_mb", "gpu_peak_mb",
)


def case_row(r: CaseResult) -> dict[str, Any]:
    lat = r.latency or {}
    acc = r.accuracy or {}
    return {
        **r.case.as_dict(), "status": r.status,
        "latency_p50_ms": lat.get("p50_ms"), "latency_p90_ms": lat.get("p90_ms"),
        "latency_p95_ms": lat.get("p95_ms"), "latency_p99_ms": lat.get("p99_ms"),
        "latency_mean_ms": lat.get("mean_ms"), "latency_std_ms": lat.get("std_ms"),
        "iterations": lat.get("iterations"), "cv": lat.get("cv"), "noisy": lat.get("noisy"),
        "throughput_sps": r.throughput_sps, "scenario": r.scenario, "timing_scope": r.timing_scope,
        "max_abs": acc.get("max_abs"), "mean_abs": acc.get("mean_abs"), "rel_l2": acc.get("rel_l2"),
        "cosine": acc.get("cosine"), "top1_agreement": acc.get("top1_agreement"),
        "setup_s": r.setup_s, "phase": r.phase, "signal": r.signal, "reason": r.reason, "onnx_path": r.artifact,
        "host_peak_mb": r.host_peak_mb, "gpu_peak_mb": r.gpu_peak_mb,
    }


def cases_frame(run: RunResults) -> pd.DataFrame:
    """One row per case, columns CSV_COLUMNS (seq empty for models without a sequence axis)."""
    df = pd.DataFrame([case_row(c) for c in run.cases], columns=list(CSV_COLUMNS))
    return df.astype({"batch": "Int64", "seq": "Int64", "iterations": "Int64"})


def comparison_tables(run: RunResults, reference_runtime: dict[str, str]) -> list[dict[str, Any]]:
    """Per (model, precision, batch, seq): metric rows x runtime columns, with improvement vs the reference.

    `reference_runtime` maps a model to the runtime its improvements are measured against (PyTorch eager for
    models with a torch module). Only measured cases appear; the best value of each row is marked.
    """
    df = cases_frame(run)
    df = df[df["status"].isin(["passed", "failed"])]
    tables = []
    if df.empty:
        return tables
    keys = ["model", "precision", "batch", "seq"]
    for key, group in df.groupby(keys, dropna=False, sort=False):
        model, precision, batch, seq = key
        runtimes = list(dict.fromkeys(group["runtime"]))
        ref = reference_runtime.get(model)
        by_rt = {rt: group[group["runtime"] == rt].iloc[0] for rt in runtimes}
        others = [rt for rt in runtimes if rt != ref] if ref in by_rt else []
        rows = []
        for m in COMPARISON_METRICS:
            values = {rt: _num(by_rt[rt][m.key]) for rt in runtimes}
            best = m.best(list(values.values()))
            rows.append({
                "metric": m, "values": values, "best": best,
                "improvement": {rt: m.improvement_pct(values[rt], values.get(ref)) for rt in others},
            })
        rows.append({"metric": Metric("rel_l2", "Drift (rel L2 vs FP32 ref)", "", True), "best": None,
                     "values": {rt: _num(by_rt[rt]["rel_l2"]) for rt in runtimes}, "improvement": {}})
        tables.append({
            "model": model, "precision": precision, "batch": int(batch),
            "seq": None if pd.isna(seq) else int(seq), "runtimes": runtimes, "reference": ref if others else None,
            "others": others, "rows": rows,
            "noisy": [rt for rt in runtimes if bool(by_rt[rt]["noisy"])],
            "failed": [rt for rt in runtimes if by_rt[rt]["status"] == "failed"],
        })
    return tables


def _num(v: Any) -> float | None:
    if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NA:
        return None
    return float(v)
