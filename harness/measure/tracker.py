"""The one protocol of the measurements beside a timed loop: start, stop, a typed record (docs/extending.md#a-tracker);
BLOCK_TRACKERS lists those run around each timed block of a forward case."""

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
