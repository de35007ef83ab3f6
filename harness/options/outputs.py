"""Where a run goes (harness.results, harness.history): its folder and the history database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup


def history_db(text: Any, what: str) -> str:
    """--history [URL]: a SQLAlchemy URL or SQLite file; alone, $HARNESS_HISTORY or the default database.

    Opened (created and migrated when new) and probed for a write before the run starts: a URL that cannot be
    reached or written is a usage error now, not a note after the whole run.
    """
    from harness.history.store import HistoryError, history_url, open_history

    url = history_url(str(text) or None)
    try:
        history = open_history(url)
        try:
            history.check_writable()
        finally:
            history.close()
    except HistoryError as exc:
        raise UsageError(f"--{what}: {exc}") from None
    return url


OUTPUTS = OptionGroup("outputs", "outputs", (
    OptionDef("out", "output folder (default: reports/YYYYmmdd-HHMMSS, with reports/latest pointing at it)",
              "DIR"),
    OptionDef("history", "record the run in the history database as it finishes and add a trend section (p50 and "
                         "p99 over the recorded runs, change points marked) to the report: a SQLAlchemy URL or a "
                         "SQLite file; alone: $HARNESS_HISTORY, else history.db in the user data folder "
                         "(docs/history.md)", "[URL]", bare="", field="history", parse=history_db),
))


def check_out_dir(out_dir: Path) -> None:
    """A usage error, before anything runs, when `out_dir` cannot be a writable folder (creates nothing)."""
    p = Path(out_dir).absolute()
    probe = p
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link
            raise UsageError(f"--out {out_dir}: {probe} is a broken symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == p else f"cannot be created: {probe} is a file, not a folder"
        raise UsageError(f"--out {out_dir}: {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == p else f"cannot be created: {probe} is not writable"
        raise UsageError(f"--out {out_dir}: {what}")



# `harness report`: stored results rendered again (parsed by the CLI's parser; no run configuration)
REPORT = OptionGroup("report", "report", (
    OptionDef("results", "results.json files (or folders holding one)", positional=True, nargs="+"),
    OptionDef("out", "output folder (default: the results file's folder; required with several results files)",
              "DIR", short="-o"),
    OptionDef("baseline", "show verdicts of each run against this baseline (a stored name or a results.json path)",
              "NAME|PATH"),
    OptionDef("gate", "gate for --baseline, e.g. median:10% (repeatable; default median:10%)", "SPEC", multiple=True),
    OptionDef("gate-config", "TOML gate configuration for --baseline", "FILE"),
    OptionDef("history", "add the trend section: each case's p50/p99 over the runs recorded in this history "
                         "database (one results file)", "URL"),
))
