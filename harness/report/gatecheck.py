"""gate-check's page (gatecheck.html) and Markdown (gatecheck.md, the terminal) from its GateCheckResult."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.gating.gatecheck import POWER_TARGET, GateCheckResult
from harness.report.templating import render_template


def gatecheck_markdown(r: GateCheckResult) -> str:
    """gatecheck.md: the false-alarm rate, power per level, each case's spread and the re-scored figures."""
    small = r.smallest_detected
    lines = [f"### Gate check: {r.gates.describe()}", "",
             f"{len(r.cases)} case(s) x {r.rounds} runs of {r.repeats} block(s) "
             f"({', '.join(r.cases)}), {r.wall_s:.0f} s.",
             "",
             f"- false alarms (A/A, ordered pairs judged regressed): **{r.aa_false_alarms}/{r.aa_trials}"
             f" = {r.false_alarm_rate:.1%}** ({r.aa_noise} judged noise)",
             f"- smallest injected slowdown detected with >= {POWER_TARGET:.0%} power: "
             f"**{'none of the levels' if small is None else f'{small:.0%}'}**", "",
             "| injected slowdown | trials | detected (regressed) | power |", "| ---: | ---: | ---: | ---: |"]
    for lv in r.levels:
        lines.append(f"| {lv.level:.0%} | {lv.trials} | {lv.detected} | {lv.power:.0%} |")
    if r.aa_spread:
        lines += ["", "A runs' medians (best block), max / min per case: " + ", ".join(
            f"`{k}` {v:.3f}" for k, v in r.aa_spread.items()),
            "", "Run-to-run spread (sd of log best-block median over the A runs): " + ", ".join(
            f"`{k}` {v:.3f}" for k, v in r.run_sigma.items())
            + ". To fold it into the gate's bounds, per case: the `[run_sigma_cases]` table that "
              "`gate-check --out` writes to gates-suggested.toml (or one machine-wide `run_sigma = "
              f"{r.suggested_run_sigma:.3f}`)" + (" (this check ran with run_sigma "
                                                     f"{r.gates.run_sigma:g})" if r.gates.run_sigma
                                                    else "") + "."]
    if r.tuned is not None:
        t = r.tuned
        small = "none of the levels" if t.smallest_detected is None else f"{t.smallest_detected:.0%}"
        lines += ["", "The same samples re-scored with each case's measured spread (in-sample: the "
                      "spread was estimated from these A runs, so this is optimistic): false alarms "
                      f"**{t.aa_false_alarms}/{t.aa_trials} = {t.false_alarm_rate:.1%}**, smallest slowdown "
                      f"with >= {POWER_TARGET:.0%} power **{small}**; power per level: " + ", ".join(
                          f"{lv.level:.0%}: {lv.power:.0%}" for lv in t.levels) + "."]
    return "\n".join(lines) + "\n"


def gatecheck_html(result: GateCheckResult) -> str:
    """gatecheck.html: a self-contained page with the false-alarm rate, power per level and per-case spread."""
    g = {**result.as_dict(), "gates_text": result.gates.describe(), "aa_false_alarms": result.aa_false_alarms,
         "aa_trials": result.aa_trials, "aa_noise": result.aa_noise,
         "tuned": None if result.tuned is None else {**result.tuned.scores(),
                                                     "aa_false_alarms": result.tuned.aa_false_alarms,
                                                     "aa_trials": result.tuned.aa_trials}}
    g["machine"] = result.machine or "this machine"
    g["measured_at"] = result.measured_at or ""
    return render_template("gatecheck.html.j2", g=g)


def nightly_markdown(summary: str, rows: list[dict[str, Any]], lost: Sequence[str] = ()) -> str:
    """gatecheck-nightly.md: the summary line, then a row per case and trial; on a Ray cluster (`--ray`), the
    trials whose node was lost before they finished (`lost`: one line each), their rows counted unjudged."""
    lines = [summary, "", "| case | how | trial | trials | regressed | improved | pass | unjudged (inconclusive, "
             "noise, not comparable) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['how']} | {r['trial']} | {r['trials']} | {r['regressed']} | "
                     f"{r['improved']} | {r['pass']} | {r['unjudged']} |")
    if lost:
        lines += ["", f"Not judged: {len(lost)} trial(s) whose Ray node was lost before they finished (their rows are "
                      "counted unjudged, never as a pass or a detection): " + "; ".join(lost)]
    return "\n".join([*lines, ""])
