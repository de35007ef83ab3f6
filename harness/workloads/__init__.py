"""Workloads: one Workload per kind of work (forward matrix, generation, conformance), one registry line each."""

from __future__ import annotations

from harness.errors import UsageError
from harness.workloads.base import Workload, WorkerState

_WORKLOADS: dict[str, Workload] = {}


def register_workload(workload: Workload) -> Workload:
    _WORKLOADS[workload.name] = workload
    return workload


def get_workload(name: str) -> Workload:
    try:
        return _WORKLOADS[name]
    except KeyError:
        raise UsageError(f"unknown workload {name!r}; valid workloads: {', '.join(_WORKLOADS)}") from None


def workload_names() -> tuple[str, ...]:
    return tuple(_WORKLOADS)


# ------------------------------------------------------------------ built-in workloads, one line each
from harness.workloads.forward.workload import FORWARD  # noqa: E402
from harness.workloads.generate.workload import GENERATE  # noqa: E402
from harness.workloads.conform.workload import CONFORM  # noqa: E402
from harness.workloads.ab.workload import AB  # noqa: E402
from harness.workloads.gate.workload import GATE  # noqa: E402

register_workload(FORWARD)
register_workload(GENERATE)
register_workload(CONFORM)
register_workload(AB)
register_workload(GATE)

__all__ = ["Workload", "WorkerState", "get_workload", "register_workload", "workload_names"]
