"""Other processes' share of the CPUs over an interval: the machine's busy time less this process tree's."""

from __future__ import annotations

import psutil


def _tree_cpu_s() -> float:
    """CPU seconds of this process and its descendants (the forkserver and its workers), reaped children
    included (their time is folded into their parent's children_* fields)."""
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _machine_cpu_s() -> tuple[float, float]:
    """(busy, all) CPU seconds of the machine since boot, over every CPU."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle, sum(t)


class OthersCpu:
    """Started at construction; `percent()` is the share of all CPUs that other processes used since then."""

    def __init__(self) -> None:
        self._busy0, self._all0 = _machine_cpu_s()
        self._own0 = _tree_cpu_s()

    def percent(self) -> float | None:
        busy, all_ = _machine_cpu_s()
        span = all_ - self._all0
        if span <= 0.05:  # too short to say (cpu_times has a 10 ms tick)
            return None
        others = (busy - self._busy0) - (_tree_cpu_s() - self._own0)
        return round(max(0.0, min(100.0, 100.0 * others / span)), 1)
