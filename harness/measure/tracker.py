"""The measurements beside a case's timed loop, by registry (docs/extending.md#a-tracker): made for one case, entered
through one context stack around their scope (a case, or every block of every round), giving CaseResult fields."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Scope = Literal["case", "block"]


@dataclass
class Window:
    """A scope (a case, or one timed block) as its trackers see it.

    `on_timed(fn)` asks for `fn` when the timed part starts: for a block, after its warm-up, before the first
    clock read; for a case, before its first timed block. The workload sets `reused` (a case whose activation
    was the previous case's) after the activation and `calls` (every call of a block, warm-up ones too) before
    the block's scope is left. `records` holds what a tracker keeps per block (name -> record; the Block record
    has a field of that name, e.g. `contention`)."""

    batch: int = 1
    reused: bool = False
    calls: int = 0
    records: dict[str, Any] = field(default_factory=dict)
    _hooks: list[Callable[[], None]] = field(default_factory=list)

    def on_timed(self, fn: Callable[[], None], first: bool = False) -> None:
        self._hooks.insert(0, fn) if first else self._hooks.append(fn)

    def timing(self) -> None:
        """The timed part starts: every hook asked for, in order."""
        for fn in self._hooks:
            fn()


@runtime_checkable
class Tracker(Protocol):
    """One case's tracker: `track(window)` a context manager around each scope it is entered in (a block tracker
    is entered once per block, so it may sum over them); `fields(window)` afterwards, the CaseResult fields its
    records fill ({} when what it keeps is per block, in `window.records`)."""

    def track(self, window: Window) -> AbstractContextManager[Any]: ...

    def fields(self, window: Window) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TrackerContext:
    """What a tracker is made from: the case's device and batch, its runtime's memory sources ("nvml", "torch"),
    the case's threads and the run's contention limit."""

    device: str = "cpu"
    batch: int = 1
    memory_sources: frozenset[str] = frozenset()
    threads: int = 1
    contention_limit: float = 0.10


def _replace(old: Any, new: Any) -> Any:
    return new


@dataclass(frozen=True)
class TrackerKind:
    """A registry entry: the scope, the factory of one case's tracker, and `merge(old, new)`: how a field a later
    block's tracker filled joins the case's value of it (the parent merges the blocks of later rounds)."""

    scope: Scope
    make: Callable[[TrackerContext], Tracker]
    merge: Callable[[Any, Any], Any] = _replace


def _memory(ctx: TrackerContext) -> Tracker:
    from harness.measure.memory import MemoryTracker

    return MemoryTracker(gpu="nvml" in ctx.memory_sources, torch_allocator="torch" in ctx.memory_sources)


def _energy(ctx: TrackerContext) -> Tracker:
    from harness.measure.energy import EnergyTracker

    return EnergyTracker.for_device(ctx.device)


def _merge_energy(old: Any, new: Any) -> Any:
    from harness.measure.energy import merge_energy

    return merge_energy(old, new)


def _contention(ctx: TrackerContext) -> Tracker:
    from harness.measure.contention import ContentionTracker

    return ContentionTracker(ctx.threads, ctx.contention_limit)


# name -> the tracker of that name. Block trackers are entered in this order around each block and left in the
# reverse order: contention last in, first out (its probe reads the kernel right after the timed calls).
TRACKERS: dict[str, TrackerKind] = {}


def register_tracker(name: str, kind: TrackerKind) -> None:
    TRACKERS[name] = kind


register_tracker("memory", TrackerKind("case", _memory))
register_tracker("energy", TrackerKind("block", _energy, _merge_energy))
register_tracker("contention", TrackerKind("block", _contention))


def make_trackers(scope: Scope, ctx: TrackerContext) -> dict[str, Tracker]:
    """One case's trackers of `scope`, in the registry's order."""
    return {name: kind.make(ctx) for name, kind in TRACKERS.items() if kind.scope == scope}


@contextmanager
def tracking(trackers: Mapping[str, Tracker], window: Window) -> Iterator[Window]:
    """Every tracker entered around one scope through one context stack (left in the reverse order, also when
    the scope raises)."""
    with ExitStack() as stack:
        for tracker in trackers.values():
            stack.enter_context(tracker.track(window))
        yield window


def tracked_fields(trackers: Mapping[str, Tracker], window: Window) -> dict[str, dict[str, Any]]:
    """name -> the CaseResult fields that tracker fills, after its scopes."""
    return {name: t.fields(window) for name, t in trackers.items()}


def merge_tracked(current: Mapping[str, Any], tracked: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The fields of a case after a later block: each field a block's tracker filled (`tracked`, by tracker
    name), merged by its tracker's `merge` with the case's value (`current[field]`, None where it has none)."""
    out: dict[str, Any] = {}
    for name, fields in tracked.items():
        kind = TRACKERS.get(name)
        merge = kind.merge if kind is not None else _replace
        for key, value in fields.items():
            old = current.get(key)
            out[key] = value if old is None else merge(old, value)
    return out


def split_fields(fields: Mapping[str, Any], declared: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields CaseResult declares, the others): a tracker whose record has no field of its own yet lands in
    the case's `details` under its key (JSON-ready values), so a new tracker needs no schema change to start."""
    return ({k: v for k, v in fields.items() if k in declared},
            {k: v for k, v in fields.items() if k not in declared})
