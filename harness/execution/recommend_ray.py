"""`harness recommend --ray`: each configuration's search whole on one node of one hardware class through run_shards,
the last rung and the A/B on one node; lost nodes, signals and --resume as the local command's (docs/fleet.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import math
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.execution.ray_shards import (Node, Shard, ShardRun, cluster_nodes, connect, probe_address,
                                          required_resource, run_shards)
from harness.gating.verdicts import EXIT_CLEAN, EXIT_UNJUDGED
from harness.results.schema import CaseId, CaseResult
from harness.workloads.capacity.recommend import (RUNGS, AbConfirmation, Candidate, Constraints, Evaluated, Search,
                                                  SearchKey, SearchSettings, coarse_settings, contenders, decided,
                                                  picked, promoted)
from harness.workloads.capacity.search import Capacity

AB_ROW = "ab"  # the variant of the A/B's row in the final shard (one pseudo case beside the finalists)


def majority_class(nodes: Sequence[Node], classes: Mapping[str, str]) -> tuple[str | None, list[Node], list[str]]:
    """(the hardware class the search runs on, its nodes, one line per other node and why it is not used). The class
    of most nodes; a tie goes to the class with more CPUs in all, then to the first fingerprint in sorted order (a
    rule every run applies alike). A node that did not say its class is not used."""
    answered = [n for n in nodes if classes.get(n.node_id)]
    count = Counter(classes[n.node_id] for n in answered)
    cpus = Counter()
    for n in answered:
        cpus[classes[n.node_id]] += n.resources.get("CPU", 0)
    wanted = min(count, key=lambda k: (-count[k], -cpus[k], k)) if count else None
    used, left_out = [], []
    for n in nodes:
        got = classes.get(n.node_id, "")
        if not got:
            left_out.append(f"{n.label}: not used: it did not say its hardware class")
        elif got != wanted:
            left_out.append(f"{n.label}: not used: hardware class {got}, not {wanted}, the class of {count[wanted]} "
                            f"of the {len(nodes)} node(s) (capacities are compared only within one hardware class)")
        else:
            used.append(n)
    return wanted, used, left_out


def config_case(model: str, ref: Any) -> CaseId:
    """A configuration as the row of a node's run (OUT/STAGE/NODE/results.json): its id names every axis."""
    from harness.runtimes import get_runtime

    b = ref.batcher.describe() if ref.batcher else "none"
    return CaseId(model, ref.runtime, ref.precision, 1, None, get_runtime(ref.runtime).device,
                  variant=f"{ref.variant} threads={ref.threads} batcher={b}")


def place(cases: Sequence[tuple[CaseId, str]], nodes: Sequence[Node], rules: Sequence[tuple[str, str]],
          ) -> tuple[list[Shard], dict[CaseId, str]]:
    """Each configuration (case, runtime) on the least-loaded node that has the resource its runtime needs (never
    split: its whole search runs there); (the shards, case -> why no node can take it)."""
    shards = [Shard(n) for n in nodes]
    unplaced = {}
    for case, runtime in cases:
        need = required_resource(runtime, rules)
        fit = [s for s in shards if s.node.resources.get(need, 0) > 0]
        if not fit:
            unplaced[case] = f"no node of the hardware class has the resource {need!r} that runtime {runtime} needs " \
                             "(--placement)"
            continue
        min(fit, key=lambda s: len(s.cases)).cases.append(case)
    return [s for s in shards if s.cases], unplaced


@dataclass
class RecommendShard:
    """What a node runs of `harness recommend --ray` (harness.execution.ray_shards.ShardWork). Stage "search": each
    of its configurations set up in a worker of its own, measured (drift, memory), and searched whole on this node
    with `settings` (rung `rung`); a row each as it finishes. Stage "final": the finalists searched side by side
    with the full settings (the halving's last rung, or the grid's contenders), then the interleaved A/B of the
    two highest against each other, all on this node; a row per finalist, then the A/B's row. `done`: the searches
    of its configurations that the stopped run being resumed settled (taken, not measured again, as the local
    command's --resume takes them; the A/B is always run)."""

    model_ref: str
    traffic_source: str
    traffic: Any  # the TrafficSpec as the driver loaded it (a user model's named axes still in it)
    names: dict[str, str]  # case id -> configuration name
    stage: str  # search | final
    settings: SearchSettings
    seed: int
    rung: int
    label: str
    constraints: Constraints
    exhaustive: bool = False
    activations: int = 1
    ab_pairs: int = 8
    done: dict[SearchKey, Capacity] = field(default_factory=dict)

    def __call__(self, session: Any, cases: Sequence[CaseId]) -> Iterator[CaseResult]:
        from harness.execution.recommend_run import _candidates, _model
        from harness.execution.supervisor import stop_forkserver
        from harness.plugins import load_plugins
        from harness.workloads.capacity.recommend import _search, confirm, final_rung

        load_plugins()  # the models and runtimes resolve in this process too (the CLI loaded them on the driver)
        spec, user_model, traffic = _model(self.model_ref, self.traffic_source, self.traffic)
        config = session.config
        mine = [c for c in cases if c.id in self.names]
        runtimes = sorted({c.runtime for c in mine})
        config = config.replace(runtimes=tuple(runtimes)) if runtimes else config
        config.outputs.scratch_dir.mkdir(parents=True, exist_ok=True)
        made, close = _candidates(config, spec, traffic, user_model)
        by_name = {c.name: c for c in made}
        log = lambda line: print(f"  {line}", flush=True)  # noqa: E731 - the node's own log
        try:
            evaluated = {c.id: self._measured(by_name.get(self.names[c.id]), self.names[c.id]) for c in mine}
            if self.stage == "search":
                for case in mine:
                    e = evaluated[case.id]
                    if e.refusal is None:
                        _search(e, self.settings, self.seed, self.rung, self.done, log, self.label)
                    yield session.record(self.row(case, e))
                return
            alive = [evaluated[c.id] for c in mine if evaluated[c.id].refusal is None]
            if self.exhaustive:
                from harness.workloads.capacity.recommend import _side_by_side

                _side_by_side(alive, self.settings, self.seed + 1, 1, self.done, log, "contenders, side by side",
                              lambda: None, self.activations)
            else:
                final_rung(alive, self.settings, self.seed, False, self.done, log, lambda: None, self.activations)
            for case in mine:
                yield session.record(self.row(case, evaluated[case.id]))
            chosen, runner = picked(list(evaluated.values()))
            ab = confirm(chosen, runner, self.seed, self.ab_pairs) if chosen and runner else None
            ab_case = next(c for c in cases if c.id not in self.names)
            yield session.record(CaseResult(
                ab_case, "skipped", reason=f"the A/B: {ab.text}" if ab else "no A/B: fewer than two hold the SLO",
                details={"recommend_ab": ab.to_json() if ab else None, "chosen": chosen.name if chosen else None,
                         "runner_up": runner.name if runner else None}))
        finally:
            close()
            stop_forkserver()
            shutil.rmtree(config.outputs.scratch_dir, ignore_errors=True)

    def _measured(self, candidate: Candidate | None, name: str) -> Evaluated:
        if candidate is None:
            return Evaluated(Candidate(name, {}, _nothing), f"not a configuration this node knows ({name})")
        m = candidate.measure() if hasattr(candidate, "measure") else candidate
        return Evaluated(m, self.constraints.refusal(m))

    def row(self, case: CaseId, e: Evaluated) -> CaseResult:
        cap = e.capacity
        text = (f"{self.label}: {e.name}: left out: {e.refusal}" if e.refusal else
                f"{self.label}: {e.name}: capacity {cap.estimate:.4g} requests/s [{cap.low:.4g}, {cap.high:.4g}]"
                if cap else f"{self.label}: {e.name}: no capacity")
        # not a timed case of the matrix (no latency samples): a record of the node's run, its search under details
        return CaseResult(case, "skipped", reason=text, details={"recommend": e.to_json()})


def _nothing(rate: float, n: int, seed: int) -> Any:
    raise RuntimeError("searched on its node, not here")


def merge(e: Evaluated, d: Mapping[str, Any], done: Mapping[SearchKey, Capacity] | None = None) -> None:
    """A node's record of one configuration (Evaluated.to_json) into the driver's: its drift, memory, environment
    and refusal as measured there, its searches appended (one found in `done`, the resumed run's, counted as
    resumed: the node took it from there), its capacity the latest."""
    from harness.results.stored import EnvironmentRecord

    env = d.get("environment")
    e.candidate = dataclasses.replace(e.candidate, drift=d.get("drift"), memory_mb=d.get("memory_mb"),
                                      environment=EnvironmentRecord.from_dict(env, "a node's configuration")
                                      if env else None)
    e.refusal = d.get("refusal")
    for s in d.get("searches") or ():
        key = (e.name, int(s["rung"]), int(s["seed"]), SearchSettings(**s["settings"]))
        e.history.append(Search(key[1], key[2], key[3], Capacity.from_json(s["capacity"]), resumed=key in (done or {})))
    if d.get("capacity"):
        e.capacity, e.rung = Capacity.from_json(d["capacity"]), int(d["rung"])


def ab_from_json(d: Mapping[str, Any]) -> AbConfirmation:
    return AbConfirmation(**{**d, "p99_a_ms": tuple(d["p99_a_ms"]), "p99_b_ms": tuple(d["p99_b_ms"])})


class ClusterSearch:
    """The driver's side: the configurations, where each was last searched, and what the lost nodes cost. `done`:
    the searches a stopped run settled (--resume), handed to the nodes that search those configurations again;
    `saved()`: called after every row that comes back (the command rewrites recommend.json); `held()`: a context in
    which a signal waits (the driver merging a stage's rows: never half of one merged)."""

    def __init__(self, config: RunConfig, spec: Any, traffic: Any, used: list[Node],
                 note: Callable[[str], None], done: Mapping[SearchKey, Capacity] | None = None,
                 saved: Callable[[], None] = lambda: None,
                 held: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext) -> None:
        from harness.workloads.capacity.live import ConfigRef, batcher_spelling

        cap, matrix = config.capacity, config.matrix
        self.config, self.used, self.note = config, used, note
        self.done, self.saved, self.held = dict(done or {}), saved, held
        self.flight: list[ShardRun] = []  # the stage under way: its shards' runs as their rows arrive
        self.flight_names: dict[str, str] = {}  # its case ids -> configuration names
        self.flight_label = ""
        self.constraints = Constraints(cap.slo_ms, cap.slo_percentile, cap.drift_limit, cap.memory_cap_mb)
        self.full = SearchSettings(cap.slo_ms, cap.slo_percentile, cap.search_tolerance, cap.probes,
                                   cap.probe_requests, cap.probe_max_requests)
        self.evaluated: list[Evaluated] = []
        self.case: dict[str, CaseId] = {}  # configuration name -> its row's case
        self.runtime: dict[str, str] = {}
        for rname, prec, vname, nthreads, bname in itertools.product(
                matrix.runtimes, [str(p) for p in matrix.precisions], [v or "base" for v in matrix.variants],
                cap.thread_counts, cap.batchers):
            ref = ConfigRef(spec.name, None, rname, prec, vname, nthreads, batcher_spelling(bname), traffic, "", 0.0)
            self.evaluated.append(Evaluated(Candidate(ref.name, ref.axes, _nothing)))
            self.case[ref.name] = config_case(spec.name, ref)
            self.runtime[ref.name] = rname
        self.node: dict[str, str] = {}  # configuration name -> the node of its last search
        self.lost: dict[str, str] = {}
        self.ab: AbConfirmation | None = None
        self.ab_names: tuple[str | None, str | None] = (None, None)
        self.ab_node: str | None = None
        self.final_node: str | None = None

    def get(self, name: str) -> Evaluated:
        return next(e for e in self.evaluated if e.name == name)

    def stage(self, group: Sequence[Evaluated], shard_work: Callable[..., RecommendShard], folder: str,
              final: bool = False) -> None:
        """`group`'s configurations run through run_shards: spread over the class's nodes (a search stage), or all
        on one node (the final stage: the last rung side by side and the A/B); each row merged as it came back,
        a lost node's configurations said and kept in `lost`."""
        cases = [(self.case[e.name], self.runtime[e.name]) for e in group]
        alive = {n.node_id for n in cluster_nodes()}
        nodes = [n for n in self.used if n.node_id in alive]
        if final:
            needs = {required_resource(r, self.config.fleet.placement) for _c, r in cases}
            fit = [n for n in nodes if all(n.resources.get(k, 0) > 0 for k in needs)]
            if not fit:
                why = (f"not searched in the last rung: no live node of the hardware class has every resource the "
                       f"finalists need ({', '.join(sorted(needs))}), and an A/B never spans two machines")
                for e in group:
                    self._lose(e, why)
                return
            nodes = fit[:1]
            self.final_node = nodes[0].label
        shards, unplaced = place(cases, nodes, self.config.fleet.placement)
        for case, why in unplaced.items():
            e = self.get(self._name(case))
            e.refusal = why
            self.note(f"  {e.name}: left out: {why}")
        if final and shards:
            shards[0].cases.append(dataclasses.replace(cases[0][0], runtime="recommend", variant=AB_ROW))
        names = {self.case[e.name].id: e.name for e in group}
        work = shard_work(names)
        what = "the last rung side by side and the A/B on one node" if final else "each searched whole on one node"
        self.note(f"ray: {work.label}: {len(group)} configuration(s) over {len(shards)} of {len(self.used)} node(s), "
                  f"{what}: " + ", ".join(f"{s.node.label} {len(s.cases) - (1 if final else 0)}" for s in shards))
        config = self.config.replace(out_dir=self.config.outputs.out_dir / folder)
        ids = {c.id for s in shards for c in s.cases}

        def said(line: str) -> None:  # a node's row: "[NODE] STAGE: CONFIGURATION: capacity ..." (not "skipped ID")
            head, sep, rest = line.partition("] skipped ")
            cid, _, reason = rest.partition("  ")
            self.note(f"{head}] {reason}" if sep and cid in ids else line)
            if sep and cid in ids:
                self.saved()  # what came back is in recommend.json at once, as the local command's every search

        self.flight, self.flight_names, self.flight_label = [], names, work.label
        runs = run_shards(config, shards, said, work=work, node_defaults=[], before=self.flight.append)
        with self.held():  # a signal now waits until every row of the stage is merged (then it stops the run)
            self.flight = []
            for sr in runs:
                self._merge_rows(sr, names, work.label)
        self.saved()

    def _merge_rows(self, sr: ShardRun, names: Mapping[str, str], label: str) -> None:
        at = sr.shard.node.label
        for row in sr.run.cases:
            if row.case.variant == AB_ROW and row.case.runtime == "recommend":
                self._ab_row(row, at)
                continue
            name = names.get(row.case.id)
            if name is None:
                continue
            e = self.get(name)
            if row.status == "crashed" and row.phase == "shard":  # its node lost before the row came back
                self._lose(e, f"not searched ({label}): node lost: {row.reason}")
                continue
            merge(e, (row.details or {}).get("recommend") or {}, self.done)
            self.node[name] = at

    def candidates_json(self, stopped: str | None = None) -> list[dict[str, Any]]:
        """Every configuration as recommend.json holds it now: what the finished stages merged, with the rows of the
        stage under way that came back (merged into copies: the driver's own records take them once the stage
        ends), each naming its node; a lost one's `not_searched`, and with `stopped` (the signal's name) one whose
        search in the stage under way had not come back: not searched, interrupted."""
        arrived: dict[str, tuple[CaseResult, str]] = {}
        for sr in list(self.flight):
            for row in list(sr.run.cases):
                name = self.flight_names.get(row.case.id)
                if name is not None:
                    arrived[name] = (row, sr.shard.node.label)
        out = []
        for e in self.evaluated:
            node, lost = self.node.get(e.name), self.lost.get(e.name)
            if e.name in arrived and lost is None:
                row, at = arrived[e.name]
                if row.status == "crashed" and row.phase == "shard":
                    lost = f"not searched ({self.flight_label}): node lost: {row.reason}"
                else:
                    e = dataclasses.replace(e, history=list(e.history))
                    merge(e, (row.details or {}).get("recommend") or {}, self.done)
                    node = at
            elif stopped and lost is None and e.name in self.flight_names.values():
                lost = f"not searched ({self.flight_label}): interrupted by {stopped} before its search came back"
            d = {**e.to_json(), "node": node}
            if lost:
                d["not_searched"] = lost
            out.append(d)
        return out

    def _ab_row(self, row: CaseResult, label: str) -> None:
        details = row.details or {}
        if row.status == "crashed":
            self.ab_names = ("lost", row.reason or "")
            return
        self.ab = ab_from_json(details["recommend_ab"]) if details.get("recommend_ab") else None
        self.ab_names = (details.get("chosen"), details.get("runner_up"))
        self.ab_node = label

    def _name(self, case: CaseId) -> str:
        return next(n for n, c in self.case.items() if c == case)

    def _lose(self, e: Evaluated, why: str) -> None:
        """`e` not searched in this stage: said, kept in `lost`, never promoted again; its earlier searches stay
        (the recommendation judges whether they rule it out: Recommendation.could_have_won)."""
        self.lost[e.name] = why
        self.note(f"  {e.name}: {why}")

    def run(self, seed: int, exhaustive: bool, activations: int, ab_pairs: int, shard: Callable[..., RecommendShard]
            ) -> Any:
        """The halving (or the grid) as `recommend` runs it on one machine, its rungs spread over the nodes, then
        the last rung and the A/B on one node; the recommendation judged on what finished."""
        full = self.full
        alive = [e for e in self.evaluated if e.refusal is None]
        if exhaustive:
            self.stage(alive, lambda names: shard(names, "search", full, seed, 0, "grid"), "grid")
            finalists = contenders([e for e in self.evaluated if e.capacity is not None and e.refusal is None
                                    and e.name not in self.lost])
        else:
            for rung in range(len(RUNGS)):
                if len(alive) <= 2:
                    break
                self.stage(alive, lambda names, r=rung: shard(names, "search", coarse_settings(full, r), seed + r, r,
                                                              f"rung {r}"), f"rung-{rung}")
                alive = promoted([e for e in alive if e.refusal is None and e.name not in self.lost])
            finalists = sorted(alive, key=lambda e: -(e.capacity.estimate if e.capacity else math.inf))
        if finalists:
            label = "contenders, side by side" if exhaustive else "final, side by side"
            self.stage(finalists, lambda names: shard(names, "final", full, seed, len(RUNGS), label,
                                                      exhaustive=exhaustive, activations=activations,
                                                      ab_pairs=ab_pairs), "final", final=True)
        chosen, runner = picked(self.evaluated)
        ab = self.ab if self.ab_names == (chosen.name if chosen else None, runner.name if runner else None) else None
        lost = dict(self.lost)
        if chosen is not None and runner is not None and ab is None and chosen.name not in lost:
            why = self.ab_names[1] if self.ab_names[0] == "lost" else "it did not come back from the final node"
            lost[chosen.name] = f"its A/B against the runner-up not run (node lost: {why})"
        return decided(self.evaluated, self.constraints, exhaustive, chosen, runner, ab, lost)


def ray_recommend(config: RunConfig, note: Callable[[str], None] = print) -> int:
    """`harness recommend --ray`: connect, keep the nodes of one hardware class (the majority's), search as the local
    command does with each configuration's search whole on one node, write recommend.json / .md / .html as it does
    (each configuration naming its node); exit 0 recommended, 3 could not judge. As the local command: recommend.json
    rewritten as each row comes back; the first SIGINT or SIGTERM stops the wait, writes what came back as its
    "interrupted" files (recommend.json kept unfinished) and exits 128 + the signal; --resume takes the searches that
    run settled (the same hardware class, settings and versions) and searches only the rest on the cluster."""
    from harness.execution.gate_ray import node_classes
    from harness.execution.recommend_run import _earlier, _head, _interrupted, _model
    from harness.execution.session import HarnessSession
    from harness.traffic.spec import load_traffic

    cap = config.capacity
    probe_address(config.fleet.ray)
    loaded = load_traffic(cap.traffic, seed=cap.traffic_seed)
    spec, _user_model, traffic = _model(cap.model_ref, cap.traffic, loaded)
    from harness.runtimes import get_runtime

    for r in config.matrix.runtimes:
        get_runtime(r)  # an unknown runtime: one line, exit 2, before the cluster is joined
    nodes = connect(config.fleet.ray)
    wanted, used, left_out = majority_class(nodes, node_classes(nodes))
    for line in left_out:
        note(f"ray: {line}")
    if not used:
        raise UsageError(f"--ray {config.fleet.ray}: no node said its hardware class ({len(nodes)} node(s))")
    out = config.outputs.out_dir
    constraints = Constraints(cap.slo_ms, cap.slo_percentile, cap.drift_limit, cap.memory_cap_mb)
    full = SearchSettings(cap.slo_ms, cap.slo_percentile, cap.search_tolerance, cap.probes, cap.probe_requests,
                          cap.probe_max_requests)
    head = _head(config, spec, traffic, constraints, full)
    head["machine"] = {"hardware_class": wanted}  # what --resume must find the same: the class, not one machine
    done = _earlier(out / "recommend.json", head) if cap.resume else {}
    out.mkdir(parents=True, exist_ok=True)
    ray_doc: dict[str, Any] = {"address": config.fleet.ray, "hardware_class": wanted, "nodes": [n.label for n in used],
                               "left_out": left_out, "final_node": None, "ab_node": None}
    guard = HarnessSession(config)  # no case runs here: its signal rule (the first SIGINT/SIGTERM stops the run)
    writing = _Writer(out / "recommend.json", {**head, "ray": ray_doc})
    search = ClusterSearch(config, spec, traffic, used, note, done, lambda: writing.save(search.candidates_json()),
                           functools.partial(_held, guard))
    note(f"{len(search.evaluated)} configuration(s) of {spec.name}; traffic: {traffic.describe()}; SLO "
         f"{search.full.describe()}; on {len(used)} node(s) of hardware class {wanted} -> {out}"
         + (f"; resuming: {len(done)} search(es) settled by the stopped run" if cap.resume else ""))
    started = time.perf_counter()

    def shard(names: dict[str, str], stage: str, settings: SearchSettings, seed: int, rung: int, label: str,
              **kw: Any) -> RecommendShard:
        mine = set(names.values())
        return RecommendShard(cap.model_ref, cap.traffic, loaded, names, stage, settings, seed, rung, label,
                              search.constraints, done={k: v for k, v in done.items() if k[0] in mine}, **kw)

    stopped = None
    with guard.signals_watched():
        try:
            rec = search.run(loaded.seed, cap.grid, cap.capacity_activations, cap.capacity_ab_pairs, shard)
            guard.finishing = True  # a signal from here on waits for the verdict's files
        except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (SignalStop): what came back is kept, no verdict
            stopped = getattr(exc, "signum", None) or guard.stop_signal or 2
            guard.finishing = True
        ray_doc.update(final_node=search.final_node, ab_node=search.ab_node)
        if stopped is not None:
            import signal

            kept = writing.stop(search.candidates_json(stopped=signal.Signals(stopped).name))
            return _interrupted({**head, "ray": ray_doc}, kept, out, int(stopped), time.perf_counter() - started)
        writing.stop([])
        _verdict(config, head, ray_doc, search, rec, out, time.perf_counter() - started, note)
        late = guard.stop_signal
    if late:  # the signal came after the verdict: its files are whole; the exit still says the signal came
        return 128 + int(late)
    return EXIT_CLEAN if rec.verdict == "recommended" else EXIT_UNJUDGED


def _verdict(config: RunConfig, head: dict[str, Any], ray_doc: dict[str, Any], search: ClusterSearch, rec: Any,
             out: Path, wall_s: float, note: Callable[[str], None]) -> None:
    """recommend.json, .md and .html of a finished search, as the local command writes them, each configuration
    naming its node; the last line."""
    from harness.execution.recommend_run import _jsonable, _last_line, _write_verdict

    data = {**head, **rec.to_json(), "wall_s": wall_s, "finished": True, "ray": ray_doc}
    for c in data["candidates"]:
        c["node"] = search.node.get(c["name"])
        if c["name"] in rec.lost:
            c["not_searched"] = rec.lost[c["name"]]
    json.dumps(data, default=_jsonable)  # fails here, not half-way through a file
    _write_verdict(data, out)
    note(_last_line(rec))


class _Writer:
    """recommend.json rewritten as rows come back (from the threads that take them), until the run stops: then
    nothing more is written by them, so the interrupted or final file is the last."""

    def __init__(self, path: Path, head: dict[str, Any]) -> None:
        self.path, self.head, self.stopped = path, head, False
        self.lock = threading.Lock()

    def save(self, candidates: list[dict[str, Any]]) -> None:
        from harness.execution.recommend_run import _jsonable
        from harness.results.store import atomic_write_text

        with self.lock:
            if not self.stopped:
                atomic_write_text(self.path, json.dumps({**self.head, "candidates": candidates}, indent=1,
                                                        default=_jsonable) + "\n")

    def stop(self, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self.lock:
            self.stopped = True
        return candidates


@contextlib.contextmanager
def _held(guard: Any) -> Iterator[None]:
    """A signal waits (recorded by the session's rule, not raised) while the driver merges a stage's rows; it stops
    the run right after."""
    from harness.errors import SignalStop

    if guard.finishing:  # already stopping: nothing to hold
        yield
        return
    guard.finishing = True
    try:
        yield
    finally:
        guard.finishing = False
    if guard.stop_signal is not None:
        raise SignalStop(guard.stop_signal)
