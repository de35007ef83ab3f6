"""`harness gate BASELINE --ray`: the gate's cases over the Ray nodes of the baseline's hardware class through `harness
run --ray`'s shards, both sides of a case on one node, judged as one gate (docs/fleet.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.execution.gate_run import GateCase, GateDriver, GateOutcome, judge_rows
from harness.execution.ray_shards import (
    Node,
    ShardSignals,
    connect,
    merged_run,
    plan_shards,
    probe_address,
    run_shards,
    unplaced_run,
)
from harness.gating.baseline import Replay
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.store import write_results

PROBE_S = 120.0  # how long the driver waits for a node to say its hardware class


def node_fingerprint() -> str:
    """On a node: its machine fingerprint, as the environment snapshot of every run computes it."""
    from harness.results.environment import snapshot

    return str(snapshot(quiet_check_s=0).machine_fingerprint)


def node_classes(nodes: Sequence[Node]) -> dict[str, str]:
    """Each node's hardware class (its machine fingerprint, read on the node by a task that holds no CPU), or
    "" for a node that did not answer within PROBE_S seconds."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(node_fingerprint)
    refs = {n.node_id: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
            .remote() for n in nodes}
    out = {}
    for node_id, ref in refs.items():
        try:
            out[node_id] = str(ray.get(ref, timeout=PROBE_S))
        except Exception:  # noqa: BLE001 - a node gone or stuck: left out, said so
            out[node_id] = ""
    return out


def class_nodes(nodes: Sequence[Node], classes: dict[str, str], wanted: str | None,
                ) -> tuple[list[Node], list[str]]:
    """(the nodes of the baseline's hardware class `wanted`, one line per node left out and why). A baseline that
    names no class (saved without a machine fingerprint) takes every node that answered."""
    used, left_out = [], []
    for n in nodes:
        got = classes.get(n.node_id, "")
        if not got:
            left_out.append(f"{n.label}: not used: it did not say its hardware class within {PROBE_S:g} s")
        elif wanted and got != wanted:
            left_out.append(f"{n.label}: not used: hardware class {got}, not the baseline's {wanted} (an A/B is "
                            "judged only on the hardware the baseline measured)")
        else:
            used.append(n)
    return used, left_out


def crowded_nodes(nodes: Sequence[Node], threads: int) -> list[str]:
    """One plan line per node that has no CPU beyond the cases' threads: the gate's supervisor, both sides'
    workers and Ray's own processes then share the cores that measure. Measured on the quick matrix (one-core
    nodes, and the local gate pinned to one core alike): calls of tens of microseconds got false verdicts there
    while a case's activations shared one worker; a node's process with one CPU now makes each activation in new
    workers (pairs.renews_workers), and those rows often end not judged there instead (docs/measurements.md,
    "A new worker per activation")."""
    return [f"{n.label}: {n.resources.get('CPU', 0):g} CPU(s) for {threads}-thread cases: no core to spare for the "
            "gate's own and Ray's processes; short calls (under about 0.1 ms) measured this way often end not "
            "judged where a node with a core to spare judges them (docs/measurements.md): "
            "give the node more CPUs than the gate's threads"
            for n in nodes if n.resources.get("CPU", 0) <= threads]


@dataclass
class GateShard:
    """What a node runs of `harness gate --ray` (harness.execution.ray_shards.ShardWork): its cases' plans through
    the gate's own driver (both sides of a case on this node, interleaved), side A's stored artifacts fetched
    from Ray's object store by digest and checked against it before anything runs."""

    plans: dict[str, GateCase]  # by case id, every shard's (the node picks its own)
    replay: Replay | None
    baseline: RunResults  # the baseline's newest run (its configuration: how a stored-figure case is measured)
    blobs: dict[str, Any]  # artifact sha256 -> ObjectRef of its bytes (ray.put once by the driver)
    # how a case judged on the stored figures is measured (`harness run --baseline --ray`: the run's own options);
    # None: as `harness gate` measures it (the baseline's timing policy and --repeats)
    forward: RunConfig | None = None

    def __call__(self, session: Any, cases: Sequence[CaseId]) -> Iterator[CaseResult]:
        from harness.plugins import load_plugins

        load_plugins()  # the gate resolves models and runtimes in this process too (the CLI did on the driver)
        plans = [dataclasses.replace(self.plans[c.id]) for c in cases]
        store = Path(tempfile.mkdtemp(prefix="harness-gate-blobs-"))
        for g in plans:
            sha = g.stored.artifact_sha256 if g.stored is not None else None
            if g.fallback or g.artifact is None or not sha:
                continue
            g.artifact = fetch_blob(sha, self.blobs.get(sha), store)
            if isinstance(g.artifact, str):  # not what its digest says: side A cannot be this artifact
                g.fallback, g.artifact = g.artifact, None
        driver = GateDriver(session, [self.baseline], self.replay, None)
        if self.forward is not None:  # written where the node's session writes
            node = session.config.outputs
            driver.forward_config = self.forward.replace(
                out_dir=node.out_dir, run_id=node.run_id, baseline=None, history=None,
                case_memory_gb=session.config.process.case_memory_gb)
        yield from driver.rows(plans)


def fetch_blob(sha: str, ref: Any, store: Path) -> Path | str:
    """The blob of `sha` from the object store, written under `store` once its bytes hash to `sha`; else why
    not (a str: the case then falls back to the stored figures, said)."""
    import ray

    target = store / f"{sha}.onnx"
    if target.is_file():
        return target
    if ref is None:
        return "its stored artifact was not sent to this node"
    try:
        data = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - the object lost with the driver's node: said on the row
        return f"its stored artifact could not be fetched from Ray's object store: {type(exc).__name__}"
    if hashlib.sha256(data).hexdigest() != sha:
        return "the stored artifact that reached this node no longer matches its digest: never replayed"
    target.write_bytes(data)
    return target


def model_files(config: RunConfig) -> list[str]:
    """The --model files (and the baseline's stored user models) a node reads by their path: `.onnx` files, not
    `module:factory` references (those are imported from the node's own Python path)."""
    from harness.model_files import is_factory_ref

    return [str(Path(p).absolute()) for p in config.matrix.user_models if not is_factory_ref(str(p))]


def _missing(paths: Sequence[str]) -> list[str]:
    """On a node: which of `paths` is not a file there."""
    import os

    return [p for p in paths if not os.path.isfile(p)]


def node_missing(nodes: Sequence[Node], paths: Sequence[str]) -> dict[str, list[str] | None]:
    """Each node's list of `paths` it lacks (read on the node by a task that holds no CPU); None for a node that
    did not answer within PROBE_S seconds."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_missing)
    refs = {n.node_id: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
            .remote(list(paths)) for n in nodes}
    out: dict[str, list[str] | None] = {}
    for node_id, ref in refs.items():
        try:
            out[node_id] = list(ray.get(ref, timeout=PROBE_S))
        except Exception:  # noqa: BLE001 - a node gone or stuck: left out, said so
            out[node_id] = None
    return out


def file_nodes(nodes: Sequence[Node], missing: dict[str, list[str] | None]) -> tuple[list[Node], list[str]]:
    """(the nodes that hold every --model file at its path, one line per node left out and which file it lacks):
    a node reads a user's model by its path (it is not shipped: its model fingerprint names the path)."""
    used, left_out = [], []
    for n in nodes:
        lacks = missing.get(n.node_id)
        if lacks is None:
            left_out.append(f"{n.label}: not used: it did not say within {PROBE_S:g} s whether it holds the --model "
                            "file(s)")
        elif lacks:
            left_out.append(f"{n.label}: not used: it lacks the --model file {', '.join(lacks)} (a --model file must "
                            "be at the same path on every node)")
        else:
            used.append(n)
    return used, left_out


def gate_nodes(config: RunConfig, runs: Sequence[RunResults], note: Callable[[str], None],
               ) -> tuple[list[Node], list[str], str]:
    """Connect to the cluster at config.fleet.ray and keep the nodes of the baseline's hardware class that hold
    every --model file; each other node is a line of the plan (`note`). (the nodes, the lines of those left out,
    the class: "" when the baseline names none.) No such node: a UsageError, before anything runs."""
    probe_address(config.fleet.ray)
    nodes = connect(config.fleet.ray)
    wanted = runs[-1].environment.machine_fingerprint
    used, left_out = class_nodes(nodes, node_classes(nodes), str(wanted) if wanted else None)
    files = model_files(config)
    of_class = len(used)
    if files and used:
        used, lacking = file_nodes(used, node_missing(used, files))
        left_out += lacking
    for line in left_out:
        note(f"ray: {line}")
    if not used:
        holds = f"; {of_class} of it, none holding every --model file" if of_class else ""
        raise UsageError(f"--ray {config.fleet.ray}: no node of the cluster is of the baseline's hardware class "
                         f"{wanted}{holds} ({len(nodes)} node(s): " + "; ".join(left_out) + "): nothing to gate on")
    return used, left_out, str(wanted or "")


def ray_gate(config: RunConfig, runs: list[RunResults], replay: Replay | None, gates: Any,
             plans: list[GateCase], note: Callable[[str], None] = print, forward: RunConfig | None = None,
             ) -> GateOutcome:
    """Connect to the cluster at config.fleet.ray, keep the nodes of the baseline's hardware class (gate_nodes),
    shard the plans over them (plan_shards: cases that share an activation on one node, each on the least-loaded
    node with the resource it needs), run each shard under the gate's driver on its node, stream the rows into
    OUT/NODE/results.json, merge them into OUT/results.json with one report, and judge them as the local gate
    does (judge_rows). A node lost mid-run costs its unfinished cases: unjudged, never a pass. The first SIGINT or
    SIGTERM stops the wait (the nodes' tasks cancelled) and, as the local gate, writes the rows that arrived
    (OUT/results.json interrupted, the report) and judges nothing: the outcome is interrupted, exit 128 + the signal.
    `forward`: how the cases judged on the stored figures are measured (GateShard.forward)."""
    import ray

    from harness.measure.memory import default_case_memory_gb
    from harness.workloads import render_report

    used, left_out, wanted = gate_nodes(config, runs, note)
    shards, unplaced = plan_shards([g.case for g in plans], used, config.fleet.placement)
    note(f"ray: {len(plans)} case(s) over {len(shards)} of {len(used)} node(s) of hardware class "
         f"{wanted or '(the baseline names none: every node)'}, both sides of each case on one node: "
         + ", ".join(f"{s.node.label} {len(s.cases)}" for s in shards)
         + (f"; {len(unplaced)} case(s) no node can take" if unplaced else ""))
    for line in crowded_nodes([s.node for s in shards], config.measure.threads):
        note(f"ray: {line}")
    blobs = {}
    for g in plans:
        sha = g.stored.artifact_sha256 if g.stored is not None else None
        if not g.fallback and g.artifact is not None and sha and sha not in blobs:
            blobs[sha] = ray.put(Path(g.artifact).read_bytes())  # once; each node pulls what its cases need
    work = GateShard({g.case.id: g for g in plans}, replay, runs[-1], blobs, forward)
    out_dir = config.outputs.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    # side A runs as the baseline ran: its thread count travels (gate_setup); only the memory cap is the node's
    keep_memory = config.process.case_memory_gb == default_case_memory_gb()
    with ShardSignals(config, note) as signals:  # the local gate's signal rule: a stop keeps what arrived
        node_runs = [sr.run for sr in signals.wait(lambda before: run_shards(
            config, shards, note, work=work, before=before,
            node_defaults=["case_memory_gb"] if keep_memory else []))]
        if unplaced:
            for c in unplaced:
                c.details["ray_unplaced"] = True
            node_runs.append(unplaced_run(config, unplaced, out_dir))
        merged = signals.settle(merged_run(config, node_runs))
        merged.environment.add(ray_left_out=left_out)
        write_results(merged, out_dir)  # OUT/results.json, as the local gate writes it
        render_report(merged, out_dir)
        outcome = GateOutcome(run=merged, workers_started=None)
        if not signals.stopped:  # as the local gate: no verdict on a run a signal stopped
            judge_rows(outcome, plans, merged, runs, gates)
    if signals.exit_status() is not None:  # the wait stopped, or the signal came while the files were written
        outcome.interrupted, outcome.exit_status = True, signals.exit_status()
    return outcome


NOT_IN_BASELINE = "the baseline has no figures of this case: measured tonight as `harness run` measures it"


def matrix_plans(plans: Sequence[GateCase], matrix: Sequence[CaseId]) -> list[GateCase]:
    """`harness run --baseline --ray`: one plan per case of the run's matrix, in its order: the gate's plan of a
    case the baseline measured (re-measured A/B where side A can be reproduced, else on the stored figures,
    labelled), else a case measured as `harness run` measures it and judged on the stored figures (`new` where
    the baseline lacks it). The baseline's cases outside the matrix are not gated."""
    by_id = {g.case.id: g for g in plans}
    return [by_id.get(c.id) or GateCase(c, fallback=NOT_IN_BASELINE) for c in matrix]
