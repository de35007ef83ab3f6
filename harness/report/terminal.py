"""The terminal table printed at the end of a run."""

from __future__ import annotations

import re

import pandas as pd

from harness.display import visible
from harness.report.tables import cases_frame, drift_cell, flags_text, percentile_text
from harness.results.schema import RunResults, ScenarioRun


def terminal_table(run: RunResults, width: int = 160) -> str:
    """One row per case: p50 and p99 with their 95% intervals in ms ("n/a (n=12 < 100)" for a p99 from too few
    samples), the robust CV that decides `noisy`, the flags (noisy, tail-heavy), throughput and drift."""
    df = cases_frame(run)
    if df.empty:
        return "(no cases)"
    df.insert(0, "case", [c.case.id for c in run.cases])
    cols = ["case", "status", "throughput_sps", "rel_l2", "top1_agreement", "reason"]
    view = df[cols].rename(columns={"throughput_sps": "samples/s", "top1_agreement": "top1"})
    measured = [c.measured and bool(c.latency) for c in run.cases]
    view.insert(2, "p50_ms [95% CI]", [percentile_text(c.latency, 50) if m else "-"
                                       for c, m in zip(run.cases, measured)])
    view.insert(3, "p99_ms [95% CI]", [percentile_text(c.latency, 99) if m else "-"
                                       for c, m in zip(run.cases, measured)])
    view.insert(4, "robust_cv", pd.to_numeric(df["robust_cv"], errors="coerce"))
    view.insert(5, "flags", [flags_text(c.latency, c.contention) if m else "" for c, m in zip(run.cases, measured)])
    view = view.assign(case=view["case"].map(visible), reason=view["reason"].fillna("").map(reason_cell))
    numeric = ["samples/s", "top1"]
    view[numeric] = view[numeric].apply(pd.to_numeric, errors="coerce")  # None (not measured) -> NaN -> "-"
    view["rel_l2"] = [drift_cell(v, note) for v, note in zip(df["rel_l2"], df["drift_note"])]
    table = view.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}", max_colwidth=REASON_WIDTH + 2)
    counts = sorted({len(c.blocks or ()) for c in run.cases if c.measured})
    if counts and counts[-1] > 1:  # the live case line showed the first block's p50: say why the figures differ
        which = f"its {counts[0]} blocks" if len(counts) == 1 else \
            f"its blocks ({'-'.join(map(str, (counts[0], counts[-1])))} per case: an interrupted case has fewer)"
        table += (f"\np50/p99: over all of a case's samples, {which} (--repeats) together; a case's line during the "
                  "run showed its first block's p50")
    return table


REASON_WIDTH = 100
_PATH = re.compile(r"(?<![\w.])(?:~|\.{1,2})?/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)")


def reason_cell(text: object) -> str:
    """A case's reason in the table's last column: its first line; when too wide, file paths shortened to the
    file's name (results.json and the case's line keep the whole), and when still too wide the middle left
    out, not the end, where the reason's advice is (`give it a size with --shape x:2=N`)."""
    lines = visible(str(text or "")).strip().splitlines()
    short = lines[0] if lines else ""
    if len(short) > REASON_WIDTH:
        short = _PATH.sub(lambda m: m.group(1), short)
    if len(short) <= REASON_WIDTH:
        return short
    head = REASON_WIDTH * 2 // 5
    return short[:head] + " ... " + short[-(REASON_WIDTH - head - 5):]


def markdown_as_text(md: str) -> str:
    """Markdown written for a file (headings, **bold**, `code`, pipe tables) as plain terminal text: markers
    dropped, HTML entities decoded, a table's cells aligned in columns and its separator row left out."""
    import html
    import re

    def plain(s: str) -> str:
        s = re.sub(r"^#{1,6}\s+", "", s)
        s = s.replace("**", "").replace("`", "").replace("\\|", "|")
        return html.unescape(s)

    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            widths = [max(len(r[i]) if i < len(r) else 0 for r in table) for i in range(max(map(len, table)))]
            out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
            table.clear()

    for line in md.splitlines():
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", s[1:-1])]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                table.append([plain(c) for c in cells])
            continue
        flush()
        out.append(plain(line))
    flush()
    return "\n".join(out) + ("\n" if md.endswith("\n") else "")


def scenario_lines(run: RunResults) -> list[str]:
    """One terminal line per case with LoadGen scenarios: each scenario's verdict and figure; the Server search
    as its peak VALID QPS with the bound and what the bound came from; INVALID reasons and errors in brief."""
    from harness.results.schema import peak_server

    out = []
    for c in run.cases:
        runs = c.scenarios
        if not runs:
            continue
        parts = []
        for r in runs:
            if r.scenario == "server":
                continue
            lat = r.latency_ms or {}
            figure = {"single-stream": f"p90 {lat.get('p90', 0):.3g} ms" if lat.get("p90") else "",
                      "multi-stream": (f"p99 {r.query_latency_ms.get('p99'):.3g} ms per query"
                                       if r.query_latency_ms.get("p99") else ""),
                      "offline": f"{r.samples_per_s:.4g} samples/s" if r.samples_per_s else ""}[r.scenario]
            parts.append(_verdict(r.scenario, r.result, _batched(figure, r), r))
        tries = [r for r in runs if r.scenario == "server"]
        if tries:
            peak = peak_server(list(runs))
            assert peak is not None
            bound = f"p99 {peak.latency_ms.get('p99', 0):.3g} ms" if peak.latency_ms.get("p99") else ""
            if peak.target_latency_ms:
                bound += f" under a {peak.target_latency_ms:.3g} ms bound"
                if peak.target_latency_basis:
                    bound += f" ({peak.target_latency_basis})"
            valid = sum(r.result == "VALID" for r in tries)
            figure = f"{peak.target_qps:g} QPS, {bound}" if peak.target_qps else bound
            parts.append(_verdict("server", peak.result,
                                  _batched(f"{figure}; {valid} of {len(tries)} tries VALID", peak), peak))
        out.append(f"{c.case.id}: LoadGen " + "; ".join(parts))
    return out


def drift_note_lines(run: RunResults, limit: int = 5) -> list[str]:
    """One line per case whose drift passed only by its absolute floor (a reference ~0: the relative figures are
    float noise), with the words and the --feeds hint the reason column has no room for; `limit` cases, then a
    count."""
    noted = [(c, n) for c in run.cases if c.measured and isinstance(c.accuracy, dict)
             for n in (c.accuracy.get("notes") or [])[:1]]
    out = [f"{c.case.id}: drift near zero: {n}" for c, n in noted[:limit]]
    if len(noted) > limit:
        out.append(f"drift near zero: {len(noted) - limit} more case(s) (their reasons in results.json and the report)")
    return out


def profile_lines(run: RunResults) -> list[str]:
    """--profile: one terminal line per profiled case: its top layer (by a name a person knows), that layer's
    share of the profile, and the case's percent of the peak (and of the roof, with "over the roof" where the
    point lies above the measured ceilings); why there is no profile where there is none."""
    from harness.report.profile import layer_names

    out = []
    profiled = [c for c in run.cases if c.profile and c.measured and isinstance(c.profile.nodes, list)]
    names = {m: layer_names([c for c in profiled if c.case.model == m]) for m in {c.case.model for c in profiled}}
    for c in run.cases:
        p = c.profile
        if not p or not c.measured:
            continue
        parts = []
        nodes = [n for n in p.nodes or () if _finite(n.time_ms)]
        if nodes:
            top = max(nodes, key=lambda n: float(n.time_ms))
            name = names.get(c.case.model, {}).get(str(top.node), str(top.node))
            share = top.share
            parts.append(f"top layer {name}" + (f" {100 * float(share):.0f}% of the profile"
                                                if _finite(share) else ""))
        else:
            why = p.unsupported or p.error
            parts.append(f"no per-layer profile ({str(why).splitlines()[0][:100]})" if why else "no per-layer profile")
        roof = p.roofline
        if roof is not None and _finite(roof.percent_of_peak):
            text = f"{float(roof.percent_of_peak):.3g}% of peak"
            if _finite(roof.percent_of_roof):
                text += f", {float(roof.percent_of_roof):.3g}% of the roof"
            if roof.bound:
                text += f" ({roof.bound}-bound)"
            if roof.over_roof:
                text += " over the roof: ceilings too low"
            parts.append(text)
        elif roof is not None and roof.error:
            parts.append(f"no roofline point ({str(roof.error).splitlines()[0][:100]})")
        out.append(f"{c.case.id}: profile: " + "; ".join(parts))
    return out


def _finite(v: object) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _batched(figure: str, r: ScenarioRun) -> str:
    """The figure, with the dynamic batcher's mean batch and queue-wait p99 where the test went through it."""
    b = r.batcher
    if b is None or b.mean_batch is None:
        return figure
    wait = b.queue_wait_ms.get("p99")
    return (f"{figure} (batcher max {b.max_batch} wait {b.max_wait_ms:g} ms: mean batch {b.mean_batch:.3g}"
            + (f", queue wait p99 {wait:.3g} ms)" if wait is not None else ")"))


def _verdict(name: str, result: str, figure: str, r: object) -> str:
    text = f"{name} {result}" + (f" {figure}" if figure else "")
    reasons = getattr(r, "reasons", None) or []
    error = getattr(r, "error", None)
    if result == "INVALID" and reasons:
        text += f" ({reasons[0]})"
    elif error:
        text += f" ({_clip(error.splitlines()[0], 160)})"
    return text


def _clip(text: str, width: int) -> str:
    """`text` cut at a word boundary within `width` characters, with an ellipsis where it was cut (a reason is
    never left mid-word: "0.9 cor")."""
    if len(text) <= width:
        return text
    head, sep, hint = text.rpartition("; give ")  # what to do about it is kept whole: "; give --server-latency MS"
    if sep and len(hint) < width // 2:
        return f"{_clip(head, width - len(hint) - len(sep))}{sep}{hint}"
    cut = text[:width].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return f"{cut} ..."



def ab_lines(run: RunResults) -> list[str]:
    """One line per A/B case: B over A with its interval, the pairs judged and the verdict with its reason."""
    out = []
    for c in run.cases:
        ab = c.ab
        if ab is None:
            if c.status != "passed":
                out.append(f"{c.case.id}: {c.status}: {visible((c.reason or '').splitlines()[0] if c.reason else '')}")
            continue
        side_b = ab.b_case.model if ab.b.startswith("model:") else ab.b
        out.append(f"{c.case.id} vs {side_b}: {ab.verdict} - {ab.reason}"
                   + ("" if (ab.b_vs_a or {}).get("passed", True) else
                      f"; B's outputs differ from A's beyond the FP32 tolerance (rel_l2 {ab.b_vs_a['rel_l2']:.3g})"))
    return out
