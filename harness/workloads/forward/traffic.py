"""`harness run --traffic FILE [--rate R]`: after a case's timed loop, its activated runtime replays that traffic
open-loop (harness.traffic.replay, the replay `harness recommend` uses), its tails and send-time error kept."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.config import BatcherPolicy, RunConfig
from harness.data import make_feed
from harness.measure.contention import ContentionProbe
from harness.model import BATCH, ModelSpec
from harness.results.schema import CaseId, TrafficReplayRecord
from harness.runtimes import Runtime
from harness.traffic.replay import RealClock, latency_figures, replay
from harness.traffic.spec import Request, TrafficSpec, load_traffic

FEED_SEED = 0


@functools.lru_cache(maxsize=4)
def _traffic(path: str) -> TrafficSpec:
    """The traffic file, read once per worker process (it was checked when the options were parsed)."""
    return load_traffic(path)


class CaseServer:
    """Serves a replay's calls on the case's activated runtime: each call's dimensions from its requests (rows
    summed over a batch, the longest sequence), a dimension the traffic does not give taken from the case; a feed
    and a bound call per shape, made before the replay (never inside the timed schedule)."""

    def __init__(self, runtime: Runtime, spec: ModelSpec, case: CaseId, traffic: TrafficSpec,
                 batcher: BatcherPolicy | None) -> None:
        self.runtime, self.spec, self.case, self.traffic, self.batcher = runtime, spec, case, traffic, batcher
        self.case_dims = dict(case.dims)
        self.calls: dict[tuple[tuple[str, int], ...], Callable[[], object]] = {}
        self.per_shape = runtime.sets_up_per_shape()

    def request_dims(self, r: Request) -> dict[str, int]:
        return {d: int(r.dims.get(d, self.case_dims.get(d, 1))) for d in self.spec.symbolic_dims}

    def call_dims(self, requests: Sequence[Request]) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.spec.symbolic_dims:
            sizes = [self.request_dims(r)[d] for r in requests]
            out[d] = sum(sizes) if d == BATCH else max(sizes)
        return out

    def shapes(self, requests: Sequence[Request]) -> list[dict[str, int]]:
        """Every call shape the replay can make: each request's shape, and with a batcher every row count up to
        max_batch requests of the largest."""
        seen = {tuple(sorted(self.request_dims(r).items())) for r in requests}
        if self.batcher is None or BATCH not in self.spec.symbolic_dims:
            return [dict(k) for k in sorted(seen)]
        rows = max(dict(k).get(BATCH, 1) for k in seen) * self.batcher.max_batch
        others = {d: sorted({dict(k)[d] for k in seen}) for d in self.spec.symbolic_dims - {BATCH}}
        keys = sorted(others)
        return [{BATCH: b, **dict(zip(keys, rest, strict=True))}
                for b, *rest in itertools.product(range(1, rows + 1), *(others[k] for k in keys))]

    def prepare(self, requests: Sequence[Request]) -> None:
        for dims in self.shapes(requests):
            self.call(dims)

    def call(self, dims: Mapping[str, int]) -> None:
        key = tuple(sorted(dims.items()))
        fn = self.calls.get(key)
        if fn is None:
            feed = make_feed(self.spec, dict(dims), FEED_SEED)
            fn = functools.partial(self.runtime.infer, feed) if self.per_shape else self.runtime.bind(feed)
            self.calls[key] = fn
        fn()
        self.runtime.synchronize()

    def serve(self, requests: Sequence[Request]) -> None:
        self.call(self.call_dims(requests))

    def dims_note(self) -> str:
        """Where each dimension of a request came from: the traffic's [shapes] or trace, or the case."""
        parts = []
        for d in sorted(self.spec.symbolic_dims):
            if d in self.traffic.dims:
                parts.append(f"{d} from the traffic")
            else:
                parts.append(f"{d} {self.case_dims.get(d, 1)} (the case's)")
        return ", ".join(parts)


def replay_case(runtime: Runtime, spec: ModelSpec, case: CaseId, config: RunConfig, threads: int) -> Any:
    """The case's TrafficReplayRecord (None without --traffic): the traffic's schedule at --rate (default its own
    rate), served by the case's runtime through --batcher's batches, the replay's contention probed around it."""
    cfg = config.loadgen
    if not cfg.traffic_file:
        return None
    traffic = _traffic(cfg.traffic_file)
    rate = cfg.traffic_rate or traffic.natural_rate
    requests = traffic.schedule(rate=rate)
    server = CaseServer(runtime, spec, case, traffic, cfg.batcher)
    refused = _refusal(server, requests, spec, runtime, cfg.batcher, traffic)
    if refused:
        return TrafficReplayRecord(source=traffic.source, traffic=traffic.describe(), rate=float(rate), requests=0,
                                   dims=server.dims_note(), error=refused)
    server.prepare(requests)
    probe = ContentionProbe(threads, config.measure.contention_limit)
    probe.start()
    run = replay(requests, server.serve, RealClock(), cfg.batcher)
    contention = probe.stop()
    figures = latency_figures(run)
    finite = {k: v for k, v in figures.items() if v == v}  # NaN: no value (no send waited for, say)
    return TrafficReplayRecord(
        source=traffic.source, traffic=traffic.describe(), rate=float(rate), requests=run.requests,
        offered_rps=run.offered if run.offered != float("inf") else None,
        throughput_rps=run.throughput if run.throughput != float("inf") else None,
        latency_ms={k: v for k, v in finite.items() if not k.startswith("send_error")},
        send_error_ms={k.removeprefix("send_error_"): v for k, v in finite.items() if k.startswith("send_error")},
        calls=len(run.call_ns), mean_batch=run.requests / len(run.call_ns) if run.call_ns else None,
        batcher=cfg.batcher.describe() if cfg.batcher else None, dims=server.dims_note(),
        contended=bool(contention and contention.contended), contention_cause=contention.cause if contention else None,
        wall_s=run.wall_ns / 1e9, error=run.error)



def _refusal(server: CaseServer, requests: Sequence[Request], spec: ModelSpec, runtime: Runtime,
             batcher: BatcherPolicy | None, traffic: TrafficSpec) -> str | None:
    """Why this case cannot replay the traffic (said in its record; the case itself stands), else None: a
    dimension the model does not have, a batcher the model or runtime cannot serve (forward.batcher's rule), or
    a mix of shapes on a runtime that sets its model up per shape (each switch would set it up again inside the
    timed schedule)."""
    from harness.workloads.forward.batcher import batch_refusal

    extra = sorted(traffic.dims - spec.symbolic_dims)
    if extra:
        return (f"the traffic gives dimension(s) {', '.join(map(repr, extra))}, which model {spec.name!r} does not "
                f"have (its symbolic dimensions: {', '.join(sorted(spec.symbolic_dims)) or 'none'})")
    if batcher is not None:
        why = batch_refusal(spec, runtime)
        if why:
            return why
    if runtime.sets_up_per_shape() and len(server.shapes(requests)) > 1:
        return (f"{runtime.name} sets its model up per input shape: a traffic of {len(server.shapes(requests))} "
                "call shapes would set it up again inside the replay's schedule; replay a traffic of one shape")
    return None
