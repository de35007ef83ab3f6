"""The report's load sections: LoadGen scenarios per model, the batcher's latency/throughput curves, traffic replay."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from harness.report import charts
from harness.report.formats import fmt
from harness.results.schema import ScenarioRun, peak_server


def traffic_rows(all_cases: list[tuple[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The "Traffic replay" table per model (--traffic): a row per case whose runtime replayed the traffic."""
    out: dict[str, list[dict[str, Any]]] = {}
    for label, c in all_cases:
        if c.traffic is not None:
            out.setdefault(c.case.model, []).append({"label": label, "case": c.case, "t": c.traffic})
    return out


def scenario_rows(all_cases: list[tuple[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The "Load scenarios" table per model: a row per case and LoadGen scenario (a Server search is one row,
    its highest VALID try, with every try listed), in the order the cases ran."""
    out: dict[str, list[dict[str, Any]]] = {}
    for label, c in all_cases:
        runs: list[ScenarioRun] = list(c.scenarios)
        shown = [r for r in runs if r.scenario != "server"]
        peak = peak_server(runs)
        if peak is not None:
            shown.append(peak)
        for r in shown:
            tries = [t for t in runs if t.scenario == "server"] if r.scenario == "server" else []
            out.setdefault(c.case.model, []).append({
                "label": label, "case": c.case, "run": r, "headline": _headline(r, len(tries)),
                "search": ", ".join(f"{fmt(t.target_qps)} {t.result}" for t in tries) if len(tries) > 1 else "",
                "reasons": "; ".join(r.reasons or ([r.error] if r.error else []))})
    return out


def batcher_sections(all_cases: list[tuple[str, Any]], multi: bool) -> dict[str, dict[str, Any]]:
    """--batcher: per model with a batched LoadGen test, the latency/throughput curve of its Server tests (p99
    and p50 latency over the completed samples/s, one line per case, batched or not: a run without --batcher
    reported beside one draws the plain SUT's curve with it) and a row per batched test with its batches."""
    out: dict[str, dict[str, Any]] = {}
    batched_models = {c.case.model for _, c in all_cases for r in c.scenarios if r.batcher}
    for label, c in all_cases:
        if c.case.model not in batched_models:
            continue
        runs: list[ScenarioRun] = list(c.scenarios)
        section = out.setdefault(c.case.model, {"series": {}, "bounds": {}, "rows": []})
        server = [r for r in runs if r.scenario == "server" and r.samples_per_s and r.latency_ms.get("p99")]
        policy = next((r.batcher for r in runs if r.batcher), None)
        name = (f"{c.case.runtime_label} b{c.case.batch}" + (f" {label}" if multi else "")
                + (f", batcher max {policy.max_batch} wait {fmt(policy.max_wait_ms)} ms" if policy else ", no batcher"))
        for pct in ("p99", "p50"):
            pts = [(float(r.samples_per_s or 0.0), float(r.latency_ms[pct]),
                    f"{fmt(r.samples_per_s)} samples/s (target {fmt(r.target_qps)} QPS, {r.result}): {pct} "
                    f"{fmt(r.latency_ms[pct])} ms" + (f", mean batch {fmt(r.batcher.mean_batch)}"
                                                      if r.batcher else ""))
                   for r in server if r.latency_ms.get(pct) is not None]
            if pts:
                section["series"][f"{name} {pct}"] = pts
        for r in server:
            if r.target_latency_ms:
                section["bounds"][f"p99 bound {fmt(r.target_latency_ms)} ms"] = float(r.target_latency_ms)
        for r in runs:
            b = r.batcher
            if b is None and not (policy and r.scenario in ("server", "offline")):
                continue
            section["rows"].append({
                "label": label, "case": c.case, "run": r, "batcher": b,
                "histogram": " ".join(f"{i + 1}:{n}" for i, n in enumerate(b.batch_sizes) if n) if b else "",
                "reason": "; ".join(r.reasons or ([r.error] if r.error else []))})
    for section in out.values():
        section["chart"] = Markup(charts.curve_chart(
            section["series"], title="Latency over throughput, LoadGen Server tests", x_label="completed samples/s",
            y_label="latency ms", bounds=section["bounds"],
            dashed=[n for n in section["series"] if n.endswith(" p50")])) if section["series"] else None
    return out


def batcher_cell(r: ScenarioRun) -> str:
    """A batched test's batches in brief (Markdown): the policy, the mean batch and the queue wait's p99."""
    b = r.batcher
    if b is None:
        return ""
    return (f"max {b.max_batch} wait {fmt(b.max_wait_ms)} ms: mean batch {fmt(b.mean_batch)}, queue wait p99 "
            f"{fmt(b.queue_wait_ms.get('p99'))} ms")


def _headline(r: ScenarioRun, tries: int) -> str:
    """The scenario's MLPerf figure: single-stream p90, multi-stream p99 per query, offline samples/s, server
    the target QPS (the highest VALID one of a search)."""
    if r.result in ("error", "skipped"):
        return r.result
    if r.scenario == "single-stream":
        return f"p90 {fmt(r.latency_ms.get('p90'))} ms"
    if r.scenario == "multi-stream":
        return f"p99 {fmt(r.query_latency_ms.get('p99'))} ms per query"
    if r.scenario == "offline":
        return f"{fmt(r.samples_per_s)} samples/s"
    bound = f"p99 ≤ {fmt(r.target_latency_ms)} ms"
    if r.valid:
        return f"{fmt(r.target_qps)} QPS at {bound}"
    return f"no VALID QPS in {tries} tries ({bound})" if tries > 1 else f"{fmt(r.target_qps)} QPS: INVALID"

