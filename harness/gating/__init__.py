"""Regression gating (verdicts from raw samples, named baselines, gate self-check) and qualification specs."""

from harness.gating.baseline import baseline_dir, list_baselines, load_baseline, load_run, save_baseline
from harness.gating.compare import Comparison, VerdictRecord, compare_runs, compare_samples
from harness.gating.gates import Gate, GateConfig, load_gate_config, parse_gate
from harness.gating.verdicts import FAILING, Verdict

__all__ = ["FAILING", "Comparison", "Gate", "GateConfig", "Verdict", "VerdictRecord", "baseline_dir",
           "compare_runs", "compare_samples", "list_baselines", "load_baseline", "load_gate_config", "load_run",
           "parse_gate", "save_baseline"]
