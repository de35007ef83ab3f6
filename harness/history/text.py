"""`harness history add|ls|cases|show|changes` as text and JSON over a History (the CLI is a thin shell over this)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from harness.display import visible
from harness.history.confirm import AbConfirmer, Confirmer, SignalGuard, apply_confirmation, not_remeasured
from harness.history.store import History, HistoryError, Series, describe_change, detectable, masked, recent


def history_command(history: History, args: argparse.Namespace, guard: SignalGuard | None = None) -> int:
    """One `harness history` action; `guard`: the command's SignalGuard (installed by the caller), which `changes
    --confirm` reads to keep what finished when a SIGINT or SIGTERM stops it (exit 130 / 143)."""
    action = args.history_command
    if action == "add":
        return _add(history, args)
    if action == "ls":
        return _ls(history, args)
    if action == "cases" or (action == "show" and not args.case):
        return _cases(history, args)
    if action == "show":
        return _show(history, args)
    return _changes(history, args, guard or SignalGuard())


def _add(history: History, args: argparse.Namespace) -> int:
    from harness.results.schema import load_results

    runs = [(str(p), load_results(p)) for p in args.results]  # every file checked before any is recorded
    for path, run in runs:
        n = history.add(run, path)
        print(f"recorded run {visible(run.run_id)} ({n} cases, machine "
              f"{visible(str(run.environment.machine or '?'))}) in {masked(history.url)}")
    return 0


def _listing(items: list, as_json: bool, empty: str, head: str, line: Callable[[Any], str]) -> int:
    """One listing of `history ls` / `history cases`: JSON, the empty line, or a head and a line per item."""
    if as_json:
        print(json.dumps(items, indent=1))
    elif not items:
        print(empty)
    else:
        print(head)
        for item in items:
            print(line(item))
    return 0


def _ls(history: History, args: argparse.Namespace) -> int:
    return _listing(history.runs(), args.json, f"{masked(history.url)}: no runs recorded",
                    f"{'run':<20} {'started':<26} {'commit':<10} {'measured':>9} machine",
                    lambda r: f"{visible(r['run_id']):<20} {r['started_at']:<26} {(r['commit'] or '-')[:10]:<10} "
                              f"{r['measured']:>4}/{r['cases']:<4} {'' if r['complete'] else 'incomplete '}"
                              f"{visible(r['machine'])}")


def _cases(history: History, args: argparse.Namespace) -> int:
    keys = history.case_keys()
    return _listing(keys, args.json, f"{masked(history.url)}: no cases recorded",
                    f"{len(keys)} cases recorded in {masked(history.url)} (`harness history show CASE`):",
                    lambda k: f"  {visible(k)}")


def _show(history: History, args: argparse.Namespace) -> int:
    series = history.series([args.case], args.metric)
    if not series:
        raise HistoryError(f"history {masked(history.url)}: no measured figures of case {args.case!r} "
                           "(`harness history ls` lists the runs)")
    if args.json:
        print(json.dumps([{"case": s.case, "machine": s.machine, "metric": s.metric, "unit": s.unit,
                           "points": [p.__dict__ for p in s.points],
                           "model_changes": [{"run": s.points[m.index].run_id, "before": m.before,
                                              "after": m.after} for m in s.model_changes],
                           "changes": [describe_change(s, c) for c in s.changes]} for s in series], indent=1))
        return 0
    for s in series:
        print("\n".join(show_lines(s)))
    return 0


def _changes(history: History, args: argparse.Namespace, stop: SignalGuard) -> int:
    """`history changes`: the change points, findings and drifts, printed and written; the exit status (a
    signal's, or --fail-on's)."""
    series = history.series(None, args.metric, settings=case_settings(args))
    rows = changes_rows(history, args, series=series, stop=stop)
    stop.finishing = True  # a signal from here on waits for what finished to be printed and written
    found = findings(rows)
    text = (findings_markdown(found, args.metric) + "\n" + changes_markdown(rows, args.metric)
            + model_changes_markdown(series) + modes_markdown(series) + "\n"
            + detectable_markdown(series, args.max_pvalue))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(text, end="")
    if args.markdown:
        from harness.results.store import atomic_write_text

        atomic_write_text(args.markdown, text)
    if stop.signum is not None:  # stopped by a signal: what finished is printed and written, no verdict
        asked = [r for r in rows if r.get("confirmation") is not None]
        cut = sum("interrupted by" in r["confirmation_reason"] for r in asked)
        print(f"history changes: interrupted by {stop.name}: {len(asked) - cut} of {len(asked)} regression(s) "
              f"re-measured, the rest listed unconfirmed; no --fail-on verdict", file=sys.stderr)
        return 128 + stop.signum
    return _fail_on(found, args)


def _fail_on(found: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """1 when a finding holds what --fail-on names (said on stderr), else 0."""
    failing = [f for f in found if args.fail_on == "any" or args.fail_on in f["reported"]] if args.fail_on else []
    if not failing:
        return 0
    window = f"the newest {args.last} runs" if args.last is not None else "the history"
    what = "change point" if args.fail_on == "any" else args.fail_on
    points = sum(len(f["cases"]) for f in failing)
    print(f"history changes: {len(failing)} finding{'s' if len(failing) != 1 else ''} with a{'n' if what[0] in 'aeiou' else ''} "
          f"{what} in {window} ({points} change point{'s' if points != 1 else ''}, --fail-on {args.fail_on})",
          file=sys.stderr)
    return 1


def show_lines(s: Series) -> list[str]:
    """`harness history show`: a series' heading, then one line per run; the run where the model measured changed
    says so, and a change point there is attributed to it ("model changed"), not shown as a plain change."""
    marks = {c.index: c for c in s.changes}
    moved = {m.index: m for m in s.model_changes}
    modes = (f" (two modes: {s.modes.low:.4g} and {s.modes.high:.4g}, not change points)"
             if s.modes is not None else "")
    models = len({p.model for p in s.points if p.model})
    across = (f"; {models} model fingerprints, changed at {len(s.model_changes)} run"
              f"{'s' if len(s.model_changes) != 1 else ''} (marked)" if s.model_changes else "")
    lines = [f"{visible(s.case)} {s.metric} ({s.unit}) on {visible(s.machine)}: {len(s.points)} runs{modes}{across}"]
    for i, p in enumerate(s.points):
        notes = []
        if i in marks:
            what = {"spread": "spread", "drift": "drift"}.get(marks[i].kind, "change")
            owner = s.model_change_at(i)
            notes.append(f"{what} {100 * marks[i].change:+.1f}%" + (" (model changed)" if owner else ""))
        if i in moved:
            notes.append(moved[i].words())
        note = f"  <- {'; '.join(notes)}" if notes else ""
        lines.append(f"  {visible(p.run_id):<20} {p.started_at:<26} {(p.commit or '-')[:10]:<10} "
                     f"{p.value:>12.4g}{note}")
    return lines


def case_settings(args: argparse.Namespace) -> Any:
    """The per-case detection settings: built-in defaults, then --max-pvalue / --min-change, then the
    --settings file's [defaults] and matching [[case]] entries (harness.history.settings)."""
    from dataclasses import replace

    from harness.history.changes import Settings
    from harness.history.settings import SettingsError, load_settings

    base = Settings()
    if getattr(args, "max_pvalue", None) is not None:
        base = replace(base, max_pvalue=args.max_pvalue)
    if getattr(args, "min_change", None) is not None:
        base = replace(base, min_magnitude=args.min_change / 100.0)
    try:
        return load_settings(getattr(args, "settings", None), base)
    except SettingsError as exc:
        raise HistoryError(f"--settings {exc}") from None


def findings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One cause, one finding: the change points whose first run after the change is the same commit (the same
    run where no commit was recorded), across cases and machines, as Perfherder's alert summaries group a push's
    alerts. Each: the run and commit, the cases moved with their kinds, sizes and directions, and `reported`
    (the set of what its change points are reported as: regression, improvement, unconfirmed, noisier, ...).
    Each row gets `finding` (1-based, in the order of the runs)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        key = ("commit", r["after_commit"]) if r.get("after_commit") else ("run", f"{r['after_run']}@{r['machine']}")
        groups.setdefault(key, []).append(r)
    out = []
    for members in sorted(groups.values(), key=lambda m: (min(r["after_started_at"] or "" for r in m),
                                                           m[0]["after_run"])):
        n = len(out) + 1
        for r in members:
            r["finding"] = n
        first = members[0]
        out.append({"finding": n, "after_run": first["after_run"], "after_commit": first["after_commit"],
                    "before_run": first["before_run"], "before_commit": first["before_commit"],
                    "reported": sorted({r.get("reported", r["direction"]) for r in members}),
                    "cases": [{k: r[k] for k in ("case", "machine", "kind", "change_percent", "direction", "pvalue")}
                              | {"reported": r.get("reported", r["direction"])} for r in members]})
    return out


def findings_markdown(found: list[dict[str, Any]], metric: str) -> str:
    """One line per finding: the run and commit, how many cases moved which way, their sizes."""
    if not found:
        return ""
    points = sum(len(f["cases"]) for f in found)
    lines = [f"Findings in the {metric} history: {len(found)} (one per commit or run; {points} change points)", "",
             "| # | first run after (commit) | last run before (commit) | reported | cases moved | sizes |",
             "| ---: | --- | --- | --- | ---: | --- |"]
    for f in found:
        sizes = sorted(c["change_percent"] for c in f["cases"])
        span = f"{sizes[0]:+.1f}%" if len(sizes) == 1 else f"{sizes[0]:+.1f}% .. {sizes[-1]:+.1f}%"
        names = ", ".join(visible(c["case"]) for c in f["cases"][:3]) + (
            f" and {len(f['cases']) - 3} more" if len(f["cases"]) > 3 else "")
        lines.append(f"| {f['finding']} | {visible(f['after_run'])} {(f['after_commit'] or '-')[:10]} | "
                     f"{visible(f['before_run'])} {(f['before_commit'] or '-')[:10]} | {', '.join(f['reported'])} | "
                     f"{len(f['cases'])}: {names} | {span} |")
    return "\n".join(lines) + "\n"


def model_changes_markdown(series: list[Series]) -> str:
    """The series whose model changed (its fingerprint differs between runs): where, and whether a change point
    falls there (then attributed to the model, reported "model changed", never as a regression)."""
    moved = [(s, m) for s in series for m in s.model_changes]
    if not moved:
        return ""
    lines = ["", f"Model changes: {len(moved)} (the case's model fingerprint differs from the run before; a change "
             "point there is the model's doing, reported \"model changed\"):", "",
             "| case | machine | first run with the new model | fingerprint | change point there |",
             "| --- | --- | --- | --- | --- |"]
    for s, m in moved:
        at = [c for c in s.changes if m.covers(c.index)]
        cps = ", ".join(f"{c.kind} {100 * c.change:+.1f}%" for c in at) or "none"
        lines.append(f"| {visible(s.case)} | {visible(s.machine)} | {visible(s.points[m.index].run_id)} | "
                     f"{visible(m.before[:12])} -> {visible(m.after[:12])} | {cps} |")
    return "\n".join(lines) + "\n"


def modes_markdown(series: list[Series]) -> str:
    """The cases whose history alternates between two levels: modes, not change points."""
    bimodal = [s for s in series if s.modes is not None]
    if not bimodal:
        return ""
    lines = ["", "Two modes (the history alternates between two levels: not change points; steps are searched with "
             "the modes taken out):", "", "| case | machine | low | high | runs at high | switches |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for s in bimodal:
        m = s.modes
        lines.append(f"| {visible(s.case)} | {visible(s.machine)} | {m.low:.4g} | {m.high:.4g} | "
                     f"{100 * m.high_share:.0f}% | {m.switches} |")
    return "\n".join(lines) + "\n"


def changes_rows(history: History, args: argparse.Namespace, confirmer: Confirmer | None = None,
                 series: list[Series] | None = None, stop: SignalGuard | None = None) -> list[dict[str, Any]]:
    """The change points to list, each regression confirmed by `confirmer` (default: with --confirm an
    interleaved A/B of the model files on either side, `AbConfirmer`; without it, none: unconfirmed); `stop`:
    see apply_confirmation."""
    if series is None:
        series = history.series(None, args.metric, settings=case_settings(args))
    rows = [describe_change(s, c) for s in series for c in s.changes]
    rows = recent(rows, args.last)
    if confirmer is None:
        confirmer = (AbConfirmer({r["run_id"]: r["source"] for r in history.runs()}, history.case_parts())
                     if getattr(args, "confirm", False) else not_remeasured)
    return apply_confirmation(rows, confirmer, stop)


def changes_markdown(rows: list[dict[str, Any]], metric: str) -> str:
    """A Markdown table of change points (one line saying there are none when there are none)."""
    if not rows:
        return f"No change points in the {metric} history.\n"
    lines = [f"Change points in the {metric} history: {len(rows)}", "",
             "| case | machine | change | before (last run, commit) | after (first run, commit) | p | confirmation |",
             "| --- | --- | ---: | --- | --- | ---: | --- |"]
    for r in rows:
        what = {"spread": "spread ", "drift": f"drift over {r.get('drift_runs')} runs "}.get(r.get("kind"), "")
        state = r.get("confirmation")
        confirmation = f"{state}: {visible(r['confirmation_reason'])}" if state else "-"
        reported = r.get("reported", r["direction"])
        moved = r.get("model_changed")
        if moved:  # attributed to the model: say which way it moved and between which fingerprints
            way = {"regression": "worse", "improvement": "better"}.get(r["direction"], r["direction"])
            reported = (f"{reported}: {way}, fingerprint {visible(moved['before'][:12])} -> "
                        f"{visible(moved['after'][:12])}")
        lines.append(f"| {visible(r['case'])} | {visible(r['machine'])} | {what}{r['change_percent']:+.1f}% "
                     f"({reported}) | {visible(r['before_run'])} "
                     f"{(r['before_commit'] or '-')[:10]} | {visible(r['after_run'])} "
                     f"{(r['after_commit'] or '-')[:10]} | {r['pvalue']:.1e} | {confirmation} |")
    return "\n".join(lines) + "\n"


def detectable_markdown(series: list[Series], max_pvalue: float | None = None) -> str:
    """Per series: the smallest step its own history can show after 5 and after 10 more runs
    (harness.history.changes.min_detectable_step)."""
    if not series:
        return ""
    lines = [("Smallest step each case's history can show (from its own run-to-run noise; found about 9 times "
             "in 10):"), "", "| case | machine | runs (at this level) | noise | after 5 runs | after 10 runs |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for s in series:
        d = detectable(s, max_pvalue)
        cells = [f"{100 * d[n]:.1f}%" if d.get(n) is not None else "-" for n in (5, 10)]
        noise = f"{100 * d['noise']:.2f}%" if d.get("noise") is not None else "-"
        lines.append(f"| {visible(s.case)} | {visible(s.machine)} | {len(s.points)} ({d['level_runs']}) | {noise} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
