"""The open-loop replay: latency from each request's intended send time (no coordinated omission), the send-time
error recorded; one thread replays and serves on an injected clock, real or fake (docs/traffic.md)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from harness.config import BatcherPolicy
from harness.traffic.spec import Request

if TYPE_CHECKING:
    from harness.results.stored import BlockContention

SPIN_NS = 200_000  # the real clock sleeps until this close to the due time, then spins


class Clock(Protocol):
    def now(self) -> int: ...
    def sleep_until(self, t_ns: int) -> None: ...


class RealClock:
    def now(self) -> int:
        return time.perf_counter_ns()

    def sleep_until(self, t_ns: int) -> None:
        while True:
            left = t_ns - time.perf_counter_ns()
            if left <= 0:
                return
            if left > SPIN_NS:
                time.sleep((left - SPIN_NS) / 1e9)


class FakeClock:
    """Simulated nanoseconds: `sleep_until` jumps, `advance` is a call's cost."""

    def __init__(self, start: int = 0) -> None:
        self.t = int(start)

    def now(self) -> int:
        return self.t

    def sleep_until(self, t_ns: int) -> None:
        self.t = max(self.t, int(t_ns))

    def advance(self, ns: float) -> None:
        self.t += round(ns)


Server = Callable[[Sequence[Request]], object]  # one call serving these requests (a batch); returns when done


@dataclass
class ReplayRun:
    """One replay's raw figures (ns, per request in index order); statistics are derived from them."""

    intended_ns: np.ndarray
    latency_ns: np.ndarray  # completion - intended
    send_error_ns: np.ndarray  # wake - intended for requests the replay waited for; -1: came due during a call
    batch_sizes: list[int] = field(default_factory=list)  # requests per call
    call_ns: list[int] = field(default_factory=list)
    wall_ns: int = 0  # first intended send -> last completion
    error: str | None = None
    contention: BlockContention | None = None  # the replay's contention figures (harness.measure.contention)

    @property
    def contended(self) -> str | None:
        """The cause in words when the machine inflated this replay (its contention probe said so), else None."""
        c = self.contention
        return (c.cause or "contended") if c and c.contended else None

    @property
    def requests(self) -> int:
        return len(self.latency_ns)

    @property
    def throughput(self) -> float:
        """Completed requests/s over the replay."""
        return self.requests / (self.wall_ns / 1e9) if self.wall_ns > 0 else float("inf")

    @property
    def offered(self) -> float:
        span = (self.intended_ns[-1] - self.intended_ns[0]) / 1e9 if self.requests > 1 else 0.0
        return (self.requests - 1) / span if span > 0 else float("inf")

    def send_errors(self) -> np.ndarray:
        return self.send_error_ns[self.send_error_ns >= 0]


def replay(requests: Sequence[Request], server: Server, clock: Clock, policy: BatcherPolicy | None = None,
           lead_ns: int = 1_000_000) -> ReplayRun:
    """Replay `requests` (sorted by intended time) against `server`; with `policy` a dynamic batcher forms the
    calls (up to max_batch requests; a call goes when max_batch are queued or the oldest has waited max_wait),
    else each request is one call. A failing call ends the replay with its error (the figures so far kept)."""
    n = len(requests)
    max_batch = policy.max_batch if policy else 1
    max_wait = round(policy.max_wait_ms * 1e6) if policy else 0
    start = clock.now() + lead_ns
    due = np.fromiter((start + r.intended_ns for r in requests), dtype=np.int64, count=n)
    done = np.full(n, -1, dtype=np.int64)
    send_err = np.full(n, -1, dtype=np.int64)
    queue: deque[int] = deque()
    sizes: list[int] = []
    calls: list[int] = []
    nxt = 0
    error = None
    while nxt < n or queue:
        now = clock.now()
        if not queue and due[nxt] >= now:  # idle: wait for the next request
            clock.sleep_until(int(due[nxt]))
            now = clock.now()
            send_err[nxt] = now - due[nxt]
        while nxt < n and due[nxt] <= now:
            queue.append(nxt)
            nxt += 1
        if len(queue) < max_batch and nxt < n:  # the batcher waits for more, until the oldest's deadline
            deadline = due[queue[0]] + max_wait
            if now < deadline:
                wake = int(min(deadline, due[nxt]))
                clock.sleep_until(wake)
                now = clock.now()
                if nxt < n and due[nxt] <= now:
                    send_err[nxt] = now - due[nxt]
                continue
        take = [queue.popleft() for _ in range(min(max_batch, len(queue)))]
        t0 = clock.now()
        try:
            server([requests[i] for i in take])
        except Exception as exc:  # noqa: BLE001 - the replay ends with the error, its figures kept
            error = f"{type(exc).__name__}: {exc}"
            break
        t1 = clock.now()
        sizes.append(len(take))
        calls.append(t1 - t0)
        done[take] = t1
    served = done >= 0
    lat = (done - due)[served] if error else done - due
    wall = int(done[served].max() - due[0]) if served.any() else 0
    return ReplayRun(due[served] - start if error else due - start, lat, send_err[served] if error else send_err,
                     sizes, calls, wall, error)


def percentile(values: np.ndarray, p: float) -> float:
    """Nearest-rank percentile (the same rule as LoadGen and HdrHistogram: the smallest value with at least
    p% of the values at or below it)."""
    if len(values) == 0:
        return float("nan")
    s = np.sort(values)
    return float(s[min(len(s) - 1, max(0, int(np.ceil(len(s) * p / 100.0)) - 1))])


def latency_figures(run: ReplayRun, skip: float = 0.0) -> dict[str, float]:
    """p50/p90/p99/p99.9/max latency and p50/p99/max send-time error in ms, after the first `skip` fraction."""
    lat = run.latency_ns[int(len(run.latency_ns) * skip):]
    out = {f"p{p:g}": percentile(lat, p) / 1e6 for p in (50, 90, 99, 99.9)}
    out["max"] = float(lat.max()) / 1e6 if len(lat) else float("nan")
    err = run.send_errors()
    out.update({"send_error_p50": percentile(err, 50) / 1e6, "send_error_p99": percentile(err, 99) / 1e6,
                "send_error_max": float(err.max()) / 1e6 if len(err) else float("nan")})
    return {k: round(v, 6) for k, v in out.items()}
