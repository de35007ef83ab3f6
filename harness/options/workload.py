"""`--workload`: which workload a run drives (harness.workloads), and which option groups each one owns."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import choice


def workload_name(text: Any, what: str) -> str:
    from harness.workloads import workload_names

    return choice(workload_names(), "workloads")(text, what)


WORKLOAD = OptionGroup("workload", "workload", (
    OptionDef("workload", "what a case measures: forward (one forward pass per call, default), generate (greedy "
                          "generation with the KV cache of causal LMs: TTFT, per-token decode, tokens/s, token "
                          "agreement; docs/generation.md) or conform (ONNX backend operator cases on every runtime "
                          "that runs an ONNX model; docs/conformance.md)", "NAME", field="workload",
              parse=workload_name),
))


def owners(group: str) -> tuple[str, ...]:
    """The workloads that own option group `group` (Workload.option_groups); () for a group every workload shares."""
    from harness.workloads import get_workload, workload_names

    return tuple(n for n in workload_names() if group in get_workload(n).option_groups)


def check_workload_options(groups: Iterable[OptionGroup], given: Callable[[OptionDef], bool], workload: str) -> None:
    """A usage error naming the first option `given` (by the user, not a default) that belongs to a group owned by
    other workloads than `workload`: it would be ignored, so the run would not be the one asked for."""
    for g in groups:
        own = owners(g.name)
        if not own or workload in own:
            continue
        for o in g.options:
            if given(o):
                raise UsageError(f"--{o.name} is an option of --workload {' or '.join(own)}; --workload {workload} "
                                 "does not take it")
