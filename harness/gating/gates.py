"""Gates parsed from short strings (`median:10%`, `p99:20%`) and per-model overrides from a TOML file."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.results.stored import read_toml

# Gate statistic -> the latency quantile it reads (latency: lower is better).
STATISTICS: dict[str, float] = {"median": 0.50, "p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
DEFAULT_GATES = ("median:10%",)
_GATE_RE = re.compile(r"^\s*([a-z0-9]+)\s*:\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Gate:
    """Fail when a latency `statistic` grows by more than `threshold` (a fraction: 0.10 = 10%)."""

    statistic: str  # median | p90 | p95 | p99
    threshold: float

    @property
    def quantile(self) -> float:
        return STATISTICS[self.statistic]

    @property
    def metric(self) -> str:
        """The metric name in verdict records, e.g. `latency_median`."""
        return f"latency_{self.statistic}"

    def __str__(self) -> str:
        return f"{self.statistic}:{self.threshold * 100:g}%"


def parse_gate(text: str) -> Gate:
    """`median:10%`, `p99:20%` or `p95:0.15` -> Gate. UsageError on anything else."""
    m = _GATE_RE.match(str(text))
    if not m:
        raise UsageError(f"--gate {text!r}: expected STATISTIC:PERCENT, e.g. median:10% or p99:20% "
                         f"(statistics: {', '.join(STATISTICS)})")
    stat, number, pct = m.group(1).lower(), float(m.group(2)), m.group(3)
    if stat not in STATISTICS:
        raise UsageError(f"--gate {text!r}: unknown statistic {stat!r}; valid: {', '.join(STATISTICS)}")
    if stat == "p50":
        stat = "median"
    if pct:
        threshold = number / 100.0
    elif number < 1.0:
        threshold = number
    else:
        raise UsageError(f"--gate {text!r}: write the threshold as a percentage ({number:g}%) or a fraction")
    if not 0.0 < threshold < 10.0:
        raise UsageError(f"--gate {text!r}: the threshold must be above 0% and below 1000%")
    return Gate(stat, threshold)


def parse_gates(texts: Iterable[str]) -> tuple[Gate, ...]:
    gates = tuple(dict.fromkeys(parse_gate(t) for t in texts))
    stats = [g.statistic for g in gates]
    dup = sorted({s for s in stats if stats.count(s) > 1})
    if dup:
        raise UsageError(f"--gate: {', '.join(dup)} given twice with different thresholds")
    return gates


@dataclass(frozen=True)
class GateConfig:
    """How a comparison decides. Frozen; built from `--gate` strings and an optional `--gate-config` file.

    - `gates`: latency gates for every model (default `median:10%`); `model_gates`: per-model replacements.
    - `confidence`: one-sided level of the bootstrap bound that must clear 1 + threshold/2 (default 0.99).
    - `resamples`, `seed`: bootstrap resamples per side (default 10,000) and the generator's seed.
    - `drift`: gate accuracy drift (a case over tolerance now, within it in the baseline -> regressed).
    - `strict_libraries`: runs whose library versions differ are not_comparable (default: compared, noted).
    - `run_sigma`: run-to-run spread of the gated statistic on this machine (sd of its log between runs, from
      `harness gate-check`), folded into the bootstrap bounds; 0 (default) trusts within-run variation only.
    - `case_sigma`: the same per case id (`[run_sigma_cases]` in the file, written by `gate-check --out`):
      microsecond cases on a shared VM move far more between runs than millisecond ones.
    """

    gates: tuple[Gate, ...] = field(default_factory=lambda: parse_gates(DEFAULT_GATES))
    model_gates: Mapping[str, tuple[Gate, ...]] = field(default_factory=dict)
    confidence: float = 0.99
    resamples: int = 10_000
    seed: int = 0
    drift: bool = True
    strict_libraries: bool = False
    run_sigma: float = 0.0
    case_sigma: Mapping[str, float] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)  # [gate_check]: what gate-check measured

    def __post_init__(self) -> None:
        if not 0.5 < self.confidence < 1.0:
            raise UsageError(f"gate confidence {self.confidence} must lie between 0.5 and 1 (e.g. 0.99)")
        if not 100 <= self.resamples <= 1_000_000:
            raise UsageError(f"gate resamples {self.resamples} must lie between 100 and 1,000,000")
        if not 0.0 <= self.run_sigma < 1.0:
            raise UsageError(f"gate run_sigma {self.run_sigma} must lie between 0 and 1 (e.g. 0.05)")
        for case, v in self.case_sigma.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise UsageError(f"run_sigma_cases: {case} = {v!r} must be a number between 0 and 1")

    def measured_line(self) -> str:
        """What `harness gate-check` measured for this gate (the `[gate_check]` table it writes), or how to
        measure it: shown with every verdict table so a reader knows how far to trust it."""
        m = self.measured
        if not m:
            return ("not measured on this machine: `harness gate-check --out DIR` measures its false-alarm rate "
                    "and power (pass DIR/gates-suggested.toml as --gate-config)")
        small = m.get("smallest_detected")
        power = m.get("power") or {}
        levels = ", ".join(f"{k}: {float(v):.0%}" for k, v in power.items())
        return (f"measured by `harness gate-check` on {m.get('machine', '?')} at {m.get('measured_at', '?')} "
                f"({m.get('cases', '?')} cases x {m.get('runs', '?')} runs of {m.get('repeats', '?')} blocks): "
                f"false alarms {m.get('false_alarms', '?')}/{m.get('trials', '?')} "
                f"= {float(m.get('false_alarm_rate', 0.0)):.1%} with its settings then; smallest slowdown detected "
                f"with 95% power: {'none of the levels' if small is None else f'{float(small):.0%}'}"
                + (f" (power {levels})" if levels else "") + _with_case_sigma(m))

    def sigma_for(self, case_id: str) -> float:
        """The run-to-run spread assumed for a case: its own measured value where given, at least run_sigma."""
        return max(self.run_sigma, float(self.case_sigma.get(case_id, 0.0)))

    def gates_for(self, model: str) -> tuple[Gate, ...]:
        return self.model_gates.get(model, self.gates)

    def describe(self) -> str:
        over = "; ".join(f"{m}: {', '.join(map(str, g))}" for m, g in sorted(self.model_gates.items()))
        text = f"gates {', '.join(map(str, self.gates))}"
        text += (f" (overrides: {over})" if over else "") + f", confidence {self.confidence:g}"
        return text + (f", run_sigma {self.run_sigma:g}" if self.run_sigma else "")

    def as_dict(self) -> dict[str, Any]:
        return {"gates": [str(g) for g in self.gates],
                "model_gates": {m: [str(g) for g in gs] for m, gs in self.model_gates.items()},
                "confidence": self.confidence, "resamples": self.resamples, "seed": self.seed,
                "drift": self.drift, "strict_libraries": self.strict_libraries, "run_sigma": self.run_sigma,
                "run_sigma_cases": dict(self.case_sigma), "gate_check": dict(self.measured)}


_FILE_KEYS = {"gates", "confidence", "resamples", "seed", "drift", "strict_libraries", "models", "run_sigma",
              "run_sigma_cases", "gate_check"}


def load_gate_config(path: str | Path | None = None, gates: Iterable[str] = ()) -> GateConfig:
    """GateConfig from a TOML file (optional) and `--gate` strings; `--gate` replaces the file's `gates`.

    File format::

        gates = ["median:10%", "p99:25%"]      # default gates
        confidence = 0.99
        run_sigma = 0.04                       # run-to-run spread measured by `harness gate-check`
        [run_sigma_cases]                      # per case id (gate-check --out writes gates-suggested.toml)
        "mlp-ort-cpu-fp32-b1" = 0.21
        [models.resnet18]
        gates = ["median:5%"]                  # replaces the default gates for this model
    """
    cli_gates = parse_gates(gates)
    if path is None:
        return GateConfig(gates=cli_gates) if cli_gates else GateConfig()
    doc = read_toml(Path(path), UsageError, "gate config")
    where = str(path)
    unknown = sorted(set(doc) - _FILE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FILE_KEYS))}")
    try:
        base = GateConfig()
        file_gates = _gate_list(doc["gates"], f"{where}: gates") if "gates" in doc else base.gates
        model_gates: dict[str, tuple[Gate, ...]] = {}
        models = doc.get("models", {})
        if not isinstance(models, dict):
            raise UsageError(f"{where}: [models] must be a table of model names")
        for name, table in models.items():
            if not isinstance(table, dict) or set(table) - {"gates"} or "gates" not in table:
                raise UsageError(f"{where}: [models.{name}] takes exactly one key, gates = [\"median:10%\", ...]")
            model_gates[name] = _gate_list(table["gates"], f"{where}: models.{name}.gates")
        cfg = replace(base, gates=cli_gates or file_gates, model_gates=model_gates,
                      confidence=_num(doc, "confidence", base.confidence, where),
                      resamples=int(_num(doc, "resamples", base.resamples, where)),
                      seed=int(_num(doc, "seed", base.seed, where)),
                      drift=_bool(doc, "drift", base.drift, where),
                      strict_libraries=_bool(doc, "strict_libraries", base.strict_libraries, where),
                      run_sigma=float(_num(doc, "run_sigma", base.run_sigma, where)),
                      case_sigma=_case_sigmas(doc.get("run_sigma_cases", {}), where),
                      measured=_measured(doc.get("gate_check", {}), where))
    except UsageError as exc:
        msg = str(exc)
        raise UsageError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    return cfg


def _with_case_sigma(m: Mapping[str, Any]) -> str:
    if "with_case_sigma_false_alarm_rate" not in m:
        return ""
    small = m.get("with_case_sigma_smallest_detected")
    return (f"; re-scored with the file's per-case spreads: false alarms "
            f"{float(m['with_case_sigma_false_alarm_rate']):.1%}, 95% power "
            f"{'at none of the levels' if small is None else f'at {float(small):.0%}'}")


_MEASURED_NUMBERS = ("cases", "runs", "repeats", "false_alarms", "trials", "false_alarm_rate", "smallest_detected",
                     "with_case_sigma_false_alarm_rate", "with_case_sigma_smallest_detected")


def _measured(table: Any, where: str) -> dict[str, Any]:
    """The `[gate_check]` table written by gate-check: numbers where numbers belong, `power` a table."""
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [gate_check] must be a table (gate-check --out writes it)")
    for key in _MEASURED_NUMBERS:
        if key in table:
            _num(table, key, 0.0, f"{where}: gate_check")
    power = table.get("power", {})
    if not isinstance(power, dict) or not all(_level(k) and isinstance(v, (int, float)) and not isinstance(v, bool)
                                              and 0 <= v <= 1 for k, v in power.items()):
        raise UsageError(f"{where}: gate_check.power must be a table of level = power (\"10%\" = 0.93: "
                         f"a slowdown level = a power between 0 and 1)")
    return dict(table)


def _level(key: str) -> bool:
    """A slowdown level as gate-check writes it ("10%"), or as a fraction ("0.1")."""
    try:
        level = float(key[:-1]) / 100 if key.endswith("%") else float(key)
    except ValueError:
        return False
    return 0 < level < 10


def _case_sigmas(table: Any, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [run_sigma_cases] must be a table of case ids = numbers")
    return {str(k): float(_num(table, k, 0.0, f"{where}: run_sigma_cases")) for k in table}


def _gate_list(value: Any, where: str) -> tuple[Gate, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where} must be a list of strings like [\"median:10%\"]")
    return parse_gates(value)


def _num(doc: Mapping[str, Any], key: str, default: float, where: str) -> float:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"{where}: {key} = {v!r} is not a number")
    if not math.isfinite(v):
        raise UsageError(f"{where}: {key} = {v!r} is not a finite number")
    return v


def _bool(doc: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    v = doc.get(key, default)
    if not isinstance(v, bool):
        raise UsageError(f"{where}: {key} = {v!r} is not true or false")
    return v
