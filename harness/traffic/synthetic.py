"""A synthetic runtime with a known cost model on a fake clock (a + b x tokens, batching gain, padding penalty)
and M/D/1's analytic capacity, for tests and demonstrations (docs/recommend.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.traffic.replay import FakeClock, ReplayRun
from harness.traffic.spec import Request


@dataclass(frozen=True)
class CostModel:
    a_ms: float
    b_ms: float  # per token
    gain: float = 0.0
    pad: float = 1.0

    def call_ms(self, requests: Sequence[Request]) -> float:
        rows = [int(r.dims.get("batch", 1)) for r in requests]
        seqs = [int(r.dims.get("seq", 1)) for r in requests]
        longest = max(seqs)
        real = sum(n * s for n, s in zip(rows, seqs, strict=True))
        padded = sum(n * (longest - s) for n, s in zip(rows, seqs, strict=True))
        total_rows = sum(rows)
        per_token = self.b_ms * (1.0 - self.gain * (1.0 - 1.0 / total_rows))
        return self.a_ms + per_token * (real + self.pad * padded)


class SyntheticServer:
    """A server whose calls advance the fake clock by the cost model (no real work)."""

    def __init__(self, cost: CostModel, clock: FakeClock) -> None:
        self.cost, self.clock = cost, clock
        self.calls = 0

    def __call__(self, requests: Sequence[Request]) -> None:
        self.calls += 1
        self.clock.advance(self.cost.call_ms(requests) * 1e6)


def fifo_replay(requests: Sequence[Request], cost: CostModel) -> ReplayRun:
    """The replay of `requests` without a batcher on the synthetic server, computed in closed form (Lindley's
    recursion C_i = max(A_i, C_{i-1}) + s_i as prefix maxima): the same figures as `replay` on a FakeClock
    (tests check they agree), thousands of times faster for the search's statistical trials."""
    times = np.fromiter((r.intended_ns for r in requests), dtype=np.int64, count=len(requests))
    dims = {k: np.array([int(r.dims.get(k, 1)) for r in requests]) for k in ("batch", "seq")}
    return fifo_arrays(times, dims, cost)


def fifo_arrays(times: np.ndarray, dims: dict[str, np.ndarray], cost: CostModel) -> ReplayRun:
    """`fifo_replay` on a schedule's arrays (TrafficSpec.arrays)."""
    n = len(times)
    rows = np.asarray(dims.get("batch", np.ones(n)), dtype=float)
    seq = np.asarray(dims.get("seq", np.ones(n)), dtype=float)
    ms = cost.a_ms + cost.b_ms * (1.0 - cost.gain * (1.0 - 1.0 / rows)) * rows * seq
    s = np.round(ms * 1e6).astype(np.int64)
    a = times.astype(np.int64)
    cs = np.cumsum(s)
    done = cs + np.maximum.accumulate(a - (cs - s))
    idle = np.concatenate(([True], a[1:] >= done[:-1]))
    err = np.where(idle, 0, -1).astype(np.int64)
    return ReplayRun(a - a[0], done - a, err, [1] * n, s.tolist(), int(done.max() - a[0]))


def mdl_wait_cdf(t: float, lam: float, d: float) -> float:
    """P(queue wait <= t) in an M/D/1 queue (Erlang's formula), arrival rate lam, service time d (same units)."""
    import mpmath

    if t < 0:
        return 0.0
    rho = lam * d
    if rho >= 1:
        return 0.0
    with mpmath.workdps(60):
        total = mpmath.mpf(0)
        for k in range(math.floor(t / d) + 1):
            x = mpmath.mpf(lam) * (k * d - t)
            total += x ** k / mpmath.factorial(k) * mpmath.exp(-x)
        return float((1 - rho) * total)


def mdl_capacity(d_s: float, bound_s: float, percentile: float = 99.0) -> float:
    """The highest Poisson rate (1/s) at which the `percentile` of the M/D/1 sojourn time (wait + d) is within
    `bound_s`; 0 when d itself is over the bound."""
    if d_s > bound_s:
        return 0.0
    q = percentile / 100.0
    lo, hi = 0.0, 1.0 / d_s
    for _ in range(80):
        mid = (lo + hi) / 2
        if mdl_wait_cdf(bound_s - d_s, mid, d_s) >= q:
            lo = mid
        else:
            hi = mid
    return lo
