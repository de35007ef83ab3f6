"""Write a run's derived outputs: results.csv, report.html, summary.md, benchmark.json (pytest-benchmark)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup, escape

from harness.display import csv_cell, speed_text, visible
from harness.gating.unjudged import gate_headline, unjudged_cause, verdict_rows
from harness.model import get_model
from harness.report import charts
from harness.report.energy import energy_section
from harness.report.profile import peak_rows, profile_markdown, roofline_chart, where_time_goes
from harness.report.generation import generation_markdown, generation_section
from harness.report.progress import noise_lines
from harness.report.tables import (as_runs, case_caveats, cases_frame, caveat_tag, comparison_tables, drift_cell,
                                   drift_tables, end_to_end_tables, env_packages, flags_text, interval_text,
                                   percentile_text, run_labels, ab_rows, runtime_label, skip_reasons, variant_tables)
from harness.report.templating import render_template
from harness.results.schema import BROKEN, RunResults, ScenarioRun, peak_server
from harness.results.stats import quoted, too_few_text
from harness.results.store import atomic_write_text

Runs = RunResults | Sequence[RunResults]


def _interval_cells(lat: dict[str, Any] | None) -> dict[str, str]:
    """The "All cases" table's extra latency text: the 95% intervals of the p50 and p99 ("" where the results
    predate them), and what stands instead of a p99 from too few samples ("n/a (n=12 < 100)")."""
    lat = lat or {}
    n = lat.get("iterations")
    out = {"p50_ci": "", "p99_ci": "", "p99_na": ""}
    if n is None or lat.get("p50_ms") is None:
        return out
    for q in (50, 99):
        if not quoted(q, int(n)):
            out[f"p{q}_na"] = too_few_text(q, int(n))
        elif f"p{q}_ci_low_ms" in lat:
            out[f"p{q}_ci"] = interval_text(lat.get(f"p{q}_ci_low_ms"), lat.get(f"p{q}_ci_high_ms"))
    return out


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or v is pd.NA or v != v:  # None, NA or NaN
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def reference_runtimes(runs: Runs) -> dict[str, str]:
    """Model -> the runtime improvements are measured against (recorded in results, else from the zoo)."""
    out: dict[str, str] = {}
    for run in as_runs(runs):
        for c in run.cases:
            if c.reference_runtime:
                out.setdefault(c.case.model, c.reference_runtime)
    for run in as_runs(runs):
        for c in run.cases:
            if c.case.model not in out:
                try:
                    out[c.case.model] = get_model(c.case.model).reference
                except Exception:  # noqa: BLE001 - a model not in this installation's zoo
                    pass
    return out


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    rows = df.to_dict("records")
    for r in rows:
        for k, v in r.items():
            if v is pd.NA or (isinstance(v, float) and v != v):
                r[k] = None
    return rows


def _latency_charts(runs: list[RunResults], labels: list[str], tables: list[dict[str, Any]]) -> None:
    """Attach to each comparison table the distribution of its cases' raw samples (box plot)."""
    samples: dict[tuple[str, str], list[int]] = {}
    multi = len(runs) > 1
    for run, label in zip(runs, labels):
        for c in run.cases:
            if c.measured and c.samples_ns:
                col = f"{c.case.runtime_label} @ {label}" if multi else c.case.runtime_label
                key = (f"{c.case.model}|{c.case.precision}|{c.case.batch}|{c.case.seq}", col)
                samples.setdefault(key, list(c.samples_ns))
    for t in tables:
        key = f"{t['model']}|{t['precision']}|{t['batch']}|{t['seq']}"
        rows = [(col, [s / 1e6 for s in samples[(key, col)]]) for col in t["runtimes"] if (key, col) in samples]
        t["box"] = Markup(charts.box_chart(rows, title=f"latency distribution {t['model']}",
                                           x_label="latency per call (ms): whiskers p1-p99, box p25-p75, "
                                                   "mark p50")) if rows else None


def _batch_charts(tables: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per model: p50 latency over batch size, a line per runtime column, per (precision, seq)."""
    groups: dict[tuple[str, str, Any], dict[str, list[tuple[float, float]]]] = {}
    for t in tables:
        p50 = next((r for r in t["rows"] if r["metric"].key == "latency_p50_ms"), None)
        if p50 is None:
            continue
        series = groups.setdefault((t["model"], t["precision"], t["seq"]), {})
        for col, v in p50["values"].items():
            if v is not None:
                series.setdefault(col, []).append((float(t["batch"]), v))
    out: dict[str, list[dict[str, Any]]] = {}
    for (model, precision, seq), series in groups.items():
        if len({x for pts in series.values() for x, _ in pts}) < 2:
            continue
        what = f"{precision}" + (f", seq {seq}" if seq is not None else "")
        out.setdefault(model, []).append({"what": what, "svg": Markup(charts.line_chart(
            series, title=f"p50 latency vs batch size, {model} {what}", x_label="batch size",
            y_label="p50 latency (ms)"))})
    return out


def _tradeoff_charts(runs: list[RunResults], refs: dict[str, str]) -> dict[str, Any]:
    """Per model: speed-up over the reference runtime's FP32 case (same shape, same run) vs drift."""
    df = cases_frame(runs)
    df = df[df["status"].isin(["passed", "failed"])].copy()
    df["runtime"] = [runtime_label(row) for _, row in df.iterrows()]  # a variant is a point of its own
    out: dict[str, Any] = {}
    for model, g in df.groupby("model", sort=False):
        ref = refs.get(str(model))
        base = g[(g["runtime"] == ref) & (g["precision"] == "fp32")]
        base_p50 = {(r.batch, None if pd.isna(r.seq) else r.seq, r.source): r.latency_p50_ms
                    for r in base.itertuples()}
        points, exact = [], []
        for r in g.itertuples():
            b = base_p50.get((r.batch, None if pd.isna(r.seq) else r.seq, r.source))
            if b is None or not r.latency_p50_ms or r.rel_l2 is None or pd.isna(r.rel_l2):
                continue
            shape = f"b{r.batch}" + ("" if pd.isna(r.seq) else f" s{r.seq}")
            if float(r.rel_l2) <= 0:  # no drift at all (the reference itself): a log axis has no place for 0
                exact.append(f"{r.runtime} {r.precision} {shape} ({float(b) / float(r.latency_p50_ms):.2f}x)")
                continue
            points.append({"x": float(r.rel_l2), "y": float(b) / float(r.latency_p50_ms),
                           "label": f"{r.runtime} {shape}", "group": str(r.precision)})
        if len({p["group"] for p in points}) > 1 or len(points) > 2:
            note = (f'<p class="muted small">Not drawn: {len(exact)} case(s) with no drift at all (rel L2 exactly 0, '
                    f"which a log axis cannot place; never plotted at a floor as if measured): "
                    f"{escape(', '.join(exact))}.</p>") if exact else ""
            out[str(model)] = Markup(charts.scatter_chart(
                points, title=f"speed-up vs drift, {model}", x_label="drift: rel L2 vs FP32 reference",
                y_label=f"speed-up vs {ref} fp32") + note)
    return out


def _sources(runs: list[RunResults], labels: list[str]) -> list[dict[str, Any]]:
    out = []
    for run, label in zip(runs, labels):
        noisy = [c.case.id for c in run.cases if c.measured and (c.latency or {}).get("noisy")]
        # the terminal's words on the machine (CPU busy during the run, contended cases, too many threads); the
        # busy-at-start and noisy lines have rows of their own
        noise = [line for line in noise_lines(run)
                 if not line.startswith(("CPU busy at start", "noisy (", "tail-heavy ("))]
        out.append({"label": label, "run": run, "env": run.environment, "config": run.config,
                    "has_seq": any(c.case.seq is not None for c in run.cases),
                    "counts": run.counts(), "noisy": noisy, "noise": noise,
                    "overhead": run.environment.get("harness_overhead") or {}})
    return out


def _env_rows(runs: list[RunResults]) -> list[tuple[str, list[Any]]]:
    keys = ["machine", "hostname", "cpu_model", "cpu_cores_logical", "cpu_cores_physical", "memory_total_gb",
            "os", "python", "cpu_busy_percent_at_start", "machine_fingerprint"]
    rows = [(k, [r.environment.get(k) for r in runs]) for k in keys
            if any(r.environment.get(k) is not None for r in runs)]
    gpu_keys = sorted({k for r in runs for k in (r.environment.get("gpu") or {}) if not isinstance(
        (r.environment.get("gpu") or {}).get(k), (dict, list))})
    rows += [(f"gpu.{k}", [(r.environment.get("gpu") or {}).get(k) for r in runs]) for k in gpu_keys]
    rows.append(("git", [f"{(r.environment.get('git') or {}).get('commit') or '-'}"
                         f"{' (dirty)' if (r.environment.get('git') or {}).get('dirty') else ''}" for r in runs]))
    rows.append(("threads", [" ".join(f"{k}={v}" for k, v in (r.environment.get("threads") or {}).items())
                             for r in runs]))
    libs = sorted({k for r in runs for k, v in (r.environment.get("libraries") or {}).items() if v})
    rows += [(k, [(r.environment.get("libraries") or {}).get(k) for r in runs]) for k in libs]
    # runtimes that ran in an environment of their own (harness.envs): the exact packages installed there
    own = [{c.case.runtime: env_packages(c.environment) for c in r.cases if c.environment} for r in runs]
    rows += [(f"{rt} (own environment)", [o.get(rt) for o in own]) for rt in sorted({k for o in own for k in o})]
    return rows


def _onnx_only(model: str, cases: list[Any]) -> bool:
    """No PyTorch module: recorded with each measured case; older results fall back to the registry."""
    recorded = [c.details["model_has_torch_module"] for c in cases if "model_has_torch_module" in c.details]
    if recorded:
        return not recorded[0]
    try:
        return get_model(model).build is None
    except Exception:  # noqa: BLE001 - a model not in this installation
        return False


def render_html(runs: Runs, verdicts: Sequence[dict[str, Any]] | None = None,
                baseline_label: str | None = None, gate_note: str | None = None,
                trends: Sequence[dict[str, Any]] | None = None, conformance_page: str | None = None) -> str:
    """The self-contained HTML report of one run or several (side by side, labelled by machine).

    `verdicts`: optional gating records against a baseline (dicts with case, metric, verdict, baseline,
    current, ratio, reason), shown in the summary; `gate_note`: what gate-check measured of the gate
    (`GateConfig.measured_line()`), shown above them; `trends`: the recorded history of the run's cases
    (harness.history.record.trend_rows), drawn in the trend section; `conformance_page`: the relative address
    of the operator conformance page beside it (linked under the title).
    """
    runs = as_runs(runs)
    labels = run_labels(runs)
    refs = reference_runtimes(runs)
    generation = generation_section(runs, labels)
    forward = [dataclasses.replace(r, cases=[c for c in r.cases if c.case.gen is None]) for r in runs]
    tables = comparison_tables(forward, refs)
    from harness.report.conclusions import conclusions

    found = conclusions(forward)
    by_key = {(c.model, c.precision, c.batch, c.seq): c for c in found}
    for t in tables:
        t["conclusion"] = None if len(runs) > 1 else by_key.get((t["model"], t["precision"], t["batch"], t["seq"]))
    _latency_charts(forward, labels, tables)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for t in tables:
        by_model.setdefault(t["model"], []).append(t)
    df = cases_frame(runs)
    rows = [{**row, "id": c.case.id, **_interval_cells(c.latency)}
            for row, c in zip(_records(df), [c for r in runs for c in r.cases])]
    drift = {m: _records(d) for m, d in drift_tables(forward).items()}
    all_cases = [(label, c) for run, label in zip(runs, labels) for c in run.cases]
    localized = [(label, c) for label, c in all_cases if c.localization]
    models = list(dict.fromkeys(c.case.model for _, c in all_cases))
    onnx_only = {m for m in models if _onnx_only(m, [c for _, c in all_cases if c.case.model == m])}
    profile_tables = where_time_goes(forward, labels)
    peaks = peak_rows(forward, labels)
    vlist = list(verdicts or [])
    vcounts: dict[str, int] = {}
    for v in vlist:
        vcounts[v["verdict"]] = vcounts.get(v["verdict"], 0) + 1
    return render_template(
        "report.html.j2", strict=False,
        runs=runs, multi=len(runs) > 1, sources=_sources(runs, labels), labels=labels, run=runs[0], config=runs[0].config, counts=_total_counts(runs),
        tables_by_model=by_model, batch_charts=_batch_charts(tables),
        tradeoff=_tradeoff_charts(forward, refs), drift=drift, generation=generation, localized=localized,
        end_to_end=end_to_end_tables(runs), variants=variant_tables(forward), ab=ab_rows(runs),
        scenarios=scenario_rows(all_cases), batcher=batcher_sections(all_cases, len(runs) > 1),
        traffic=traffic_rows(all_cases),
        models=models, refs=refs, onnx_only=onnx_only, conclusions=found,
        unbounded=any("inf" in (r.get("p50_ci") or "") + (r.get("p99_ci") or "") for r in rows),
        rows=rows, fmt=_fmt,
        dfmt=lambda r, v, digits=3: drift_cell(v, r.get("drift_note"), lambda x: _fmt(x, digits)),
        skips=skip_reasons(runs), env_rows=_env_rows(runs),
        not_passed=[(label, c) for label, c in all_cases if c.status not in ("passed", "skipped")],
        broken=[c for _, c in all_cases if c.status in BROKEN],
        verdicts=vlist, verdict_counts=vcounts, baseline_label=baseline_label, gate_note=gate_note,
        gate_line=gate_headline(verdict_rows(vlist)) if vlist else "",
        trends=_trend_charts(trends), conformance_page=conformance_page,
        profile_tables=profile_tables, peaks=peaks, energy=energy_section(all_cases),
        roofline=Markup(roofline_chart(peaks)) if peaks and roofline_chart(peaks) else None,
    )


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
                "search": ", ".join(f"{_fmt(t.target_qps)} {t.result}" for t in tries) if len(tries) > 1 else "",
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
                + (f", batcher max {policy.max_batch} wait {_fmt(policy.max_wait_ms)} ms" if policy else ", no batcher"))
        for pct in ("p99", "p50"):
            pts = [(float(r.samples_per_s or 0.0), float(r.latency_ms[pct]),
                    f"{_fmt(r.samples_per_s)} samples/s (target {_fmt(r.target_qps)} QPS, {r.result}): {pct} "
                    f"{_fmt(r.latency_ms[pct])} ms" + (f", mean batch {_fmt(r.batcher.mean_batch)}"
                                                      if r.batcher else ""))
                   for r in server if r.latency_ms.get(pct) is not None]
            if pts:
                section["series"][f"{name} {pct}"] = pts
        for r in server:
            if r.target_latency_ms:
                section["bounds"][f"p99 bound {_fmt(r.target_latency_ms)} ms"] = float(r.target_latency_ms)
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


def _batcher_cell(r: ScenarioRun) -> str:
    """A batched test's batches in brief (Markdown): the policy, the mean batch and the queue wait's p99."""
    b = r.batcher
    if b is None:
        return ""
    return (f"max {b.max_batch} wait {_fmt(b.max_wait_ms)} ms: mean batch {_fmt(b.mean_batch)}, queue wait p99 "
            f"{_fmt(b.queue_wait_ms.get('p99'))} ms")


def _headline(r: ScenarioRun, tries: int) -> str:
    """The scenario's MLPerf figure: single-stream p90, multi-stream p99 per query, offline samples/s, server
    the target QPS (the highest VALID one of a search)."""
    if r.result in ("error", "skipped"):
        return r.result
    if r.scenario == "single-stream":
        return f"p90 {_fmt(r.latency_ms.get('p90'))} ms"
    if r.scenario == "multi-stream":
        return f"p99 {_fmt(r.query_latency_ms.get('p99'))} ms per query"
    if r.scenario == "offline":
        return f"{_fmt(r.samples_per_s)} samples/s"
    bound = f"p99 ≤ {_fmt(r.target_latency_ms)} ms"
    if r.valid:
        return f"{_fmt(r.target_qps)} QPS at {bound}"
    return f"no VALID QPS in {tries} tries ({bound})" if tries > 1 else f"{_fmt(r.target_qps)} QPS: INVALID"


def _trend_charts(trends: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    from harness.report.trend import trend_chart

    return [{**t, "svg": Markup(trend_chart(t))} for t in trends or ()]


def _total_counts(runs: list[RunResults]) -> dict[str, int]:
    total: dict[str, int] = {}
    for run in runs:
        for k, v in run.counts().items():
            total[k] = total.get(k, 0) + v
    return total


def render_markdown(runs: Runs, verdicts: Sequence[dict[str, Any]] | None = None, max_rows: int = 40) -> str:
    """summary.md: a short Markdown summary for a CI job summary or a PR comment (tables via pandas)."""
    runs = as_runs(runs)
    labels = run_labels(runs)
    df = cases_frame(runs)
    lines = _md_header(runs, labels, verdicts)
    lines += _md_noise(runs, labels)
    lines += _md_conclusions(runs, labels)
    lines += _md_caveats(runs, labels)
    lines += _md_verdicts(verdicts, max_rows)
    lines += _md_measured(runs, df, max_rows)
    lines += _md_scenarios(runs, labels, max_rows)
    lines += _md_traffic(runs, labels, max_rows)
    lines += generation_markdown(runs, labels, _md_table)
    lines += profile_markdown(runs, labels, _md_table)
    lines += _md_problems(df, max_rows)
    lines += _md_skipped(runs, max_rows)
    return "\n".join(lines)


def _md_header(runs: list[RunResults], labels: list[str], verdicts: Sequence[dict[str, Any]] | None) -> list[str]:
    """The title, the gate's state first where there are verdicts, a line per run and the case counts."""
    lines = [f"## Inference harness: {_md(', '.join(r.run_id for r in runs))}", ""]
    if verdicts:  # the gate's state is the first line a CI job summary shows: never OK when it judged nothing
        lines = [f"**{_md(gate_headline(verdict_rows(verdicts)))}**", ""] + lines
    for run, label in zip(runs, labels):
        state = "complete" if run.complete else "INCOMPLETE (interrupted or killed)"
        machine = str(run.environment.get("machine") or "-")
        who = machine if machine == label or machine.startswith(f"{label} (") else f"{label} ({machine})"
        lines.append(f"- {_md(who)}: {len(run.cases)} cases, {state}")
    return lines + ["", " · ".join(f"**{k}** {v}" for k, v in _total_counts(runs).items() if v), ""]


def _md_conclusions(runs: list[RunResults], labels: list[str]) -> list[str]:
    """The comparison's conclusions (harness.report.conclusions): per model and precision, the fastest
    configuration within its drift tolerance and by how much, or why the figures do not rank them."""
    from harness.report.conclusions import conclusion_lines, conclusions

    lines = conclusion_lines(conclusions(runs), multi=len(runs) > 1)
    if not lines:
        return []
    return ["### Conclusions", "", *[f"- {_md(line)}" for line in lines], ""]


def _md_caveats(runs: list[RunResults], labels: list[str]) -> list[str]:
    """How runtimes were set up that their figures must be read with (an untuned compiler), once per runtime."""
    seen: dict[tuple[str, str], str] = {}
    for run, label in zip(runs, labels):
        for c in run.cases:
            caveat = (c.details or {}).get("caveat")
            if caveat and c.measured:
                seen.setdefault((c.case.runtime_label, str(caveat)), label)
    if not seen:
        return []
    return ["### Caveats", "", *[f"- {_md(runtime)}{' @ ' + _md(label) if len(runs) > 1 else ''}: {_md(caveat)}"
                                 for (runtime, caveat), label in seen.items()], ""]


def _md_noise(runs: list[RunResults], labels: list[str]) -> list[str]:
    """A busy CPU and noisy cases, where people look (the same lines as the terminal summary)."""
    noise = [(label, line) for run, label in zip(runs, labels) for line in noise_lines(run)]
    if not noise:
        return []
    return (["### Noise", ""] + [f"- {_md(label) + ': ' if len(runs) > 1 else ''}{_md(line)}" for label, line in noise]
            + [""])


def _md_verdicts(verdicts: Sequence[dict[str, Any]] | None, max_rows: int) -> list[str]:
    """The failing rows and the rows not judged, each with its figures: both statistics, the ratio and its
    interval, and (not judged) its cause; the counts in the gate's one wording (unjudged.gate_headline)."""
    if not verdicts:
        return []
    rows = verdict_rows(verdicts)
    shown = [(v, r) for v, r in zip(verdicts, rows) if v["verdict"] in ("regressed", "broke") or unjudged_cause(r)]
    lines = ["### Verdicts against the baseline", "", _md(gate_headline(rows)), ""]
    if shown:
        vdf = pd.DataFrame([{"case": v.get("case"), "metric": v.get("metric"),
                             "verdict": v["verdict"] + (f" (not judged: {unjudged_cause(r)})" if unjudged_cause(r)
                                                        and unjudged_cause(r) != v["verdict"] else ""),
                             "baseline": v.get("baseline"), "current": v.get("current"), "ratio": v.get("ratio"),
                             "interval": (f"[{v['ci_low']:.3f}, {v['ci_high']:.3f}]"
                                          if isinstance(v.get("ci_low"), (int, float))
                                          and isinstance(v.get("ci_high"), (int, float)) else ""),
                             "reason": v.get("reason", "")} for v, r in shown[:max_rows]])
        lines += [_md_table(vdf), ""]
    return lines


def _md_measured(runs: list[RunResults], df: pd.DataFrame, max_rows: int) -> list[str]:
    """The measured cases: p50/p99 with their intervals, flags, throughput, p50 against the reference, drift."""
    refs = reference_runtimes(runs)
    measured = df[df["status"].isin(["passed", "failed"])].copy()
    if measured.empty:
        return []
    lines: list[str] = []
    # a variant's case is a column of its own (`ort-cpu~opt=basic`), never the reference
    measured["runtime"] = [runtime_label(row) for _, row in measured.iterrows()]
    ref_p50 = {(r.model, r.precision, r.batch, None if pd.isna(r.seq) else r.seq, r.source): r.latency_p50_ms
               for r in measured.itertuples() if r.runtime == refs.get(r.model)}
    # every precision against the FP32 reference (as the report's comparison columns): an INT8 row is never
    # compared with the reference runtime's own INT8 case here
    ref_p50 = {k: v for k, v in ref_p50.items() if k[1] == "fp32"}
    caveats = case_caveats(runs)  # by cases_frame's row index, as `latencies` below
    ref_hot = {(r.model, r.batch, None if pd.isna(r.seq) else r.seq, r.source) for r in measured.itertuples()
               if r.runtime == refs.get(r.model) and r.precision == "fp32" and r.contended in (True, 1)}

    def vs_ref(r: Any) -> str:
        shape = (r.model, r.batch, None if pd.isna(r.seq) else r.seq, r.source)
        if r.runtime == refs.get(r.model) and r.precision == "fp32":
            return "ref"
        text = _pct(ref_p50.get((r.model, "fp32", r.batch, shape[2], r.source)), r.latency_p50_ms)
        if text != "-" and (r.contended in (True, 1) or shape in ref_hot):
            text += " (contended)"
        return text + (f" ({caveat_tag(caveats[r.Index])})" if text != "-" and caveats[r.Index] else "")

    measured["vs_ref"] = [vs_ref(r) for r in measured.itertuples()]
    measured["rel_l2"] = [drift_cell(r.rel_l2, r.drift_note) for r in measured.itertuples()]
    latencies = [c.latency for run in runs for c in run.cases]  # cases_frame's rows, in order
    measured["p50_text"] = [percentile_text(latencies[i], 50) for i in measured.index]
    measured["p99_text"] = [percentile_text(latencies[i], 99) for i in measured.index]
    contentions = [c.contention for run in runs for c in run.cases]
    measured["flags"] = [flags_text(latencies[i], contentions[i]) for i in measured.index]
    cols = ["model", "runtime", "precision", "batch", "seq", "p50_text", "p99_text", "robust_cv", "flags",
            "throughput_sps", "vs_ref", "rel_l2", "status"] + (["source"] if len(runs) > 1 else [])
    view = measured[cols].rename(columns={"p50_text": "p50 ms [95% CI]", "p99_text": "p99 ms [95% CI]",
                                          "robust_cv": "robust CV", "throughput_sps": "samples/s",
                                          "vs_ref": "p50 vs FP32 ref"})
    lines += ["### Measured cases", "",
              ("samples/s = batch / p50 latency (the one throughput definition: it agrees with p50 ms); "
               "p50 vs FP32 ref: this case's p50 against the model's reference runtime at FP32 (every precision "
               "against the FP32 reference), as \"7.5x faster\" / \"1.3x slower\", marked (contended) where "
               "either figure was contended: the machine, not the runtimes, then set the ratio; [95% CI]: the "
               "distribution-free interval from the raw samples (inf: the samples cannot bound that side, too "
               "few beyond the percentile); a p99 from fewer than 100 samples is n/a; robust CV (1.4826 x MAD / "
               "median) is what decides noisy."), ""]
    lines += [_md_table(view.head(max_rows)), ""]
    if len(view) > max_rows:
        lines += [f"... and {len(view) - max_rows} more in report.html / results.csv", ""]
    return lines


def _md_scenarios(runs: list[RunResults], labels: list[str], max_rows: int) -> list[str]:
    """--scenarios: one line per case and scenario, as the report's "Load scenarios" table."""
    all_cases = [(label, c) for run, label in zip(runs, labels) for c in run.cases]
    scen = [{"case": r["case"].id, **({"source": r["label"]} if len(runs) > 1 else {}), "scenario": r["run"].scenario,
             "LoadGen": r["run"].result, "figure": r["headline"], "reasons": r["reasons"][:200],
             "batcher": _batcher_cell(r["run"])}
            for rows in scenario_rows(all_cases).values() for r in rows]
    if not any(row["batcher"] for row in scen):  # the column only where --batcher ran
        scen = [{k: v for k, v in row.items() if k != "batcher"} for row in scen]
    if not scen:
        return []
    return ["### Load scenarios (MLPerf LoadGen)", "", _md_table(pd.DataFrame(scen[:max_rows])), ""]


def _md_traffic(runs: list[RunResults], labels: list[str], max_rows: int) -> list[str]:
    """--traffic: one row per case, as the report's "Traffic replay" table."""
    rows = []
    for run, label in zip(runs, labels):
        for c in run.cases:
            t = c.traffic
            if t is None:
                continue
            lat, err = t.latency_ms, t.send_error_ms
            rows.append({"case": c.case.id, **({"source": label} if len(runs) > 1 else {}),
                         "rate req/s": t.rate, "completed req/s": t.throughput_rps, "p50 ms": lat.get("p50"),
                         "p99 ms": lat.get("p99"), "p99.9 ms": lat.get("p99.9"), "max ms": lat.get("max"),
                         "send error p99 ms": err.get("p99"), "mean batch": t.mean_batch,
                         "note": t.error or ("contended: " + (t.contention_cause or "") if t.contended else "")})
    if not rows:
        return []
    first = next(c.traffic for r in runs for c in r.cases if c.traffic is not None)
    return ["### Traffic replay (--traffic)", "",
            _md(f"{first.traffic} from {first.source}: latency from each request's intended send time "
                "(coordinated-omission correct); send error: how late the replay sent a request it waited for."), "",
            _md_table(pd.DataFrame(rows[:max_rows])), ""]


def _md_problems(df: pd.DataFrame, max_rows: int) -> list[str]:
    lines: list[str] = []
    problems = df[~df["status"].isin(["passed", "skipped"])]
    if not problems.empty:
        lines += ["### Problems", ""]
        for r in problems.head(max_rows).itertuples():
            case = _md(f"{r.model}-{r.runtime}-{r.precision}-b{r.batch}" + ("" if pd.isna(r.seq) else f"-s{r.seq}")
                       + ("" if pd.isna(r.variant) else f"~{r.variant}"))
            lines.append(f"- {case} **{r.status}**: {_md(str(r.reason or ''))[:300]}")
        lines.append("")
    return lines


def _md_skipped(runs: list[RunResults], max_rows: int) -> list[str]:
    lines: list[str] = []
    skips = skip_reasons(runs)
    if skips:
        lines += ["### Skipped", ""]
        lines += [f"- {s['count']} × {_md(s['runtime'])}: {_md(s['reason'])[:300]}" for s in skips[:max_rows]]
        lines.append("")
    return lines


def _pct(ref: Any, value: Any) -> str:
    """A p50 against the reference runtime's: "7.5x faster" / "1.3x slower" (never a percentage: "+86.7%" of a
    latency saved reads as a throughput gain)."""
    if ref is None or value is None or pd.isna(ref) or pd.isna(value) or not value or not ref:
        return "-"
    return speed_text(float(value) / float(ref), always_times=True) or "-"


_MD_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=[A-Za-z#])|\|")
_MD_SAFE = {"<": "&lt;", "&": "&amp;", "|": "\\|"}


def _md(text: str) -> str:
    """Text safe inside Markdown (and the HTML a Markdown renderer makes of it): only what could start markup is
    escaped (`<` before a tag name, `&` before an entity, a table's `|`; a backtick becomes a quote), so a person
    reading the file plain reads `n=12 < 100` and `p99 > 5 ms`, never `&lt;` where no tag could start."""
    return _MD_MARKUP.sub(lambda m: _MD_SAFE[m.group(0)], visible(text).replace("`", "'").replace("\n", " "))


def _md_table(df: pd.DataFrame) -> str:
    # every missing value (None, NaN, pandas' NA of an Int64 column such as `seq`) as None, which to_markdown
    # writes as "-" (DataFrame.where(..., None) leaves NaN in an object column: "seq nan")
    def cell(v: Any) -> Any:
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            return None
        return _md(v) if isinstance(v, str) else v

    # built as object columns: a column mapped by pandas would turn None back into NaN
    safe = pd.DataFrame({c: pd.Series([cell(v) for v in df[c].astype(object)], index=df.index, dtype=object)
                         for c in df.columns}, index=df.index)
    safe.columns = [_md(str(c)) for c in safe.columns]
    return safe.to_markdown(index=False, floatfmt=".4g", missingval="-")


def benchmark_json(run: RunResults) -> dict[str, Any]:
    """Our raw samples in pytest-benchmark's JSON format, so `pytest-benchmark compare` works on our runs.

    Statistics are computed by pytest-benchmark's own Stats class from the raw samples (seconds).
    """
    from pytest_benchmark.stats import Stats

    try:
        from importlib.metadata import version

        pb_version = version("pytest-benchmark")
    except Exception:  # noqa: BLE001
        pb_version = "unknown"
    benches = []
    for c in run.cases:
        if not c.measured or not c.samples_ns:
            continue
        stats = Stats()
        for s in c.samples_ns:
            stats.update(s / 1e9)
        d = stats.as_dict()
        d["data"] = [s / 1e9 for s in c.samples_ns]
        d["iterations"] = 1
        benches.append({
            "group": f"{c.case.model}-{c.case.precision}-b{c.case.batch}"
                     + (f"-s{c.case.seq}" if c.case.seq is not None else ""),
            "name": f"test_case[{c.case.id}]",
            "fullname": f"harness_suites/matrix/test_matrix.py::test_case[{c.case.id}]",
            "params": {"harness_case": c.case.id}, "param": c.case.id,
            "extra_info": {"runtime": c.case.runtime, "status": c.status, "timing_scope": c.timing_scope,
                           "throughput_sps": c.throughput_sps, "warmup_iters": c.warmup_iters},
            "options": {"disable_gc": False, "timer": "perf_counter_ns", "min_rounds": run.config.get(
                "timing", {}).get("min_iters"), "max_time": None, "warmup": True},
            "stats": d,
        })
    env = run.environment
    return {
        "machine_info": {"node": env.get("hostname"), "processor": env.get("cpu_model"),
                         "machine": env.get("machine"), "python_version": env.get("python"),
                         "cpu": {"brand_raw": env.get("cpu_model"), "count": env.get("cpu_cores_logical")}},
        "commit_info": {"id": (env.get("git") or {}).get("commit"), "dirty": (env.get("git") or {}).get("dirty")},
        "benchmarks": benches, "datetime": run.started_at, "version": pb_version,
    }


def csv_text(df: pd.DataFrame) -> str:
    """results.csv: every text cell through `csv_cell` (control characters visible, formulas defused)."""
    return df.astype(object).map(csv_cell).to_csv(index=False)


# A workload's own pages of a run (Workload.report_pages): (run, folder, report.html's name) -> {name: path}
RunPages = Callable[[RunResults, Path, "str | None"], dict[str, Path]]


def write_outputs(runs: Runs, out_dir: str | Path, verdicts: Sequence[dict[str, Any]] | None = None,
                  baseline_label: str | None = None, gate_note: str | None = None,
                  trends: Sequence[dict[str, Any]] | None = None, pages: RunPages | None = None) -> dict[str, Path]:
    """results.csv, report.html, summary.md and (one run) benchmark.json in `out_dir`, and (one run) the pages
    its workload renders of its own (`pages`: harness.workloads.render_report asks the run's workload).

    results.json is written by the caller (a run) or is the input (a report of stored runs).
    """
    runs = as_runs(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "html": out / "report.html", "markdown": out / "summary.md"}
    atomic_write_text(paths["csv"], csv_text(cases_frame(runs)))
    if len(runs) == 1:
        paths["benchmark"] = out / "benchmark.json"
        atomic_write_text(paths["benchmark"], json.dumps(benchmark_json(runs[0]), indent=1))
        if pages is not None:
            paths.update(pages(runs[0], out, paths["html"].name))
    conformance = out / "conformance.html"
    page = conformance.name if conformance.is_file() else None  # this run's page, or one already in the folder
    atomic_write_text(paths["html"], render_html(runs, verdicts, baseline_label, gate_note, trends, page))
    atomic_write_text(paths["markdown"], render_markdown(runs, verdicts))
    return paths
