"""The one protocol of the measurements that run beside a timed loop (docs/extending.md#a-tracker): start before,
stop after, a record out; never a thread inside the loop that competes with it.

Implemented by the memory sampler (harness.measure.memory: stop -> MemoryReport), the contention probe
(harness.measure.contention: stop -> the block's contention), the device timer (harness.measure.cuda: per call,
stop -> None, its elapsed_ns read after) and the energy tracker (harness.measure.energy: stop(calls) per block,
record() -> EnergyRecord). BLOCK_TRACKERS lists the trackers a forward case runs around each timed block: adding
one is a file in measure/ and a line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tracker(Protocol):
    def start(self) -> Any: ...

    def stop(self, *args: Any) -> Any: ...


@runtime_checkable
class BlockTracker(Tracker, Protocol):
    """A tracker around each timed block of a case: prepare() once before the first block, start()/stop(calls)
    around each block, record(batch) at the end -> the CaseResult field's typed record."""

    def prepare(self) -> Any: ...

    def stop(self, calls: int = 0) -> Any: ...

    def record(self, batch: int = 1) -> Any: ...


def _energy(device: str) -> Any:
    from harness.measure.energy import EnergyTracker

    return EnergyTracker.for_device(device)


# name -> factory(device of the runtime) of a tracker run around each timed block of a forward case; its
# record() lands in the CaseResult field of the same name
BLOCK_TRACKERS: dict[str, Callable[[str], BlockTracker]] = {
    "energy": _energy,
}
