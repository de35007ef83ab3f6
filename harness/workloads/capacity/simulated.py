"""A simulated FIFO server for checking the capacity search without timing: call times from a fixed distribution,
each activation with a bias of its own, replayed in closed form (docs/recommend.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.traffic.replay import ReplayRun
from harness.traffic.spec import TrafficSpec


@dataclass(frozen=True)
class ServiceModel:
    """A call's time: mean_ms x the activation's bias x a log-normal factor of coefficient of variation `cv` (mean
    1), plus, for a `hiccup` share of the calls, an exponential delay of mean `hiccup_ms` (a page fault, a
    preempted thread); each activation's bias is log-normal with sd `activation_sd`."""

    mean_ms: float
    cv: float = 0.1
    hiccup: float = 0.0
    hiccup_ms: float = 0.0
    activation_sd: float = 0.0

    def call_ns(self, n: int, bias: float, rng: np.random.Generator) -> np.ndarray:
        sigma = math.sqrt(math.log1p(self.cv ** 2))
        ms = self.mean_ms * bias * rng.lognormal(-sigma ** 2 / 2, sigma, n)
        if self.hiccup > 0:
            ms += np.where(rng.random(n) < self.hiccup, rng.exponential(self.hiccup_ms, n), 0.0)
        return np.maximum(1, np.round(ms * 1e6)).astype(np.int64)


def fifo_service(times: np.ndarray, call_ns: np.ndarray, wake_ns: np.ndarray | None = None) -> ReplayRun:
    """The replay of requests due at `times` (ns) on one server taking `call_ns` each, first come first served,
    in closed form (Lindley's recursion as prefix maxima, as harness.traffic.synthetic.fifo_arrays). `wake_ns`:
    each request's call starts no earlier than its due time plus this (the replay's late wake-up from an idle
    wait); latency is still counted from the due time. A request that finds the server busy is given it too (a
    slight overstatement: the real replay picks a queued request up at once)."""
    a = times.astype(np.int64)
    ready = a if wake_ns is None else a + np.asarray(wake_ns, dtype=np.int64)
    cs = np.cumsum(call_ns)
    done = cs + np.maximum.accumulate(ready - (cs - call_ns))
    idle = np.concatenate(([True], a[1:] >= done[:-1]))
    err = np.where(idle, ready - a, -1).astype(np.int64)
    return ReplayRun(a - a[0], done - a, err, [1] * len(a), call_ns.tolist(), int(done.max() - a[0]))


class SimulatedRuntime:
    """A configuration on the simulated server: `probe(rate, n, seed)` replays the traffic's schedule; the same
    (seed, activation) gives the same replay; `reactivate()` draws a new activation (its bias)."""

    def __init__(self, service: ServiceModel, traffic: TrafficSpec, seed: int = 0) -> None:
        self.service, self.traffic = service, traffic
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.activation = -1
        self.bias = 1.0
        self.reactivate()

    def reactivate(self) -> None:
        self.activation += 1
        sd = self.service.activation_sd
        self.bias = float(np.exp(self.rng.normal(0.0, sd))) if sd > 0 else 1.0

    def probe(self, rate: float, n: int, seed: int) -> ReplayRun:
        times, _ = self.traffic.arrays(rate, n, seed)
        rng = np.random.default_rng([seed, self.seed, self.activation])
        return fifo_service(times, self.service.call_ns(n, self.bias, rng))
