"""Gating a run against a baseline as it finishes (harness.gating): the baseline, gates, confirmation."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import float_at_least, int_at_least, integer, switch

GATING = OptionGroup("gating", "gating against a baseline", (
    OptionDef("baseline", "compare the run with this baseline (a stored name or a results.json path) and gate "
                          "on it: verdicts.md beside the results, exit status 1 on a regression", "NAME|PATH"),
    OptionDef("gate", "a regression gate STAT:PERCENT, e.g. median:10% or p99:20% (repeatable; default "
                      "median:10%)", "SPEC", multiple=True),
    OptionDef("gate-config", "TOML file with gates, per-model overrides and the confidence level", "FILE"),
    OptionDef("confirm", "with --baseline: measure each case judged regressed on latency N more blocks (fresh "
                         "activations) and judge again, so only a slowdown that reproduces fails the run; 0 turns "
                         "it off (default: 2)", "N", field="confirm", parse=int_at_least(0)),
    OptionDef("allow-unjudged", "with --baseline (or --workload ab): exit 0 although a gated timing row (an A/B "
                                "case) was not judged (contended, too few samples or clean pairs, a changed "
                                "model); the last line still names them (default: such a run exits 3)", flag=True, field="allow_unjudged",
              parse=switch(True)),
))


def gating_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """--baseline / --gate / --gate-config, checked before the run starts (a bad baseline is a usage error)."""
    from harness.errors import ResultsError
    from harness.gating.baseline import load_baseline, resolve_baseline
    from harness.gating.gates import load_gate_config

    gates = tuple(raw.get("gate") or ())
    gate_config = str(Path(raw["gate_config"]).absolute()) if raw.get("gate_config") else None
    load_gate_config(gate_config, gates)
    baseline = None
    if raw.get("baseline"):
        try:
            path = resolve_baseline(raw["baseline"])
            load_baseline(path)
        except ResultsError as exc:
            raise UsageError(f"--baseline: {exc}") from None
        baseline = str(path.absolute())
    elif gates or gate_config:
        raise UsageError("--gate / --gate-config need --baseline NAME|PATH to compare with")
    elif raw.get("confirm") is not None:
        raise UsageError("--confirm re-measures the cases --baseline judged regressed; without --baseline NAME|PATH "
                         "nothing is judged, so it would be ignored")
    return {"baseline": baseline, "gates": gates, "gate_config": gate_config}


# ------------------------------------------------------------------ the judging commands' own options
def slowdown_levels(text: Any, what: str) -> tuple[float, ...]:
    """gate-check's --levels: percentages of the median, each in (0, 1000), as fractions."""
    try:
        levels = tuple(float(x) / 100.0 for x in str(text).split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--{what} {text!r}: expected percentages like 5,10,20") from None
    if not levels or any(not 0 < lv < 10 for lv in levels):
        raise UsageError(f"--{what} {text!r}: each level must lie between 0 and 1000 percent")
    return levels


# (baseline, compare, gate, gate-check: parsed by the CLI's parser, harness.options.base.add_options)
JUDGING = GATING.only("gate", "gate_config", "allow_unjudged").narrowed(
    "gate", help="STAT:PERCENT, e.g. median:10% or p99:20% (repeatable; default median:10%)").narrowed(
    "gate_config", help="TOML file: gates, per-model overrides, confidence").narrowed(
    "allow_unjudged", help="exit 0 although a gated timing row was not judged (contended, too few samples or clean "
                           "pairs, a changed model); the last line still names them (default: exit 3)")
BASELINE_DIR = OptionGroup("baselines", "baselines", (
    OptionDef("dir", "baselines folder (default: $HARNESS_BASELINE_DIR or .harness/baselines)", "DIR"),
))
PRINT_JSON = OptionGroup("print", "output", (OptionDef("json", "print JSON", flag=True),))
BASELINE_SAVE = OptionGroup("baseline-save", "baseline save", (
    OptionDef("results", "results.json files (or the folders holding them), oldest first", positional=True,
              nargs="+"),
    OptionDef("name", "baseline name, e.g. main", required=True),
    OptionDef("allow-incomplete", "accept an interrupted run", flag=True),
    OptionDef("append", "add the runs after those NAME holds (a rolling baseline) instead of replacing it",
              flag=True),
    OptionDef("keep", "keep only the newest K runs (e.g. --append --keep 5)", "K", parse=integer),
))
COMPARE = OptionGroup("compare", "compare", (
    OptionDef("baseline", "a stored baseline name or a results.json path", "BASELINE", positional=True),
    OptionDef("current", "a results.json (or the folder holding it)", "CURRENT", positional=True),
    OptionDef("markdown", "also write the Markdown verdict table here", "FILE"),
    OptionDef("json-out", "also write the verdicts as JSON here (--json prints JSON in every other command)",
              "FILE", old=("--json",)),
    OptionDef("all", "print pass rows too", flag=True),
    OptionDef("verbose", "print the method paragraph, the gate's measured false-alarm rate and whole reasons",
              flag=True),
))
GATE_CHECK = OptionGroup("gate-check", "gate-check", (
    OptionDef("rounds", "simulated runs per case (A/A pairs; default 6)", "N", default="6",
              parse=int_at_least(2, 10_000, "each round is a whole run of the matrix")),
    OptionDef("levels", "injected slowdowns in percent of the median (default: 5,10,15,20,30)", "PERCENTS",
              default="5,10,15,20,30", parse=slowdown_levels),
    OptionDef("out", "write gatecheck.json and gatecheck.md into this folder", "DIR"),
    OptionDef("ab", "measure `harness ab` instead of compare: per case and round, the case A/B against itself "
                    "(false alarms) and with B slowed by each level (power), in one worker per round", flag=True),
    OptionDef("nightly", "measure `harness gate BASELINE` instead: per round, one whole gate run with nothing "
                         "changed (false alarms) and one per level with side B slowed (power); the baseline's cases, "
                         "filtered by --models/--runtimes only when given", "BASELINE"),
))


def injected(text: Any, what: str) -> float:
    """gate's --inject: a planted slowdown in percent of side B's p50, in [0, 1000)."""
    v = float_at_least(0.0)(text, what)
    if v >= 1000:
        raise UsageError(f"--{what} {v:g}: a percentage between 0 and 1000")
    return v


# `harness gate BASELINE`'s own (its run options: harness.commands.gate_config.GATE_GROUPS)
NIGHTLY_GATE = OptionGroup("gate", "the nightly gate", (
    OptionDef("baseline", "a stored baseline name (`harness baseline ls`) or a path", "BASELINE", positional=True),
    OptionDef("inject", "TESTING ONLY: slow side B by a busy wait of this percent of its p50 after each call (a "
                        "planted slowdown, to measure the gate's power); never for real figures", "PERCENT",
              default="0", parse=injected),
))
GATE_JUDGING = JUDGING.narrowed(
    "gate", help="for cases judged on the stored figures: STAT:PERCENT, e.g. median:10% (repeatable)").narrowed(
    "gate_config", help="for cases judged on the stored figures: gate TOML").narrowed(
    "allow_unjudged", help="exit 0 even when a gated row was not judged (contended, too few clean pairs, not "
                           "reproducible); they are still listed")
