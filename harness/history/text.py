"""`harness history add|ls|cases|show|changes` as text and JSON over a History (the CLI is a thin shell over this)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.display import visible
from harness.history.confirm import AbConfirmer, Confirmer, apply_confirmation, not_remeasured
from harness.history.store import History, HistoryError, Series, describe_change, detectable, masked, recent


def history_command(history: History, args: argparse.Namespace) -> int:
    action = args.history_command
    if action == "add":
        from harness.results.schema import load_results

        runs = [(str(p), load_results(p)) for p in args.results]  # every file checked before any is recorded
        for path, run in runs:
            n = history.add(run, path)
            print(f"recorded run {visible(run.run_id)} ({n} cases, machine "
                  f"{visible(str(run.environment.get('machine', '?')))}) in {masked(history.url)}")
        return 0
    if action == "ls":
        rows = history.runs()
        if args.json:
            print(json.dumps(rows, indent=1))
        elif not rows:
            print(f"{masked(history.url)}: no runs recorded")
        else:
            print(f"{'run':<20} {'started':<26} {'commit':<10} {'measured':>9} machine")
        for r in rows if not args.json else ():
            print(f"{visible(r['run_id']):<20} {r['started_at']:<26} {(r['commit'] or '-')[:10]:<10} "
                  f"{r['measured']:>4}/{r['cases']:<4} {'' if r['complete'] else 'incomplete '}"
                  f"{visible(r['machine'])}")
        return 0
    if action == "cases" or (action == "show" and not args.case):
        keys = history.case_keys()
        if args.json:
            print(json.dumps(keys, indent=1))
        elif not keys:
            print(f"{masked(history.url)}: no cases recorded")
        else:
            print(f"{len(keys)} cases recorded in {masked(history.url)} (`harness history show CASE`):")
            for k in keys:
                print(f"  {visible(k)}")
        return 0
    if action == "show":
        series = history.series([args.case], args.metric)
        if not series:
            raise HistoryError(f"history {masked(history.url)}: no measured figures of case {args.case!r} "
                               "(`harness history ls` lists the runs)")
        if args.json:
            print(json.dumps([{"case": s.case, "machine": s.machine, "metric": s.metric, "unit": s.unit,
                               "points": [p.__dict__ for p in s.points],
                               "changes": [describe_change(s, c) for c in s.changes]} for s in series], indent=1))
            return 0
        for s in series:
            marks = {c.index: c for c in s.changes}
            print(f"{visible(s.case)} {s.metric} ({s.unit}) on {visible(s.machine)}: {len(s.points)} runs")
            for i, p in enumerate(s.points):
                what = "spread" if i in marks and marks[i].kind == "spread" else "change"
                note = f"  <- {what} {100 * marks[i].change:+.1f}%" if i in marks else ""
                print(f"  {visible(p.run_id):<20} {p.started_at:<26} {(p.commit or '-')[:10]:<10} "
                      f"{p.value:>12.4g}{note}")
        return 0
    min_change = None if args.min_change is None else args.min_change / 100.0
    series = history.series(None, args.metric, max_pvalue=args.max_pvalue, min_magnitude=min_change)
    rows = changes_rows(history, args, series=series)
    text = changes_markdown(rows, args.metric) + "\n" + detectable_markdown(series, args.max_pvalue)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(text, end="")
    if args.markdown:
        from harness.results.store import atomic_write_text

        atomic_write_text(args.markdown, text)
    failing = [r for r in rows if args.fail_on in ("any", r["reported"])] if args.fail_on else []
    if failing:
        window = f"the newest {args.last} runs" if args.last is not None else "the history"
        print(f"history changes: {len(failing)} {'change point' if args.fail_on == 'any' else args.fail_on}"
              f"{'s' if len(failing) != 1 else ''} in {window} (--fail-on {args.fail_on})", file=sys.stderr)
        return 1
    return 0


def changes_rows(history: History, args: argparse.Namespace, confirmer: Confirmer | None = None,
                 series: list[Series] | None = None) -> list[dict[str, Any]]:
    """The change points to list, each regression confirmed by `confirmer` (default: with --confirm an
    interleaved A/B of the model files on either side, `AbConfirmer`; without it, none: unconfirmed)."""
    if series is None:
        min_change = None if args.min_change is None else args.min_change / 100.0
        series = history.series(None, args.metric, max_pvalue=args.max_pvalue, min_magnitude=min_change)
    rows = [describe_change(s, c) for s in series for c in s.changes]
    rows = recent(rows, args.last)
    if confirmer is None:
        confirmer = (AbConfirmer({r["run_id"]: r["source"] for r in history.runs()}, history.case_parts())
                     if getattr(args, "confirm", False) else not_remeasured)
    return apply_confirmation(rows, confirmer)


def changes_markdown(rows: list[dict[str, Any]], metric: str) -> str:
    """A Markdown table of change points (one line saying there are none when there are none)."""
    if not rows:
        return f"No change points in the {metric} history.\n"
    lines = [f"Change points in the {metric} history: {len(rows)}", "",
             "| case | machine | change | before (last run, commit) | after (first run, commit) | p | confirmation |",
             "| --- | --- | ---: | --- | --- | ---: | --- |"]
    for r in rows:
        what = "spread " if r.get("kind") == "spread" else ""
        state = r.get("confirmation")
        confirmation = f"{state}: {visible(r['confirmation_reason'])}" if state else "-"
        lines.append(f"| {visible(r['case'])} | {visible(r['machine'])} | {what}{r['change_percent']:+.1f}% "
                     f"({r.get('reported', r['direction'])}) | {visible(r['before_run'])} "
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
