"""Run options as strings (`harness run --NAME`, pytest `--harness-NAME`) parsed into the typed RunConfig: one
module per concern, laid out like the rooms they configure; a workload's own groups under workloads/."""

from __future__ import annotations

from harness.options.accuracy import ACCURACY, tolerances
from harness.options.base import OldSpelling, OptionDef, OptionGroup, Parser, add_options, deprecated
from harness.options.build import BUILD
from harness.options.capacity import CAPACITY, RECOMMEND_GROUPS, SEARCH, parse_capacity_options
from harness.options.fleet import FLEET, placement_rules
from harness.options.gating import GATING
from harness.options.inputs import INPUTS, feeds_file, overrides
from harness.options.matrix import MODELS, RUNTIMES, available_runtimes, precisions
from harness.options.outputs import OUTPUTS, check_out_dir, history_db
from harness.options.parse import OPTION_NAMES, OPTIONS, RUN_GROUPS, parse_run_options
from harness.options.process import PROCESS, wheel_folder
from harness.options.qualify import SPEC_OPTIONS, spec_measure
from harness.options.timing import TIMING
from harness.options.values import (MAX_DIM, MAX_THREADS, at_least, choice, float_at_least, folder, fraction,
                                    int_at_least, names, pattern_list, positive_ints, slowdown, switch)
from harness.options.workload import WORKLOAD, owners, workload_name
from harness.options.workloads import WORKLOAD_GROUPS
from harness.options.workloads.ab import AB, AB_MAX_BLOCK_S, AB_MAX_PAIRS, ab_side
from harness.options.workloads.conform import CONFORMANCE, opset_bounds
from harness.options.workloads.forward import (FORWARD, MAX_BATCHER_BATCH, MAX_BATCHER_WAIT_MS, SCENARIOS,
                                               batcher_policy, scenario_names, variants)
from harness.options.workloads.generate import GENERATION

__all__ = [
    "AB", "AB_MAX_BLOCK_S", "AB_MAX_PAIRS", "ACCURACY", "BUILD", "CAPACITY", "CONFORMANCE", "FLEET", "FORWARD", "GATING",
    "GENERATION", "INPUTS", "MAX_BATCHER_BATCH", "MAX_BATCHER_WAIT_MS", "MAX_DIM", "MAX_THREADS", "MODELS",
    "OPTIONS", "OPTION_NAMES", "OUTPUTS", "OldSpelling", "PROCESS", "RECOMMEND_GROUPS", "RUNTIMES", "RUN_GROUPS",
    "SCENARIOS", "SEARCH", "SPEC_OPTIONS",
    "TIMING", "WORKLOAD", "WORKLOAD_GROUPS", "OptionDef", "OptionGroup", "Parser", "ab_side", "add_options",
    "at_least", "available_runtimes", "batcher_policy", "check_out_dir", "choice", "deprecated", "feeds_file",
    "float_at_least", "folder", "fraction", "history_db", "int_at_least", "names", "opset_bounds",
    "overrides", "owners", "parse_capacity_options", "parse_run_options", "pattern_list", "placement_rules", "positive_ints",
    "precisions", "scenario_names", "slowdown", "switch", "spec_measure", "tolerances", "variants",
    "wheel_folder", "workload_name",
]
