"""pandas tables built from results: one row per case (results.csv), the seed-style comparison tables, and
the drift-vs-speed tables; several runs are shown side by side, never averaged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from harness.metrics import COMPARISON_METRICS, DRIFT_METRICS, DRIFT_ROW
from harness.results.records import EndToEndRecord, GenerationRecord, GenerationStats, TokenAgreement
from harness.results.schema import CaseResult, RunResults
from harness.results.stats import LatencyStats, latency_stats, quoted, too_few_text
from harness.results.stored import CaseContentionRecord, EnvironmentRecord

# results.csv columns, documented in docs/comparison-reports.md.
CSV_COLUMNS = (
    "model", "runtime", "precision", "batch", "seq", "device", "status",
    # a percentile from fewer samples than it needs (harness.results.stats.min_samples: p99 100, p95 20, p90 10)
    # is left empty; the 95% intervals of the median and the p99 follow (empty: unbounded on that side)
    "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_mean_ms", "latency_std_ms",
    "latency_p50_ci_low_ms", "latency_p50_ci_high_ms", "latency_p99_ci_low_ms", "latency_p99_ci_high_ms",
    # robust_cv (1.4826 x MAD / median) decides `noisy`; plain_cv is std / mean (results.json's `cv`)
    "iterations", "robust_cv", "noisy", "tail_ratio", "tail_heavy", "plain_cv",
    "throughput_sps", "scenario", "timing_scope",
    "max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "setup_s", "phase", "signal",
    "reason", "onnx_path",
    "host_peak_mb", "gpu_peak_mb", "p99_abs", "task_accuracy", "task_accuracy_ratio", "precision_recipe",
    "reference_runtime", "drift_note",
    # models with pre/post steps (end-to-end latency, harness.measure.end_to_end): empty for the others
    "e2e_p50_ms", "e2e_p99_ms", "pre_p50_ms", "post_p50_ms",
    # --workload generate (harness.generation; seq is the prompt length): empty for forward cases
    "gen", "ttft_p50_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tokens_per_s", "token_match_rate",
    "first_divergence",
    # --scenarios (MLPerf LoadGen): each scenario's figure and LoadGen's verdict; the Server peak of a search
    "single_stream_p90_ms", "single_stream_result", "multi_stream_p99_ms", "multi_stream_result",
    "offline_sps", "offline_result", "server_qps", "server_result",
    # contention (harness.measure.contention): was the worker kept from the CPU while it was timed?
    "contended", "runqueue_wait_fraction", "contention_cause",
    "variant",  # a deployment variant's canonical name (harness.variants); empty for the run's defaults
    # a runtime run in an environment of its own (harness.envs): every package installed there, `name version; ...`
    "runtime_env",
    # energy over the timed blocks (harness.measure.energy): measured / unavailable / refused, and the figures
    # where measured (an inference is one call at the case's batch size)
    "energy_status", "joules_per_inference", "inferences_per_joule",
    "source",  # the run's label when several runs are merged (last, as earlier versions wrote it)
)
MEASURED = ("passed", "failed")


def run_labels(runs: Sequence[RunResults]) -> list[str]:
    """A short label per run: its host name, then its thread count where hosts repeat, then its run id."""
    def threads(r: RunResults) -> str:
        return f"{r.config.get('threads') or (r.environment.threads or {}).get('harness_threads')}t"

    labels = [str(r.environment.hostname or r.environment.machine or r.run_id) for r in runs]
    for extra in (threads, lambda r: r.run_id):
        labels = [f"{lab} {extra(r)}" if labels.count(lab) > 1 else lab for lab, r in zip(labels, runs)]
    return labels


def as_runs(runs: RunResults | Sequence[RunResults]) -> list[RunResults]:
    return [runs] if isinstance(runs, RunResults) else list(runs)


def case_row(r: CaseResult, source: str = "") -> dict[str, Any]:
    acc = r.accuracy or {}
    task = acc.get("task") or {}
    return {
        **r.case.as_dict(), "status": r.status,
        **latency_cells(r.latency),
        "throughput_sps": r.throughput_sps, "scenario": r.scenario, "timing_scope": r.timing_scope,
        "max_abs": acc.get("max_abs"), "mean_abs": acc.get("mean_abs"), "rel_l2": acc.get("rel_l2"),
        "cosine": acc.get("cosine"), "top1_agreement": acc.get("top1_agreement"),
        "setup_s": r.setup_s, "phase": r.phase, "signal": r.signal, "reason": r.reason, "onnx_path": r.artifact,
        # figures other parts of the harness may not record (older results, CPU-only runs): empty when None
        "host_peak_mb": r.host_peak_mb, "gpu_peak_mb": r.gpu_peak_mb,
        "p99_abs": acc.get("p99_abs"), "task_accuracy": task.get("accuracy"),
        "task_accuracy_ratio": task.get("ratio"), "precision_recipe": r.precision_recipe,
        "reference_runtime": r.reference_runtime, "drift_note": r.drift_note, "source": source,
        **end_to_end_cells(r.end_to_end),
        **_generation_cells(r),
        **scenario_cells(r.scenarios),
        **contention_cells(r.contention),
        "runtime_env": env_packages(r.environment),
        **energy_cells(r.energy),
    }


def energy_cells(energy: Any) -> dict[str, Any]:
    """The CSV's energy columns: empty for results from before energy was recorded."""
    if energy is None:
        return {"energy_status": None, "joules_per_inference": None, "inferences_per_joule": None}
    return {"energy_status": energy.status, "joules_per_inference": energy.joules_per_inference,
            "inferences_per_joule": energy.inferences_per_joule}


def env_packages(environment: EnvironmentRecord | None) -> str | None:
    """`name version; ...` of a case's own runtime environment (harness.envs); None: the harness's own."""
    if not environment:
        return None
    return "; ".join(f"{k} {v}" for k, v in sorted((environment.packages or {}).items()))


def quoted_stat(stats: GenerationStats, q: int) -> float | None:
    """A generation statistic's stored percentile `p{q}_ms`, or None where it came from too few samples (its
    count `n`; without one, taken as it is)."""
    v = stats.figure(f"p{q}_ms")
    return v if stats.n is None or quoted(q, int(stats.n)) else None


def quoted_figure(lat: LatencyStats, q: int) -> float | None:
    """A stored percentile `p{q}_ms`, or None where it came from fewer samples than it needs (stats.quoted)."""
    return lat.percentile(q) if quoted(q, lat.iterations) else None


LATENCY_COLUMNS = ("latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_mean_ms",
                   "latency_std_ms", "latency_p50_ci_low_ms", "latency_p50_ci_high_ms", "latency_p99_ci_low_ms",
                   "latency_p99_ci_high_ms", "iterations", "robust_cv", "noisy", "tail_ratio", "tail_heavy",
                   "plain_cv")


def latency_cells(lat: LatencyStats | None) -> dict[str, Any]:
    """The CSV's latency columns of a case's `latency` (empty cells where not measured, or a figure not quoted)."""
    if lat is None:
        return dict.fromkeys(LATENCY_COLUMNS)
    p99 = quoted_figure(lat, 99)
    return dict(zip(LATENCY_COLUMNS, (
        lat.p50_ms, quoted_figure(lat, 90), quoted_figure(lat, 95), p99, lat.mean_ms, lat.std_ms,
        lat.p50_ci_low_ms, lat.p50_ci_high_ms, lat.p99_ci_low_ms if p99 is not None else None,
        lat.p99_ci_high_ms if p99 is not None else None, lat.iterations, lat.rcv, lat.noisy, lat.tail_ratio,
        lat.tail_heavy, lat.cv)))


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def interval_text(lo: Any, hi: Any) -> str:
    """A 95% interval as shown: "[12.1, 12.6]"; an unbounded side as "-inf" / "inf" (ASCII, any terminal)."""
    lo, hi = _num(lo), _num(hi)
    return f"[{'-inf' if lo is None else _fmt(lo)}, {'inf' if hi is None else _fmt(hi)}]"


def percentile_text(lat: LatencyStats | None, q: int, interval: bool = True) -> str:
    """A case's p50 or p99 as the terminal and the report show it: "12.3 [12.1, 12.6]" (the figure and its 95%
    interval, in ms), "n/a (n=12 < 100)" from too few samples, "-" when not measured. Results from before the
    intervals show the figure alone."""
    v = None if lat is None else _num(lat.percentile(q))
    if lat is None or v is None:
        return "-"
    if not quoted(q, lat.iterations):
        return too_few_text(q, lat.iterations)
    bounds = lat.interval(q)
    if not interval or bounds is None:
        return _fmt(v)
    return f"{_fmt(v)} {interval_text(*bounds)}"


def flags_text(lat: LatencyStats | None, contention: CaseContentionRecord | None = None) -> str:
    """The flags that travel with a case's latency: "contended" (the machine kept its threads from the CPU while
    they were timed: the figure is inflated), "noisy", "tail-heavy" ("contended, noisy, tail-heavy")."""
    flags = ["contended"] if contention and contention.contended else []
    if lat is not None:
        flags += [name for name, on in (("noisy", lat.noisy), ("tail-heavy", lat.tail_heavy)) if on]
    return ", ".join(flags)


def contention_cells(info: CaseContentionRecord | None) -> dict[str, Any]:
    """A case's contention verdict, its worst block's run-queue wait share and the cause (empty when unmeasured)."""
    if info is None:
        return {"contended": None, "runqueue_wait_fraction": None, "contention_cause": None}
    return {"contended": info.contended, "runqueue_wait_fraction": info.wait_fraction_max,
            "contention_cause": info.cause}


def scenario_cells(runs: list[Any]) -> dict[str, Any]:
    """A case's LoadGen figures for the CSV: single-stream p90, multi-stream p99 per query, offline samples/s,
    the Server search's peak target QPS (the highest VALID, else the last try), each with LoadGen's result."""
    from harness.results.schema import peak_server

    by = {r.scenario: r for r in runs if r.scenario != "server"}
    server = peak_server(list(runs))
    ss, ms, off = by.get("single-stream"), by.get("multi-stream"), by.get("offline")
    return {
        "single_stream_p90_ms": ss.latency_ms.get("p90") if ss else None,
        "single_stream_result": ss.result if ss else None,
        "multi_stream_p99_ms": ms.query_latency_ms.get("p99") if ms else None,
        "multi_stream_result": ms.result if ms else None,
        "offline_sps": off.samples_per_s if off else None, "offline_result": off.result if off else None,
        "server_qps": server.target_qps if server else None, "server_result": server.result if server else None,
    }


def end_to_end_cells(e2e: EndToEndRecord | None) -> dict[str, Any]:
    """The end-to-end figures of a case (empty cells for a model without pre/post steps)."""
    if e2e is None:
        return {"e2e_p50_ms": None, "e2e_p99_ms": None, "pre_p50_ms": None, "post_p50_ms": None}
    lat = e2e.latency
    return {"e2e_p50_ms": lat and lat.p50_ms, "e2e_p99_ms": lat and quoted_figure(lat, 99),  # none under 100 samples
            "pre_p50_ms": e2e.pre_p50_ms, "post_p50_ms": e2e.post_p50_ms}


def end_to_end_tables(runs: RunResults | Sequence[RunResults]) -> dict[str, list[dict[str, Any]]]:
    """Per model with pre/post steps: model-only and end-to-end latency side by side, one row per case."""
    out: dict[str, list[dict[str, Any]]] = {}
    runs = as_runs(runs)
    for run, label in zip(runs, run_labels(runs)):
        for c in run.cases:
            e2e = c.end_to_end
            if e2e is None or c.status not in MEASURED:
                continue
            model_p50 = c.latency.p50_ms if c.latency else None
            cells = end_to_end_cells(e2e)
            share, note = outside_model_share(cells["e2e_p50_ms"], e2e.model_p50_ms, model_p50)
            out.setdefault(c.case.model, []).append({
                **c.case.as_dict(), "runtime": c.case.runtime_label, "source": label, "steps": e2e.steps,
                "model_p50_ms": model_p50, "infer_p50_ms": e2e.model_p50_ms, "outside_model_pct": share,
                "outside_model_note": note, "e2e_throughput_sps": e2e.throughput_sps, **cells})
    return out


def outside_model_share(e2e_p50: Any, infer_p50: Any, model_p50: Any) -> tuple[float | None, str]:
    """The share of the end-to-end p50 spent outside the model, in percent, and a note when it needed one.

    Taken against the inference time measured inside the same end-to-end loop (`infer_p50`), so both figures
    saw the same machine; only results without it fall back to the model-only loop's p50 (`model_p50`), timed
    at another moment. A share is never negative: where the inference part came out longer than the whole
    (two loops, one of them slowed), it is 0 with the figures that disagreed.
    """
    e2e, inner = _num(e2e_p50), _num(infer_p50)
    against, what = (inner, "inference in the same loop") if inner else (_num(model_p50), "model-only loop")
    if not e2e or not against:
        return None, ""
    share = 100.0 * (e2e - against) / e2e
    if share >= 0:
        return share, ""
    return 0.0, (f"~0: the {what} p50 ({against:.4g} ms) came out above the end-to-end p50 ({e2e:.4g} ms); "
                 "they were timed apart, so the difference is the machine's, not the model's")


def _generation_cells(r: CaseResult) -> dict[str, Any]:
    g = r.generation or GenerationRecord()
    conf = g.conformance or TokenAgreement()
    tpot = g.stat("tpot")
    return {"gen": r.case.gen, "ttft_p50_ms": g.stat("ttft").p50_ms,
            **{f"tpot_{p}_ms": quoted_stat(tpot, int(p[1:])) for p in ("p50", "p90", "p99")},
            "tokens_per_s": g.tokens_per_s, "token_match_rate": conf.exact_match_rate,
            "first_divergence": conf.first_divergence}


def drift_cell(value: Any, note: str, fmt: Any = lambda v: f"{v:.4g}") -> str:
    """A drift figure as a table shows it: "reference" for the reference case itself, the figure marked
    "(nondeterministic ref)" when the reference's own runs disagreed, "(ref ~0: float noise)" when an output
    passed by its absolute floor (the case's reason says why), "-" when not measured."""
    if note == "reference":
        return "reference"
    v = _num(value)
    text = "-" if v is None else fmt(v)
    if note == "reference ~0":
        return f"{text} (ref ~0: float noise)"
    return f"{text} (nondeterministic ref)" if note else text


def cases_frame(runs: RunResults | Sequence[RunResults]) -> pd.DataFrame:
    """One row per case of every run, columns CSV_COLUMNS (seq empty for models without a sequence axis)."""
    runs = as_runs(runs)
    rows = [case_row(c, label) for run, label in zip(runs, run_labels(runs)) for c in run.cases]
    df = pd.DataFrame(rows, columns=list(CSV_COLUMNS))
    return df.astype({"batch": "Int64", "seq": "Int64", "iterations": "Int64", "gen": "Int64",
                      "first_divergence": "Int64"})


def _column_label(runtime: str, source: str, multi: bool) -> str:
    return f"{runtime} @ {source}" if multi else runtime


def setup_cached(c: CaseResult) -> bool:
    """Was this case's setup time a cache hit (its artifact from the cache, or the activation of an earlier case
    reused)? Such a figure is not a setup time to rank: "best" never picks it."""
    return c.artifact_cache_hit is True or bool((c.details or {}).get("activation_reused"))


def _cached_rows(runs: list[RunResults]) -> list[bool]:
    """setup_cached per row of cases_frame(runs), in its order."""
    return [setup_cached(c) for r in runs for c in r.cases]


def comparison_tables(runs: RunResults | Sequence[RunResults], reference_runtime: dict[str, str],
                      frame: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """Per (model, precision, batch, seq): metric rows x runtime columns, with the change against the FP32
    reference.

    The comparison columns always compare with the model's FP32 reference case (`reference_runtime[model]` at
    FP32, same shape and source: PyTorch eager for models with a torch module), at every precision; at another
    precision, columns against the reference runtime at that same precision follow, labelled "(same precision)".
    With several runs a column is a (runtime, source) pair and every comparison stays within its source. A change
    built from a contended figure (this column's or the reference's) is marked "(contended)": contention inflates
    latency, so the ratio says what the machine did, not the runtimes. Only measured cases appear; the best value
    of each row is marked; rows with no value at all (GPU memory on a CPU-only run) are left out.
    """
    runs = as_runs(runs)
    multi = len(runs) > 1
    df = cases_frame(runs) if frame is None else frame  # `frame`: cases_frame(runs), already built by the caller
    df = df.assign(cached_setup=_cached_rows(runs), caveat=case_caveats(runs))
    df = df[df["status"].isin(MEASURED)]
    if df.empty:
        return []
    fp32_refs = _fp32_references(df, reference_runtime)
    tables: list[dict[str, Any]] = []
    for key, group in df.groupby(["model", "precision", "batch", "seq"], dropna=False, sort=False):
        model, precision, batch, seq = key
        ref = reference_runtime.get(model)
        cols, ref_col = _columns(group, ref, multi)
        labels = list(cols)
        comparisons = _comparisons(cols, ref_col, fp32_refs.get, (model, batch, _seq(seq)), precision, ref, multi)
        rows = [row for m in COMPARISON_METRICS if (row := _metric_row(m, cols, comparisons)) is not None]
        rows.append({"metric": DRIFT_ROW, "best": None, "values": {c: _num(cols[c]["rel_l2"]) for c in labels},
                     "cells": {c: drift_cell(cols[c]["rel_l2"], cols[c]["drift_note"], DRIFT_ROW.format)
                               for c in labels},
                     "improvement": {}, "change": {}})
        tables.append({
            "model": model, "precision": precision, "batch": int(batch),
            "seq": None if pd.isna(seq) else int(seq), "runtimes": labels,
            "reference": ref if comparisons else None,
            "vs": {k: against for k, _, _, against in comparisons}, "others": [k for k, _, _, _ in comparisons],
            "headers": {k: f"{c} vs {against}" + (" (same precision)" if k != c else "")
                        for k, c, _, against in comparisons},
            "rows": rows, **_column_flags(cols),
        })
    return tables


# a comparison column: (its key, the runtime column it compares, the reference's row, the reference's label)
Comparison = tuple[str, str, Any, str]


def _fp32_references(df: pd.DataFrame, reference_runtime: dict[str, str]) -> dict[tuple[Any, ...], Any]:
    """(model, batch, seq, source) -> the row of the model's reference runtime at FP32 (its base, no variant)."""
    out: dict[tuple[Any, ...], Any] = {}
    for _, row in df.iterrows():
        if row["precision"] == "fp32" and row["runtime"] == reference_runtime.get(row["model"]) and \
                runtime_label(row) == row["runtime"]:
            out.setdefault((row["model"], row["batch"], _seq(row["seq"]), row["source"]), row)
    return out


def _columns(group: pd.DataFrame, ref: str | None, multi: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """One table's columns (label -> row) and, per source, the label of the reference runtime's column."""
    cols: dict[str, Any] = {}
    ref_col: dict[str, str] = {}
    for _, row in group.iterrows():
        label = _column_label(runtime_label(row), row["source"], multi)
        cols.setdefault(label, row)
        if row["runtime"] == ref and runtime_label(row) == row["runtime"]:
            ref_col.setdefault(row["source"], label)
    return cols, ref_col


def _comparisons(cols: dict[str, Any], ref_col: dict[str, str], fp32_ref: Callable[[tuple[Any, ...]], Any],
                 shape: tuple[Any, ...], precision: str, ref: str | None, multi: bool) -> list[Comparison]:
    """Every column against the FP32 reference case (keyed by the column), then, at another precision, against
    the reference runtime at that precision (keyed "COLUMN (same precision)")."""
    out: list[Comparison] = []
    for c in cols:
        src = cols[c]["source"]
        base = fp32_ref((*shape, src))
        if base is None or (precision == "fp32" and ref_col.get(src) == c):
            continue
        against = ref_col[src] if precision == "fp32" else _column_label(f"{ref} fp32", src, multi)
        out.append((c, c, base, against))
    if precision != "fp32":
        for c in cols:
            same = ref_col.get(cols[c]["source"])
            if same is not None and same != c:
                out.append((f"{c} (same precision)", c, cols[same], f"{same} {precision}"))
    return out


def _metric_row(m: Any, cols: dict[str, Any], comparisons: list[Comparison]) -> dict[str, Any] | None:
    """One metric's row: its value per column, the best, and each comparison's change (marked "(contended)" or
    with a caveat's tag where a figure behind it carries one); None when no column has the metric."""
    labels = list(cols)
    values = {c: _num(cols[c][m.key]) for c in labels}
    if all(v is None for v in values.values()):
        return None
    ranked = values
    extra: dict[str, Any] = {}
    if m.key == "setup_s":  # a cache hit is no setup time: shown marked, never "best"
        cached = {c for c in labels if bool(cols[c]["cached_setup"])}
        ranked = {c: v for c, v in values.items() if c not in cached}
        if cached:
            extra["cells"] = {c: "-" if values[c] is None else
                              f"{m.format(values[c])}{' (cached)' if c in cached else ''}" for c in labels}
    improvement, change = {}, {}
    if m.comparable:
        for k, c, base, _ in comparisons:
            improvement[k] = m.improvement_pct(values[c], _num(base[m.key]))
            text = m.improvement_text(values[c], _num(base[m.key]))
            if text and m.speed and (_contended(cols[c]) or _contended(base)):
                text += " (contended)"
            if text and m.speed and (cols[c]["caveat"] or base.get("caveat")):
                text += f" ({caveat_tag(cols[c]['caveat'] or base.get('caveat'))})"
            change[k] = text
    return {**extra, "metric": m, "values": values, "best": m.best(list(ranked.values())),
            "improvement": improvement, "change": change}


def _column_flags(cols: dict[str, Any]) -> dict[str, Any]:
    """What the table's caption says of its columns: noisy, tail-heavy, contended, drift over tolerance, caveats,
    timing scopes."""
    labels = list(cols)
    return {"noisy": [c for c in labels if bool(cols[c]["noisy"])],
            "tail_heavy": [c for c in labels if cols[c]["tail_heavy"] in (True, 1)],
            "contended": [c for c in labels if _contended(cols[c])],
            "failed": [c for c in labels if cols[c]["status"] == "failed"],
            "caveats": {c: str(cols[c]["caveat"]) for c in labels if cols[c]["caveat"]},
            "timing_scopes": sorted({str(cols[c]["timing_scope"]) for c in labels if cols[c]["timing_scope"]})}


def case_caveats(runs: list[RunResults]) -> list[str | None]:
    """Per row of cases_frame(runs), in its order: how the case's runtime was set up that its figures must be read
    with (details["caveat"]: an untuned compiler), else None."""
    return [str((c.details or {}).get("caveat")) if (c.details or {}).get("caveat") else None
            for r in runs for c in r.cases]


def caveat_tag(caveat: Any) -> str:
    """A caveat's short name for a cell: its words before the first colon ("untuned")."""
    text = str(caveat or "")
    return text.split(":", 1)[0].strip() if ":" in text[:40] else "see caveat"


def _seq(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NA else int(v)


def _contended(row: Any) -> bool:
    return row.get("contended") in (True, 1)


def runtime_label(row: Any) -> str:
    """A frame row's runtime as tables show it: `ort-cpu`, or `ort-cpu~opt=basic` for a variant's case."""
    v = row["variant"]
    return str(row["runtime"]) if v is None or (isinstance(v, float) and pd.isna(v)) or v == "" \
        else f"{row['runtime']}~{v}"


def variant_tables(runs: RunResults | Sequence[RunResults], frame: pd.DataFrame | None = None
                   ) -> list[dict[str, Any]]:
    """The deployment-variants view: per (model, runtime, batch, seq, source) that ran any variant, one row per
    (precision, variant) with latency, throughput, setup time (`setup_cached`: a cache hit, not a setup time),
    drift and task accuracy, fastest first within each precision. `best` is the fastest row whose drift is
    within the model's tolerance (status passed) and whose timing the machine did not inflate (not contended);
    `unranked` says in words why no row is, when none can be; `vs_base` is each row's p50 speed-up over the
    base row of its precision."""
    runs = as_runs(runs)
    df = (cases_frame(runs) if frame is None else frame).assign(cached_setup=_cached_rows(runs))
    df = df[df["status"].isin(MEASURED)]
    out: list[dict[str, Any]] = []
    if df.empty or df["variant"].isna().all():
        return out
    order = {"fp32": 0, "bf16": 1, "fp16": 2, "int8": 3}
    for key, g in df.groupby(["model", "runtime", "batch", "seq", "source"], dropna=False, sort=False):
        if g["variant"].isna().all():
            continue
        g = g.assign(_p=g["precision"].map(order).fillna(9),
                     _t=pd.to_numeric(g["latency_p50_ms"], errors="coerce").fillna(float("inf")))
        g = g.sort_values(["_p", "_t", "variant"], na_position="first")
        base = {r.precision: _num(r.latency_p50_ms) for r in g.itertuples() if pd.isna(r.variant)}
        rows = []
        for r in g.itertuples():
            p50, ref = _num(r.latency_p50_ms), base.get(r.precision)
            rows.append({"variant": None if pd.isna(r.variant) else str(r.variant), "precision": r.precision,
                         "status": r.status, "p50_ms": p50, "p99_ms": _num(r.latency_p99_ms),
                         "throughput_sps": _num(r.throughput_sps), "setup_s": _num(r.setup_s),
                         "setup_cached": bool(r.cached_setup),
                         "rel_l2": _num(r.rel_l2), "drift_note": r.drift_note, "task_accuracy": _num(r.task_accuracy),
                         "recipe": r.precision_recipe, "reason": r.reason, "noisy": bool(r.noisy),
                         "contended": r.contended in (True, 1), "cause": r.contention_cause,
                         "vs_base": ref / p50 if ref and p50 and not pd.isna(r.variant) else None})
        passed = [x for x in rows if x["status"] == "passed" and x["p50_ms"]]
        within = [x for x in passed if not x["contended"]]
        best = min(within, key=lambda x: x["p50_ms"]) if within else None
        for x in rows:
            x["best"] = x is best
        unranked = ""
        if best is None:
            if passed:
                unranked = (f"No row is ranked: all {len(passed)} row(s) within tolerance were measured while the "
                            "machine kept the worker from the CPU (contended), so their timings cannot be compared; "
                            "rerun on a quiet machine (--settle SECONDS waits for one before each case).")
            else:
                unranked = "No row is ranked: no row passed its drift check."
        model, runtime, batch, seq, source = key
        out.append({"model": model, "runtime": runtime, "batch": int(batch),
                    "seq": None if pd.isna(seq) else int(seq), "source": source, "rows": rows,
                    "unranked": unranked})
    return out


def _side_p50(ab: Any, side: str, stored: float | None) -> float | None:
    """A side's p50 over its blocks' raw samples (`harness ab` and the nightly gate alike), else the stored one."""
    samples = [x for b in ab.blocks if b.side == side for x in b.samples_ns]
    return latency_stats(samples).p50_ms if samples else stored


def ab_rows(runs: RunResults | Sequence[RunResults]) -> list[dict[str, Any]]:
    """One row per interleaved A/B case (`harness ab`): the sides, B/A with its interval, the pairs judged, the
    verdict and its reason, each side's p50 over its blocks, and whether B's outputs matched A's."""
    out = []
    for run, label in zip(as_runs(runs), run_labels(as_runs(runs))):
        for c in run.cases:
            ab = c.ab
            if ab is None:
                continue
            b_p50 = _side_p50(ab, "b", ((c.details.get("b") or {}).get("latency") or {}).get("p50_ms"))
            out.append({"case": c.case.id, "a": ab.a, "b": ab.b, "source": label, "verdict": ab.verdict,
                        "reason": ab.reason, "ratio": ab.ratio, "ci_low": ab.ci_low, "ci_high": ab.ci_high,
                        "confidence": ab.confidence, "pairs_used": ab.pairs_used, "pairs": len(ab.order),
                        "a_p50_ms": _side_p50(ab, "a", c.latency.p50_ms if c.latency else None), "b_p50_ms": b_p50,
                        "outputs_match": (ab.b_vs_a or {}).get("passed"),
                        "outputs_rel_l2": (ab.b_vs_a or {}).get("rel_l2"), "inject": ab.inject})
    return out


def drift_tables(runs: RunResults | Sequence[RunResults], frame: pd.DataFrame | None = None
                 ) -> dict[str, pd.DataFrame]:
    """Per model: one row per measured case (runtime with its variant, precision, shape, source) with the
    drift metrics, the pass/fail verdict, and the speed-up over an FP32 case named in `speedup_against`: the
    same runtime and variant's FP32 case at the same shape and source, or, for a variant with no FP32 case of
    its own and for a variant's FP32 row, the base (no variant) FP32 case ("vs base fp32")."""
    runs = as_runs(runs)
    df = cases_frame(runs) if frame is None else frame
    df = df[df["status"].isin(MEASURED)].copy()
    out: dict[str, pd.DataFrame] = {}
    if df.empty:
        return out
    df["runtime_base"] = df["runtime"].astype(str)
    df["runtime"] = [runtime_label(row) for _, row in df.iterrows()]  # `ort-cpu~opt=basic`: a row of its own

    def key(r: Any, variant: Any) -> tuple[Any, ...]:
        return (r.model, r.runtime_base, variant, int(r.batch), None if pd.isna(r.seq) else int(r.seq), r.source)

    df["variant_name"] = ["" if v is None or pd.isna(v) else str(v) for v in df["variant"]]  # "": the base
    fp32: dict[tuple[Any, ...], float] = {}
    for r in df[df["precision"] == "fp32"].itertuples():
        if _num(r.latency_p50_ms):
            fp32.setdefault(key(r, r.variant_name), float(r.latency_p50_ms))

    def speedup(r: Any) -> tuple[float | None, str]:
        p50 = _num(r.latency_p50_ms)
        if r.precision != "fp32" and key(r, r.variant_name) in fp32:
            base, against = fp32[key(r, r.variant_name)], "fp32"
        elif r.variant_name and key(r, "") in fp32:
            base, against = fp32[key(r, "")], "base fp32"
        else:  # the base FP32 row itself, or no FP32 case to measure against
            return None, ""
        return (None, "") if not p50 else (base / p50, against)

    pairs = [speedup(r) for r in df.itertuples()]
    df["speedup_vs_fp32"] = [p[0] for p in pairs]
    df["speedup_against"] = [p[1] for p in pairs]
    df["slower_note"] = [slower_than_fp32(r.precision, r.precision_recipe, p[0], r.contended in (True, 1))
                         for r, p in zip(df.itertuples(), pairs)]
    cols = ["runtime", "precision", "batch", "seq", "source", "status", "speedup_vs_fp32", "speedup_against",
            "slower_note",
            "latency_p50_ms", *[m.key for m in DRIFT_METRICS], "p99_abs", "task_accuracy", "task_accuracy_ratio",
            "precision_recipe", "reason", "drift_note"]
    order = {"fp32": 0, "bf16": 1, "fp16": 2, "int8": 3}
    for model, group in df.groupby("model", sort=False):
        g = group.assign(_p=group["precision"].map(order).fillna(9), _v=group["variant_name"] != "")
        out[str(model)] = g.sort_values(["runtime_base", "_p", "_v", "batch", "seq", "latency_p50_ms"])[cols] \
            .reset_index(drop=True)
    return out


def slower_than_fp32(precision: str, recipe: Any, speedup: float | None, contended: bool) -> str:
    """Why a reduced precision measured slower than its own FP32 case ("" when it did not): the likely cause read
    from what ran (the recipe), said as likely. A contended figure is said to be the machine's first."""
    if speedup is None or speedup >= 0.95 or precision == "fp32":
        return ""
    recipe = str(recipe or "")
    if contended:
        return "contended: the machine may have set this ratio (re-measure on a quiet machine)"
    import re

    share = re.search(r"(\d+(?:\.\d+)?)% of the param", recipe)
    if share and float(share.group(1)) < 50:
        return (f"likely cause: only {share.group(1)}% of the parameters are quantised (the recipe): the rest runs "
                "in FP32 with conversions around the quantised layers")
    if precision == "int8" and "dynamic" in recipe.lower():
        return ("likely cause: dynamic quantisation computes each activation's scale on every call and converts "
                "around each integer op; at this shape that costs more than the integer arithmetic saves")
    if precision == "int8" and ("qdq" in recipe.lower() or "quantizelinear" in recipe.lower()):
        return ("likely cause: the Quantize/DequantizeLinear pairs are not all fused into integer kernels here, "
                "so each adds a conversion; check the runtime's INT8 kernels for this CPU")
    if precision in ("fp16", "bf16"):
        return (f"likely cause: no native {precision.upper()} arithmetic on this device for these ops: casts to and "
                "from FP32 around each op")
    return f"likely cause: this runtime's {precision} kernels do not pay off for this model at this shape"


def skip_reasons(runs: RunResults | Sequence[RunResults]) -> list[dict[str, Any]]:
    """Skipped cases grouped by reason (a GPU runtime on a CPU machine skips every case for one reason)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for run, label in zip(as_runs(runs), run_labels(as_runs(runs))):
        for c in run.cases:
            if c.status == "skipped":
                groups.setdefault((c.case.runtime, c.reason), []).append(c.case.id)
    return [{"runtime": rt, "reason": reason, "count": len(ids), "cases": ids}
            for (rt, reason), ids in sorted(groups.items())]


def _num(v: Any) -> float | None:
    if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)):
        return None
    return float(v)
