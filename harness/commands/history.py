"""`harness history add | ls | cases | show | changes`: the run history database (harness.history,
docs/history.md)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import Command


def add_parser(sub: Any) -> None:
    h = sub.add_parser("history", help="record runs in a database and list their history and change points")
    hsub = h.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    actions = {
        "add": hsub.add_parser("add", help="record stored runs (results.json files or their folders)"),
        "ls": hsub.add_parser("ls", help="list recorded runs, oldest first"),
        "cases": hsub.add_parser("cases", help="list the recorded case ids (what `show` takes)"),
        "show": hsub.add_parser("show", help="one case's figures over the recorded runs, per machine (without a "
                                             "case: the recorded case ids)"),
        "changes": hsub.add_parser("changes", help="change points in every case's history (an exact penalised "
                                                   "search, each step tested under the history's own noise model; "
                                                   "drifts, modes), grouped into one finding per commit"),
    }
    actions["add"].add_argument("results", nargs="+", help="results.json files (or folders holding one)")
    actions["show"].add_argument("case", nargs="?", help="a case id, e.g. mlp-ort-cpu-fp32-b1 (without one: "
                                                         "the recorded case ids)")
    for name in ("show", "changes"):
        actions[name].add_argument("--metric", default="p50", choices=("p50", "p99", "throughput"),
                                   help="the figure (default: p50 latency)")
    ch = actions["changes"]
    ch.add_argument("--last", type=int, metavar="N", help="only change points whose first run after the change "
                                                          "is among the newest N runs of its series (nightly: new "
                                                          "ones)")
    ch.add_argument("--max-pvalue", type=float, metavar="P", help="significance of a change (default: 0.0001)")
    ch.add_argument("--min-change", type=float, metavar="PERCENT", help="smallest change to list (default: 0)")
    ch.add_argument("--settings", metavar="FILE",
                    help="per-case detection settings (TOML: [defaults], then [[case]] entries with match = "
                         "\"PATTERN\" and max_pvalue, min_change, min_segment, noise = auto|iid, drift, modes, "
                         "spread); without it the defaults need no setting (docs/history.md)")
    ch.add_argument("--markdown", metavar="FILE", help="also write the list as Markdown here (a CI summary)")
    ch.add_argument("--confirm", action="store_true",
                    help="re-measure each listed regression: an interleaved A/B (`harness ab`) of the model files "
                         "recorded on either side must agree, else it is reported unconfirmed, not a regression; "
                         "without --confirm (or where they cannot be re-measured) regressions are marked "
                         "unconfirmed with the reason")
    ch.add_argument("--fail-on", choices=("regression", "improvement", "any"), metavar="KIND",
                    help="exit 1 when a finding (the change points of one commit) holds one of this kind: "
                         "regression (a slowdown or a slower drift, or a throughput drop), improvement or any; "
                         "with --last N, only those in the newest N runs")
    for a in actions.values():
        a.add_argument("--history", metavar="URL", help="SQLAlchemy database URL or SQLite file (default: "
                                                         "$HARNESS_HISTORY, else history.db in the user data "
                                                         "folder)")
        if a is not actions["add"]:
            a.add_argument("--json", action="store_true", help="print JSON")


def cmd_history(args: argparse.Namespace) -> int:
    """SIGINT and SIGTERM as `harness run` takes them (130 / 143): `changes --confirm` ends its `harness ab` child,
    removes the A/B's temporary folder and prints and writes the change points with what was re-measured."""
    from harness.history import open_history
    from harness.history.confirm import SignalGuard
    from harness.history.text import history_command

    with SignalGuard() as guard:
        history = open_history(args.history)
        try:
            return history_command(history, args, guard)
        finally:
            history.close()


COMMANDS = {"history": Command(cmd_history, plugins=False)}
