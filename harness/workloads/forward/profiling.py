"""--profile: a measured case's profiled pass (after its timed loop), its FLOPs and bytes, and its roofline point."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.profile.layers import CannotProfile, merge_profiles, profile_record
from harness.results.schema import CaseId
from harness.results.stats import median_ns
from harness.results.stored import CostRecord, ProfileRecord, RooflineRecord
from harness.runtimes import Runtime

PROFILE_TIME_S = 1.0  # the profiled runs last about this long (at the case's measured p50) ...
MIN_RUNS, MAX_RUNS = 5, 200  # ... within these counts
PASSES = 4  # profiled passes, each after as many unprofiled calls (at least MIN_RUNS runs per pass)
# A profiler writes an event per node per run, and reading them costs in proportion: the runs profiled in all
# are held to this many node executions (a 20,000-node graph gets 10 runs, not 200: its profile took longer
# than the case's time limit and the case lost its measured p50) ...
MAX_NODE_RUNS = 200_000
# ... and the profile to this share of --case-timeout (at most PROFILE_BUDGET_S): a pass that would end past it
# is not started, and the passes done are the profile, said so in its notes
PROFILE_BUDGET_SHARE, PROFILE_BUDGET_S = 0.25, 120.0


def profile_budget_s(case_timeout_s: float) -> float:
    """The time a case's profile may take: PROFILE_BUDGET_SHARE of its --case-timeout, at most PROFILE_BUDGET_S."""
    return min(PROFILE_BUDGET_S, PROFILE_BUDGET_SHARE * float(case_timeout_s))


def profile_runs(p50_ms: float, nodes: int | None = None) -> int:
    """How many inferences the profiled pass averages: about PROFILE_TIME_S at the measured p50, and no more than
    MAX_NODE_RUNS node executions of a graph of `nodes` nodes (at least one run)."""
    runs = MIN_RUNS if not p50_ms > 0 else max(MIN_RUNS, min(MAX_RUNS, math.ceil(PROFILE_TIME_S * 1e3 / p50_ms)))
    if nodes:
        runs = max(1, min(runs, MAX_NODE_RUNS // max(1, int(nodes))))
    return runs


class CaseProfiler:
    """Profiles cases one after another in a worker, keeping what later cases reuse: each graph's cost at each
    set of sizes and the machine's ceilings per thread count (measured once per machine, cached on disk)."""

    def __init__(self, ceilings: Callable[[int], Mapping[str, Any]] | None = None) -> None:
        self._costs: dict[tuple[str, tuple[tuple[str, int], ...]], Any] = {}
        self._ceilings: dict[int, Mapping[str, Any]] = {}
        self._measure_ceilings = ceilings

    def cost(self, graph: Path, dims: Mapping[str, int]) -> Any:
        from harness.profile.flops import graph_cost

        key = (str(graph), tuple(sorted(dims.items())))
        if key not in self._costs:
            self._costs[key] = graph_cost(graph, dims)
        return self._costs[key]

    def ceilings(self, threads: int) -> Mapping[str, Any]:
        if threads not in self._ceilings:
            if self._measure_ceilings is not None:
                self._ceilings[threads] = self._measure_ceilings(threads)
            else:
                from harness.profile.ceilings import machine_ceilings

                self._ceilings[threads] = machine_ceilings(threads)
        return self._ceilings[threads]

    def profile(self, runtime: Runtime, feed: Mapping[str, Any], case: CaseId, p50_ms: float, threads: int,
                dims: Mapping[str, int], budget_s: float = PROFILE_BUDGET_S,
                clock: Callable[[], float] = time.monotonic) -> ProfileRecord:
        """CaseResult.profile of a measured case: its cost (FLOPs and bytes of the graph at the case's sizes),
        its roofline point (the measured p50 under this machine's ceilings), and the per-layer times of the
        profiled runs (layers.profile_record; profile_runs() of them in up to PASSES passes, each after as many
        unprofiled calls, whose median is "adjacent_p50_ms"), or why there are none ("unsupported": the runtime
        has no profiler; "error": it failed). Never raises: profiling is a diagnosis, never the case's error.
        Bounded by the graph's size (profile_runs) and by `budget_s`: a pass the ones before say would end past
        it is not started."""
        t0 = clock()
        cost, source, summary = self._case_cost(runtime, feed, dims)
        roofline = self._roofline(cost, runtime, case, p50_ms, threads)
        nodes = len(cost.nodes) if cost is not None and getattr(cost, "nodes", None) is not None else None
        runs = profile_runs(p50_ms, nodes)
        passes = max(1, min(PASSES, runs // MIN_RUNS))
        adjacent_ns: list[int] = []
        profiles = []
        cut = ""
        try:
            for i in range(passes):  # unprofiled and profiled runs in alternating chunks: the same machine state
                elapsed = clock() - t0
                if profiles and elapsed + elapsed / len(profiles) > budget_s:
                    cut = (f"profile cut short: {len(profiles)} of {passes} passes in {elapsed:.1f} s, another would "
                           f"pass its {budget_s:g} s budget (a share of --case-timeout)")
                    break
                share = runs // passes + (1 if i < runs % passes else 0)
                adjacent_ns += unprofiled_ns(runtime, feed, share)
                profiles.append(runtime.profile(feed, share))
            prof = merge_profiles(profiles)
            notes = [cut] if cut else []
            if runs < profile_runs(p50_ms):
                notes.append(f"{runs} profiled run(s) of a {nodes:,}-node graph (at most {MAX_NODE_RUNS:,} node "
                             "executions are profiled: the profiler's events cost in proportion)")
            if notes:
                prof = dataclasses.replace(prof, notes=(*prof.notes, *notes))
            adjacent = median_ns(adjacent_ns) / 1e6
        except CannotProfile as exc:
            return ProfileRecord(cost=summary, unsupported=str(exc), measured_p50_ms=p50_ms, roofline=roofline)
        except Exception as exc:  # noqa: BLE001
            return ProfileRecord(cost=summary, error=f"{type(exc).__name__}: {exc}", measured_p50_ms=p50_ms,
                                 roofline=roofline)
        record = profile_record(prof, cost, p50_ms, roofline,
                                {n: sc for n, sc in source.scopes.items() if sc} if source is not None else None,
                                source.op_types if source is not None else None)
        # as many runs unprofiled, alternating with the profiled ones: the machine in the same state (a shared
        # machine's load moves between the timed loop and the profile; this gap is the profiler's and the mapping's)
        return dataclasses.replace(
            record, cost=summary, adjacent_p50_ms=adjacent,
            adjacent_gap_percent=100.0 * (record.total_ms - adjacent) / adjacent if adjacent > 0 else None)

    def _case_cost(self, runtime: Runtime, feed: Mapping[str, Any], dims: Mapping[str, int]
                   ) -> tuple[Any, Any, CostRecord]:
        """The cost of the runtime's graph at the case's sizes (None when it could not be had), its source graph
        (None likewise), and the profile's "cost" entry: the cost's summary, or the error."""
        cost = source = None
        try:
            graph = runtime.cost_graph()
            source = source_graph(graph)
            # every free dimension the feed gave a size (a --shape INPUT:AXIS=N has no name of its own)
            cost = self.cost(graph, {**feed_dims(graph, feed), **dims})
            # the summary's keys beyond the declared ones (not_counted, bytes_unknown, data_movement) kept as stored
            return cost, source, CostRecord.from_dict({**cost.summary(), "graph": str(graph)}, "the graph's cost")
        except Exception as exc:  # noqa: BLE001
            return cost, source, CostRecord(error=f"{type(exc).__name__}: {exc}")

    def _roofline(self, cost: Any, runtime: Runtime, case: CaseId, p50_ms: float, threads: int) -> RooflineRecord:
        from harness.profile.roofline import case_roofline

        if cost is None:
            return RooflineRecord(error="the graph's FLOPs and bytes are not known")
        if runtime.device != "cpu":
            return RooflineRecord(error=f"the ceilings measured are the CPU's; {runtime.device} ceilings are not "
                                        f"measured by this harness yet")
        try:
            ceilings = self.ceilings(threads)
            point = case_roofline(float(cost.flops), float(cost.bytes_moved), p50_ms / 1e3, ceilings,
                                  str(case.precision))
        except Exception as exc:  # noqa: BLE001 - a precision without a peak, a cost of 0 bytes
            return RooflineRecord(error=f"{type(exc).__name__}: {exc}")
        peak = max((e for e in ceilings.get("compute", ()) if e.get("precision") == str(case.precision)
                    and e.get("best") is not None), key=lambda e: e["best"], default={})
        return RooflineRecord(**point.to_dict(), precision=str(case.precision), threads=threads,
                              peak_method=peak.get("method") or peak.get("name"),
                              bandwidth_method=(ceilings.get("bandwidth") or {}).get("method"),
                              ceilings_warning=ceilings.get("warning"))


def source_graph(graph: Path) -> Any:
    """The graph's nodes as the profile maps them (layers.SourceGraph: op types, the module path the torch
    exporter recorded per node), for the per-layer table's names; None for a graph that cannot be read."""
    from harness.profile.layers import SourceGraph

    try:
        return SourceGraph.from_model(graph)
    except Exception:  # noqa: BLE001 - names are a convenience: the node names stay
        return None


def feed_dims(graph: Path, feed: Mapping[str, Any]) -> dict[str, int]:
    """Named free dimensions of the graph's inputs -> the size the case's feed gave them (a user's --shape
    INPUT:AXIS=N sizes an axis whose dim_param the cost needs by name, e.g. paddle2onnx's
    "p2o.DynamicDimension.1"); {} where the graph cannot be read."""
    import onnx

    try:
        model = onnx.load(str(graph), load_external_data=False)
    except Exception:  # noqa: BLE001
        return {}
    out: dict[str, int] = {}
    for i in model.graph.input:
        arr = feed.get(i.name)
        shape = getattr(arr, "shape", None)
        if shape is None or not i.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(i.type.tensor_type.shape.dim):
            if d.HasField("dim_param") and d.dim_param and axis < len(shape):
                out.setdefault(d.dim_param, int(shape[axis]))
    return out


def unprofiled_ns(runtime: Runtime, feed: Mapping[str, Any], runs: int) -> list[int]:
    """`runs` unprofiled calls of the case's bound inference (ns each), between the profiled passes; not part of
    the case's samples (its timed loop is over)."""
    import time

    call = runtime.bind(feed)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        call()
        runtime.synchronize()
        times.append(time.perf_counter_ns() - t0)
    return times


def case_dims(case: CaseId, shapes: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """The free dimensions a case's graph is costed at: its batch and sequence length and the run's --shape
    sizes given by dimension name (INPUT:AXIS ones are not dimension names)."""
    dims = {k: v for k, v in case.dims.items() if k != "gen"}
    dims.update({str(k): int(v) for k, v in shapes if ":" not in str(k)})
    return dims
