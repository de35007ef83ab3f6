"""The report's generation section: TTFT / TPOT / tokens/s per runtime and precision, token agreement, and
the charts (tokens/s over batch, decode latency over context length)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

from harness.report import charts
from harness.results.records import GenerationRecord, TokenAgreement
from harness.results.schema import CaseResult, RunResults
from harness.results.stats import quoted


def _stat(g: GenerationRecord, what: str, key: str) -> float | None:
    """A generation summary's figure; None where missing or a percentile from too few samples (stats.quoted:
    a p99 needs 100 decode steps)."""
    summary = g.stat(what)
    v, n = summary.figure(key), summary.n
    q = key[1:-3] if key.startswith("p") and key.endswith("_ms") else ""
    if q.isdigit() and isinstance(n, int) and not quoted(int(q), n):
        return None
    return float(v) if isinstance(v, (int, float)) else None


def generation_row(c: CaseResult, source: str = "") -> dict[str, Any]:
    """The generation figures of one case (empty values where it did not measure)."""
    g = c.generation or GenerationRecord()
    conf = g.conformance or TokenAgreement()
    logits = conf.first_step_logits or {}
    return {
        "model": c.case.model, "runtime": c.case.runtime_label, "precision": str(c.case.precision),
        "batch": c.case.batch, "prompt": c.case.seq, "gen": c.case.gen, "status": c.status, "source": source,
        "ttft_p50_ms": _stat(g, "ttft", "p50_ms"), "tpot_p50_ms": _stat(g, "tpot", "p50_ms"),
        "tpot_p90_ms": _stat(g, "tpot", "p90_ms"), "tpot_p99_ms": _stat(g, "tpot", "p99_ms"),
        "e2e_p50_ms": _stat(g, "e2e", "p50_ms"), "tokens_per_s": g.tokens_per_s,
        "decode_tokens_per_s": g.decode_tokens_per_s, "kv_cache_mb": g.kv_cache_mb,
        "host_peak_mb": c.host_peak_mb, "token_match_rate": conf.exact_match_rate,
        "first_divergence": conf.first_divergence, "logits_rel_l2": logits.get("rel_l2"),
        "generations": g.generations, "recipe": c.precision_recipe, "reason": c.reason,
    }


def generation_section(runs: Sequence[RunResults], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per model: its generation rows (every runtime x precision x shape) and charts; [] for a forward run."""
    multi = len(runs) > 1
    models: dict[str, dict[str, Any]] = {}
    for run, label in zip(runs, labels):
        for c in run.cases:
            if c.case.gen is None or c.status == "skipped":
                continue
            m = models.setdefault(c.case.model, {"model": c.case.model, "rows": [], "cases": []})
            m["rows"].append(generation_row(c, label if multi else ""))
            m["cases"].append((c, label))
    out = []
    for m in models.values():
        m["rows"].sort(key=lambda r: (r["prompt"], r["gen"], r["batch"], r["runtime"], r["precision"]))
        m["charts"] = _charts(m.pop("cases"), multi)
        out.append(m)
    return out


def _name(c: CaseResult, label: str, multi: bool) -> str:
    return f"{c.case.runtime_label} {c.case.precision}" + (f" @ {label}" if multi else "")


def _charts(cases: list[tuple[CaseResult, str]], multi: bool) -> list[Markup]:
    out = []
    tps: dict[tuple[Any, Any], dict[str, list[tuple[float, float]]]] = {}
    for c, label in cases:
        tokens_per_s = c.generation.tokens_per_s if c.generation else None
        if c.measured and tokens_per_s:
            tps.setdefault((c.case.seq, c.case.gen), {}).setdefault(_name(c, label, multi), []).append(
                (float(c.case.batch), float(tokens_per_s)))
    for (prompt, gen), series in tps.items():
        if len({x for pts in series.values() for x, _ in pts}) >= 2:
            out.append(Markup(charts.line_chart(series, title=f"tokens/s vs batch, prompt {prompt}, {gen} tokens",
                                                x_label="batch size", y_label="tokens/s (end to end)")))
    ctx: dict[tuple[Any, Any, Any], dict[str, list[tuple[float, float]]]] = {}
    for c, label in cases:
        pts = c.generation.context_p50_ms if c.generation else []
        if c.measured and len(pts) >= 2:
            ctx.setdefault((c.case.batch, c.case.seq, c.case.gen), {})[_name(c, label, multi)] = [
                (float(x), float(y)) for x, y in pts]
    for (batch, prompt, gen), series in ctx.items():
        out.append(Markup(charts.xy_chart(series, title=f"decode latency vs context, batch {batch}, prompt {prompt}",
                                          x_label="context length (tokens in the KV cache)",
                                          y_label="decode step p50 (ms)")))
    return out


def _cell(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def generation_lines(run: RunResults) -> list[str]:
    """One terminal line per measured generation case: TTFT, TPOT, tokens/s, token agreement."""
    out = []
    for c in run.cases:
        if c.case.gen is None or not c.measured:
            continue
        r = generation_row(c)
        match = "-" if r["token_match_rate"] is None else f"{100 * r['token_match_rate']:.1f}%"
        first = "" if r["first_divergence"] is None else f" (first divergence at token {r['first_divergence']})"
        out.append(f"{c.case.id}: TTFT {_cell(r['ttft_p50_ms'])} ms, TPOT p50/p90/p99 {_cell(r['tpot_p50_ms'])}/"
                   f"{_cell(r['tpot_p90_ms'])}/{_cell(r['tpot_p99_ms'])} ms, {_cell(r['tokens_per_s'], '{:.1f}')} "
                   f"tokens/s, tokens equal to the reference {match}{first}")
    return out


def generation_markdown(runs: Sequence[RunResults], labels: Sequence[str], table: Any) -> list[str]:
    """summary.md's generation section (`table`: the DataFrame -> Markdown function of the summary)."""
    import pandas as pd

    rows = [r for m in generation_section(runs, labels) for r in m["rows"] if r["status"] in ("passed", "failed")]
    if not rows:
        return []
    cols = {"model": "model", "runtime": "runtime", "precision": "precision", "batch": "batch",
            "prompt": "prompt", "gen": "tokens", "ttft_p50_ms": "TTFT ms", "tpot_p50_ms": "TPOT p50 ms",
            "tpot_p99_ms": "TPOT p99 ms", "tokens_per_s": "tokens/s", "token_match_rate": "token match",
            "first_divergence": "first divergence"}
    if len(runs) > 1:
        cols["source"] = "source"
    for r in rows:  # as the report shows them: a percentage, "none" where no token differs
        r["first_divergence"] = "none" if r["first_divergence"] is None else str(r["first_divergence"])
        m = r["token_match_rate"]
        r["token_match_rate"] = "-" if m is None else f"{100 * m:.1f}%"
    df = pd.DataFrame(rows)[list(cols)].rename(columns=cols)
    return ["### Generation", "", table(df), ""]
