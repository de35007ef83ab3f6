"""The dynamic batcher before a runtime in LoadGen's Server and Offline scenarios (--batcher): queued samples
go out as one call of their batch size when max wait or the oldest waited max wait (docs/scenarios.md)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from harness.config import BatcherPolicy
from harness.model import BATCH, ModelSpec
from harness.results.schema import BatcherRun
from harness.runtimes.base import Runtime

STOP = object()  # put in the queue after LoadGen's test returned: the dispatcher ends


class Source(Protocol):
    """Where queued samples come from: a queue.SimpleQueue of (sample, arrival ns) pairs, then STOP."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


def batch_refusal(spec: ModelSpec, runtime: Any) -> str | None:
    """Why this case cannot be served through the batcher (its Server and Offline tests are skipped with this
    reason), or None."""
    fixed = spec.fixed_batch()
    if fixed is not None:
        return f"--batcher: {fixed[1]}: the model cannot take batches of other sizes"
    # A runtime that sets up per input shape (compiles, reshapes) keeps one shape's state at a time: the bound
    # calls of several batch sizes would run on the last one set up.
    if isinstance(runtime, Runtime) and runtime.sets_up_per_shape():
        return (f"--batcher: {runtime.name} sets its model up per input shape, so calls of several batch sizes "
                f"cannot alternate")
    return None


def batch_feeds(spec: ModelSpec, feed: Mapping[str, np.ndarray], max_batch: int) -> list[dict[str, np.ndarray]]:
    """The feeds of batch 1..max_batch (index n - 1): rows of the case's feed along each input's batch axis,
    repeated in order when the case has fewer rows; an input without a batch axis is passed as it is."""
    full: dict[str, tuple[np.ndarray, int | None]] = {}
    for t in spec.inputs:
        arr = np.asarray(feed[t.name])
        axis = t.shape.index(BATCH) if BATCH in t.shape else None
        if axis is None:
            full[t.name] = (arr, None)
            continue
        rows = np.arange(max_batch) % arr.shape[axis]
        full[t.name] = (np.ascontiguousarray(np.moveaxis(np.take(arr, rows, axis=axis), axis, 0)), axis)
    out = []
    for n in range(1, max_batch + 1):
        out.append({name: arr if axis is None else np.ascontiguousarray(np.moveaxis(arr[:n], 0, axis))
                    for name, (arr, axis) in full.items()})
    return out


class Batcher:
    """Serves queued samples in batches until STOP: `calls[n - 1]()` runs one inference of n samples,
    `synchronize` waits for the device, `complete(samples)` tells LoadGen those samples are done. `clock`
    returns nanoseconds (time.perf_counter_ns; a test passes a fake one with a fake source and fake calls)."""

    def __init__(self, policy: BatcherPolicy, calls: Sequence[Callable[[], object]],
                 synchronize: Callable[[], None], complete: Callable[[list[Any]], None],
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if len(calls) < policy.max_batch:
            raise ValueError(f"{len(calls)} bound calls for batches up to {policy.max_batch}")
        self.policy, self.calls, self.synchronize, self.complete, self.clock = (
            policy, calls, synchronize, complete, clock)
        self.max_wait_ns = round(policy.max_wait_ms * 1e6)
        self.reset()

    def reset(self) -> None:
        """Forget the previous test's figures."""
        self.sizes: list[int] = []  # samples per call, in order
        self.waits_ns: list[int] = []  # each sample's wait in the queue (arrival -> its call starts)
        self.call_ns: list[int] = []  # each call with its synchronisation
        self.full = 0
        self.error: str | None = None

    def serve(self, source: Source) -> None:
        """Dispatch until STOP. A sample that arrives while a call runs waits for the next batch; the oldest
        queued sample's arrival starts the max_wait clock, so one that queued during a call may go out at once."""
        limit = self.policy.max_batch
        while True:
            first = source.get()
            if first is STOP:
                return
            chunk = [first]
            deadline = first[1] + self.max_wait_ns
            stop = False
            while len(chunk) < limit:
                remaining = deadline - self.clock()
                try:
                    item = source.get(block=False) if remaining <= 0 else source.get(timeout=remaining / 1e9)
                except queue.Empty:
                    break
                if item is STOP:  # not expected: LoadGen returns only once every sample completed
                    stop = True
                    break
                chunk.append(item)
            self.dispatch(chunk)
            if stop:
                return

    def dispatch(self, chunk: list[tuple[Any, int]]) -> None:
        """One call of len(chunk) samples, then their completions (also after a failed call: LoadGen waits)."""
        n = len(chunk)
        start = self.clock()
        self.sizes.append(n)
        self.full += n == self.policy.max_batch
        self.waits_ns.extend(start - arrived for _, arrived in chunk)
        if self.error is None:
            try:
                self.calls[n - 1]()
                self.synchronize()
                self.call_ns.append(self.clock() - start)
            except Exception as exc:  # noqa: BLE001 - recorded; LoadGen still gets its completions
                self.error = f"{type(exc).__name__}: {exc}"
        self.complete([s for s, _ in chunk])

    def figures(self) -> BatcherRun:
        """This test's batches and queue waits as stored with its ScenarioRun."""
        hist = [0] * self.policy.max_batch
        for n in self.sizes:
            hist[n - 1] += 1
        return BatcherRun(self.policy.max_batch, self.policy.max_wait_ms, hist, wait_figures(self.waits_ns),
                          self.full)


def wait_figures(waits_ns: Sequence[int]) -> dict[str, float]:
    """p50, p90, p99, mean and max of the queue waits, in ms (nearest-rank percentiles; {} for none)."""
    if not waits_ns:
        return {}
    w = sorted(waits_ns)

    def rank(p: float) -> float:
        return w[min(len(w) - 1, max(0, int(-(-len(w) * p // 100)) - 1))] / 1e6

    out = {"p50": rank(50), "p90": rank(90), "p99": rank(99), "mean": sum(w) / len(w) / 1e6, "max": w[-1] / 1e6}
    return {k: round(max(0.0, v), 6) for k, v in out.items()}
