"""The history database's options (harness.history, `harness history ...`): the database, what to list and how
change points are searched; parsed by the CLI's parser (the history commands build no run configuration)."""

from __future__ import annotations

from harness.options.base import OptionDef, OptionGroup
from harness.options.values import choice, float_at_least, fraction, int_at_least

METRICS = ("p50", "p99", "throughput")
FAIL_ON = ("regression", "improvement", "any")

HISTORY_DB = OptionGroup("history-db", "history database", (
    OptionDef("history", "SQLAlchemy database URL or SQLite file (default: $HARNESS_HISTORY, else history.db in the "
                         "user data folder)", "URL"),
))
HISTORY_ADD = OptionGroup("history-add", "history add", (
    OptionDef("results", "results.json files (or folders holding one)", positional=True, nargs="+"),
))
HISTORY_CASE = OptionGroup("history-show", "history show", (
    OptionDef("case", "a case id, e.g. mlp-ort-cpu-fp32-b1 (without one: the recorded case ids)", positional=True,
              nargs="?"),
))
HISTORY_METRIC = OptionGroup("history-metric", "figure", (
    OptionDef("metric", "the figure: p50, p99 or throughput (default: p50 latency)", "METRIC", default="p50",
              parse=choice(METRICS, "figures")),
))
HISTORY_CHANGES = OptionGroup("history-changes", "change points", (
    OptionDef("last", "only change points whose first run after the change is among the newest N runs of its series "
                      "(nightly: new ones)", "N", parse=int_at_least(1)),
    OptionDef("max-pvalue", "significance of a change (default: 0.0001)", "P", parse=fraction),
    OptionDef("min-change", "smallest change to list (default: 0)", "PERCENT", parse=float_at_least(0.0)),
    OptionDef("settings", "per-case detection settings (TOML: [defaults], then [[case]] entries with match = "
                          "\"PATTERN\" and max_pvalue, min_change, min_segment, noise = auto|iid, drift, modes, "
                          "spread); without it the defaults need no setting (docs/history.md)", "FILE"),
    OptionDef("markdown", "also write the list as Markdown here (a CI summary)", "FILE"),
    OptionDef("confirm", "re-measure each listed regression: an interleaved A/B (`harness ab`) of the model files "
                         "recorded on either side must agree, else it is reported unconfirmed, not a regression; "
                         "without --confirm (or where they cannot be re-measured) regressions are marked "
                         "unconfirmed with the reason", flag=True),
    OptionDef("fail-on", "exit 1 when a finding (the change points of one commit) holds one of this kind: "
                         "regression (a slowdown or a slower drift, or a throughput drop), improvement or any; with "
                         "--last N, only those in the newest N runs", "KIND", parse=choice(FAIL_ON, "kinds")),
))
