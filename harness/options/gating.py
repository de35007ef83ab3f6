"""Gating a run against a baseline as it finishes (harness.gating): the baseline, gates, confirmation."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import int_at_least, switch

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
