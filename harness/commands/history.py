"""`harness history add | ls | cases | show | changes`: the run history database (harness.history,
docs/history.md); its options are groups of harness.options.history."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import Command, add_groups
from harness.options.gating import PRINT_JSON
from harness.options.history import HISTORY_ADD, HISTORY_CASE, HISTORY_CHANGES, HISTORY_DB, HISTORY_METRIC

# each action: its help and the option groups it composes (the database first)
ACTIONS = {
    "add": ("record stored runs (results.json files or their folders)", (HISTORY_ADD,)),
    "ls": ("list recorded runs, oldest first", (PRINT_JSON,)),
    "cases": ("list the recorded case ids (what `show` takes)", (PRINT_JSON,)),
    "show": ("one case's figures over the recorded runs, per machine (without a case: the recorded case ids)",
             (HISTORY_CASE, HISTORY_METRIC, PRINT_JSON)),
    "changes": ("change points in every case's history (an exact penalised search, each step tested under the "
                "history's own noise model; drifts, modes), grouped into one finding per commit",
                (HISTORY_METRIC, HISTORY_CHANGES, PRINT_JSON)),
}


def add_parser(sub: Any) -> None:
    h = sub.add_parser("history", help="record runs in a database and list their history and change points")
    hsub = h.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    for name, (text, groups) in ACTIONS.items():
        add_groups(hsub.add_parser(name, help=text), (HISTORY_DB, *groups))


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
