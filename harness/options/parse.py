"""Raw option values (strings) of the composed groups -> the typed RunConfig (`parse_run_options`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config import RunConfig, section_of
from harness.errors import UsageError
from harness.measure.memory import default_case_memory_gb
from harness.measure.timer import TimingPolicy
from harness.options.accuracy import ACCURACY
from harness.options.base import OptionDef, OptionGroup
from harness.options.build import BUILD
from harness.options.fleet import FLEET
from harness.options.gating import GATING, gating_options
from harness.options.inputs import INPUTS, input_options
from harness.options.matrix import MODELS, RUNTIMES, models_option, runtimes_option
from harness.options.outputs import OUTPUTS, check_out_dir
from harness.options.process import PROCESS
from harness.options.timing import TIMING
from harness.options.workload import WORKLOAD, check_workload_options, workload_name
from harness.options.workloads import WORKLOAD_GROUPS
from harness.options.workloads.ab import AB
from harness.options.workloads.conform import CONFORMANCE
from harness.options.workloads.forward import FORWARD, SCENARIOS, check_settle
from harness.options.workloads.generate import GENERATION

# `harness run` and the pytest plugin: every group, the shared ones first, then the workloads' own
RUN_GROUPS: tuple[OptionGroup, ...] = (MODELS, RUNTIMES, WORKLOAD, TIMING, PROCESS, INPUTS, BUILD, ACCURACY,
                                       FORWARD, SCENARIOS, GENERATION, CONFORMANCE, AB, GATING, OUTPUTS, FLEET)
OPTIONS: tuple[OptionDef, ...] = tuple(o for g in RUN_GROUPS for o in g.options)
OPTION_NAMES = tuple(o.name for o in OPTIONS)


def _check_groups() -> None:
    """Every option sets RunConfig fields (routed to their sections) or is read by parse_run_options."""
    timing = {f.name for f in dataclasses.fields(TimingPolicy)}
    assert len(set(OPTION_NAMES)) == len(OPTION_NAMES), "an option in two groups"
    assert set(WORKLOAD_GROUPS) <= set(RUN_GROUPS), "a workload's option group that `harness run` lacks"
    for o in OPTIONS:
        for name in (o.field,) if o.field is not None else o.fields:
            top, _, sub = name.partition(".")
            if sub:
                assert top == "timing" and sub in timing, name
            elif top != "workload":
                section_of(top)  # TypeError for a field no section declares
        if o.field is not None or o.fields:
            assert o.parse is not None, o.name


_check_groups()


# ------------------------------------------------------------------ strings -> RunConfig
def parse_run_options(raw: Mapping[str, Any], groups: tuple[OptionGroup, ...] = RUN_GROUPS,
                      out_prefix: str = "", workload: str | None = None) -> RunConfig:
    """Parse raw option values (strings, None when not given; keys are OptionDef.dest) of the options in `groups`
    into a RunConfig; an option not given takes its group's default text (a command's own), else the workload's
    (Workload.option_defaults), else the RunConfig's.

    What the type cannot default is decided here: the run id and output folder (the clock; `out_prefix` names
    the default folder, e.g. "conform-"), the case memory cap (half this machine's memory), --model files
    (checked and registered to build the matrix) and the gating files (read once, so a bad one is a usage error);
    what differs by workload comes from the workload (its default models and runtimes, its sequence axis).
    `workload`: a command's own (`harness conform`); where the user picks it (--workload), an option of a group
    another workload owns is a usage error."""
    from harness.plugins import load_plugins
    from harness.workloads import get_workload

    load_plugins()  # the zoo and plugin models/runtimes, before any name is resolved
    present = {o.dest: o for g in groups for o in g.options}
    user_picks = "workload" in present  # --workload: the user chose the workload, and so its options
    if user_picks:
        workload = workload or workload_name(raw.get("workload") or "forward", "workload")
    chosen = get_workload(workload or "forward")
    if user_picks:
        check_workload_options(groups, lambda o: raw.get(o.dest) not in (None, False), chosen.name)
        if str(raw.get("repeats") or 1).strip() != "1" and not chosen.measures_in_blocks:
            raise UsageError(f"--repeats measures each case in several blocks; --workload {chosen.name} measures a "
                             "case in one")
    # an option not given takes the command's default text, else the workload's (Workload.option_defaults)
    defaults = {d: chosen.option_defaults[d] for d in present if d in chosen.option_defaults}
    defaults.update({d: o.default for d, o in present.items() if o.default is not None})
    raw = {**{d: text for d, text in defaults.items() if raw.get(d) in (None, False)},
           **{k: v for k, v in raw.items() if k in present and v not in (None, False)}}
    quick = bool(raw.get("quick"))
    values, timing = _field_values(present, raw, quick)
    models, user_paths, shapes = models_option(raw, quick, chosen) if "models" in present else ((), (), ())
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(raw["out"]) if raw.get("out") else Path("reports") / f"{out_prefix}{run_id}"
    check_out_dir(out_dir)
    values.setdefault("case_memory_gb", default_case_memory_gb())
    check_settle(values)
    axis = chosen.sequence_field
    axis_given = any(raw.get(o.dest) for o in present.values() if o.field == axis)
    values.update(input_options(values, models, (axis, axis_given)))
    if "gate" in present:
        values.update(gating_options(raw))
    return RunConfig.build(chosen.name, models=models, runtimes=runtimes_option(raw, quick, chosen), out_dir=out_dir,
                           run_id=run_id, timing=TimingPolicy(**timing), user_models=user_paths, shapes=shapes,
                           **values)


def _field_values(present: Mapping[str, OptionDef], raw: Mapping[str, Any],
                  quick: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The given options (with --quick, an option's quick text where it was not given) parsed into RunConfig
    fields, and into TimingPolicy fields for a "timing.X" field; options of no field (and --workload) left out."""
    values: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    for o in present.values():
        if (o.field is None and not o.fields) or o.dest == "workload":
            continue
        text = raw.get(o.dest)
        given = bool(text) if o.flag else text is not None and (text != "" or o.bare is not None)
        if not given and quick and o.quick is not None:
            text, given = o.quick, True
        if given:
            parsed = o.parse(text, o.name)  # type: ignore[misc]
            if o.fields:
                values.update(zip(o.fields, parsed))
                continue
            top, _, sub = o.field.partition(".")  # type: ignore[union-attr]
            (timing if sub else values)[sub or top] = parsed
    return values, timing
