"""summary.md's sections (Markdown for a CI job summary or a PR comment), each a function of the report's data."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.display import speed_text, visible
from harness.gating.unjudged import gate_headline, unjudged_cause, verdict_rows
from harness.report.data import reference_runtimes
from harness.report.overview import total_counts
from harness.report.progress import noise_lines
from harness.report.scenarios import batcher_cell, scenario_rows
from harness.report.tables import (case_caveats, caveat_tag, drift_cell, flags_text, percentile_text, runtime_label,
                                   skip_reasons)
from harness.results.schema import RunResults


def md_header(runs: list[RunResults], labels: list[str], verdicts: Sequence[dict[str, Any]] | None) -> list[str]:
    """The title, the gate's state first where there are verdicts, a line per run and the case counts."""
    lines = [f"## Inference harness: {_md(', '.join(r.run_id for r in runs))}", ""]
    if verdicts:  # the gate's state is the first line a CI job summary shows: never OK when it judged nothing
        lines = [f"**{_md(gate_headline(verdict_rows(verdicts)))}**", ""] + lines
    for run, label in zip(runs, labels):
        state = "complete" if run.complete else "INCOMPLETE (interrupted or killed)"
        machine = str(run.environment.machine or "-")
        who = machine if machine == label or machine.startswith(f"{label} (") else f"{label} ({machine})"
        lines.append(f"- {_md(who)}: {len(run.cases)} cases, {state}")
    return lines + ["", " · ".join(f"**{k}** {v}" for k, v in total_counts(runs).items() if v), ""]


def md_conclusions(runs: list[RunResults], labels: list[str], frame: pd.DataFrame | None = None) -> list[str]:
    """The comparison's conclusions (harness.report.conclusions): per model and precision, the fastest
    configuration within its drift tolerance and by how much, or why the figures do not rank them."""
    from harness.report.conclusions import conclusion_lines, conclusions

    lines = conclusion_lines(conclusions(runs, frame=frame), multi=len(runs) > 1)
    if not lines:
        return []
    return ["### Conclusions", "", *[f"- {_md(line)}" for line in lines], ""]


def md_caveats(runs: list[RunResults], labels: list[str]) -> list[str]:
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


def md_noise(runs: list[RunResults], labels: list[str]) -> list[str]:
    """A busy CPU and noisy cases, where people look (the same lines as the terminal summary)."""
    noise = [(label, line) for run, label in zip(runs, labels) for line in noise_lines(run)]
    if not noise:
        return []
    return (["### Noise", ""] + [f"- {_md(label) + ': ' if len(runs) > 1 else ''}{_md(line)}" for label, line in noise]
            + [""])


def md_verdicts(verdicts: Sequence[dict[str, Any]] | None, max_rows: int) -> list[str]:
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
        lines += [md_table(vdf), ""]
    return lines


def md_measured(runs: list[RunResults], df: pd.DataFrame, max_rows: int) -> list[str]:
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
    lines += [md_table(view.head(max_rows)), ""]
    if len(view) > max_rows:
        lines += [f"... and {len(view) - max_rows} more in report.html / results.csv", ""]
    return lines


def md_scenarios(runs: list[RunResults], labels: list[str], max_rows: int) -> list[str]:
    """--scenarios: one line per case and scenario, as the report's "Load scenarios" table."""
    all_cases = [(label, c) for run, label in zip(runs, labels) for c in run.cases]
    scen = [{"case": r["case"].id, **({"source": r["label"]} if len(runs) > 1 else {}), "scenario": r["run"].scenario,
             "LoadGen": r["run"].result, "figure": r["headline"], "reasons": r["reasons"][:200],
             "batcher": batcher_cell(r["run"])}
            for rows in scenario_rows(all_cases).values() for r in rows]
    if not any(row["batcher"] for row in scen):  # the column only where --batcher ran
        scen = [{k: v for k, v in row.items() if k != "batcher"} for row in scen]
    if not scen:
        return []
    return ["### Load scenarios (MLPerf LoadGen)", "", md_table(pd.DataFrame(scen[:max_rows])), ""]


def md_traffic(runs: list[RunResults], labels: list[str], max_rows: int) -> list[str]:
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
            md_table(pd.DataFrame(rows[:max_rows])), ""]


def md_problems(df: pd.DataFrame, max_rows: int) -> list[str]:
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


def md_skipped(runs: list[RunResults], max_rows: int) -> list[str]:
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


def md_table(df: pd.DataFrame) -> str:
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

