"""Verdict tables: Markdown for CI job summaries (`verdicts.md`) and PR comments; the HTML report's verdict rows."""

from __future__ import annotations

from typing import Any

from harness.display import speed_text, visible
from harness.gating.compare import Comparison, VerdictRecord
from harness.gating.unjudged import verdict_text
from harness.gating.verdicts import Verdict

_ICON = {Verdict.REGRESSED: "❌", Verdict.BROKE: "💥", Verdict.IMPROVED: "✅", Verdict.FIXED: "🔧",
         Verdict.NOISE: "〰️", Verdict.INCONCLUSIVE: "❔", Verdict.NEW: "🆕", Verdict.NOT_COMPARABLE: "⚠️", Verdict.PASS: ""}
_ORDER = [Verdict.BROKE, Verdict.REGRESSED, Verdict.NOT_COMPARABLE, Verdict.INCONCLUSIVE, Verdict.NOISE, Verdict.FIXED,
          Verdict.IMPROVED, Verdict.NEW, Verdict.PASS]


def _cell(text: object) -> str:
    return visible(text).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return ""
    if unit == "ms":
        return f"{v:.4g} ms"
    return f"{v:.3g}"


def _change(r: VerdictRecord) -> str:
    if r.ratio is None:
        return ""
    return speed_text(r.ratio)


def _ci(r: VerdictRecord) -> str:
    if r.ci_low is None or r.ci_high is None:
        return ""
    return f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"


def verdicts_markdown(comparison: Comparison, only_changes: bool = False) -> str:
    """A Markdown summary line, notes and one table row per verdict (failing first; `pass` rows last).

    `only_changes` leaves out `pass` rows (a compact CI summary); the counts still include them.
    """
    c = comparison
    unjudged = c.unjudged_line()
    lines = [f"### {_cell(c.summary())}", ""] + ([f"**{_cell(unjudged)}**", ""] if unjudged else []) + [
             f"{_cell(c.baseline_label)} → {_cell(c.current_label)}; {_cell(c.gates.describe())}. "
             f"Method: {_cell(c.method)}.", "", f"This gate: {_cell(c.gates.measured_line())}.", ""]
    for note in c.notes:
        lines.append(f"- note: {_cell(note)}")
    if c.notes:
        lines.append("")
    rows = sorted(c.records, key=lambda r: _ORDER.index(r.verdict))
    if only_changes:
        rows = [r for r in rows if r.verdict is not Verdict.PASS]
    if not rows:
        lines.append("_no verdicts to show_")
        return "\n".join(lines) + "\n"
    lines += ["| verdict | case | metric | baseline | current | change | ratio bounds | p | reason |",
              "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        p = "" if r.p_value is None else f"{r.p_value:.3g}"
        lines.append(f"| {_ICON[r.verdict]} {verdict_text(r)} | `{_cell(r.case_id)}` | {r.metric} | "
                     f"{_num(r.baseline, r.unit)} | {_num(r.current, r.unit)} | {_change(r)} | {_ci(r)} | {p} | "
                     f"{_cell(r.reason)} |")
    return "\n".join(lines) + "\n"


def verdict_dicts(comparison: Comparison, label: str | None = None) -> list[dict[str, Any]]:
    """A gating Comparison's records as the report's verdict rows, failing ones first."""
    order = {"broke": 0, "regressed": 1, "not_comparable": 2, "inconclusive": 3, "noise": 3, "new": 4, "fixed": 5,
             "improved": 6, "pass": 7}
    rows = []
    for r in comparison.records:
        d = r.as_dict()
        d["case"] = d.pop("case_id") + (f" @ {label}" if label else "")
        d["verdict_text"] = verdict_text(r)
        rows.append(d)
    return sorted(rows, key=lambda d: (order.get(d["verdict"], 9), d["case"], d["metric"]))


def _plain(text: object, limit: int | None = None) -> str:
    s = visible(str(text).replace("\r\n", " ").replace("\n", " "))
    return s if limit is None or len(s) <= limit else s[:limit - 1] + "…"


def verdicts_text(comparison: Comparison, only_changes: bool = False, verbose: bool = False,
                  width: int = 100) -> str:
    """The verdicts as plain text for a terminal: no Markdown, no HTML entities, no icons; failing rows first.
    The method paragraph and the gate-check line only with `verbose` (one pointer line otherwise: they are in
    verdicts.md and `--json`); reasons cut at `width` characters unless `verbose`. The verdict counts and the
    gates are the caller's last line (`Comparison.summary()`), not repeated here."""
    c = comparison
    lines = [f"verdicts: baseline {_plain(c.baseline_label)} -> current {_plain(c.current_label)}"]
    if verbose:
        lines += [f"Method: {_plain(c.method)}.", f"This gate: {_plain(c.gates.measured_line())}."]
    else:
        lines.append("(method and the gate's measured false-alarm rate: harness compare --verbose, or verdicts.md)")
    lines += [f"note: {_plain(n)}" for n in c.notes]
    rows = sorted(c.records, key=lambda r: _ORDER.index(r.verdict))
    if only_changes:
        rows = [r for r in rows if r.verdict is not Verdict.PASS]
    if not rows:
        return "\n".join(lines + ["(no verdicts to show)"]) + "\n"
    table = [("verdict", "case", "metric", "baseline", "current", "change", "ratio bounds", "reason")]
    table += [(verdict_text(r), _plain(r.case_id), r.metric, _num(r.baseline, r.unit), _num(r.current, r.unit),
               _change(r), _ci(r), _plain(r.reason, None if verbose else width)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(7)]
    lines.append("")
    for row in table:
        lines.append("  ".join(cell.ljust(w) if i < 3 or i == 6 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row[:7], widths))) + "  " + row[7])
    return "\n".join(line.rstrip() for line in lines) + "\n"
