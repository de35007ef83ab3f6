"""`harness conform --ray`: the conformance cases sharded over a Ray cluster's nodes through `harness run --ray`'s
shards, each node running its cases in its own supervised workers, merged into one run folder (docs/fleet.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from harness.config import RunConfig
from harness.execution.ray_shards import (
    Node,
    Shard,
    ShardSignals,
    connect,
    merged_run,
    plan_shards,
    run_shards,
    unplaced_run,
)
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.store import write_results

# Conformance judges a case's outputs, not its time: every node takes cases, whatever its hardware class (the class
# of each node that ran cases is said at the end, and every row names its node).
EVERY_CLASS = "every node, whatever its hardware class (conformance judges outputs, not time)"


def plan_lines(cases: Sequence[CaseId], nodes: Sequence[Node], shards: Sequence[Shard],
               unplaced: Sequence[CaseResult]) -> list[str]:
    """The plan before anything runs: one line in all, then one per node of the cluster (its cases, or why none)."""
    by_node = {s.node.node_id: s for s in shards}
    lines = [f"ray: {len(cases)} case(s) over {len(shards)} of {len(nodes)} node(s), {EVERY_CLASS}"
             + (f"; {len(unplaced)} case(s) no node can take (--placement)" if unplaced else "")]
    for n in nodes:
        s = by_node.get(n.node_id)
        if s is not None:
            runtimes = sorted({c.runtime for c in s.cases})
            lines.append(f"ray: {n.label}: {len(s.cases)} case(s) ({', '.join(runtimes)})")
        else:
            have = ", ".join(f"{k} {v:g}" for k, v in sorted(n.resources.items()) if not k.startswith("node:"))
            lines.append(f"ray: {n.label}: no case: the resources the cases need went to less-loaded nodes or "
                         f"are not here (it has {have or 'none'}; --placement)")
    return lines


def merge_conform(config: RunConfig, cases: Sequence[CaseId], node_runs: Sequence[RunResults],
                  interrupted: bool = False) -> RunResults:
    """The nodes' runs as the one run a local `harness conform` writes: every case once in the local order, each
    naming its node (details.ray_node); a row no node wrote (a lost node's unfinished case, crashed; a case no node
    could take, skipped) carries the conformance facts of the supervisor's own rows; the conformance record of the
    driver's onnx in the config, with each node's onnx and runtime versions beside it (config.ray_nodes)."""
    from harness.workloads import get_workload

    workload = get_workload("conform")
    merged = merged_run(config, node_runs)
    merged.cases = [workload.annotate(c.case, c) for c in merged.cases]  # crashed / skipped rows: their facts
    order = {c.id: i for i, c in enumerate(cases)}
    merged.cases.sort(key=lambda c: order.get(c.case.id, len(order)))
    merged.config = {**config.as_dict(), **workload.run_record(config), "ray_nodes": {
        r.run_id.removeprefix(f"{config.outputs.run_id}-"): {k: r.config.get(k) for k in ("onnx", "runtimes")}
        for r in node_runs if r.environment.extra("ray_node") and r.config.get("onnx")}}  # (a lost node's: unknown)
    if interrupted:
        merged.complete, merged.interrupted = False, True
    return merged


def node_lines(merged: RunResults) -> list[str]:
    """After the run: each node's cases and hardware class, and what differs between the nodes (a second hardware
    class, another onnx or runtime version: said, never a reason to drop a node's rows)."""
    counts: dict[str, int] = {}
    for c in merged.cases:
        node = str(c.details.get("ray_node", "?"))
        counts[node] = counts.get(node, 0) + 1
    envs = merged.environment.ray_nodes or {}
    lines = []
    for node, n in counts.items():
        fp = (envs.get(node) or {}).get("machine_fingerprint")
        lines.append(f"ray: {node}: {n} row(s)" + (f", hardware class {fp}" if fp else ""))
    classes = {str(e.get("machine_fingerprint")) for e in envs.values() if e.get("machine_fingerprint")}
    if len(classes) > 1:
        lines.append(f"ray: the nodes are of {len(classes)} hardware classes: each row names its node")
    versions = {repr(v) for v in (merged.config.get("ray_nodes") or {}).values()}
    if len(versions) > 1:
        lines.append("ray: the nodes differ in onnx or runtime versions (results.json config.ray_nodes): a case "
                     "judged differently on two nodes may be the version's")
    return lines


def ray_conform(config: RunConfig, cases: Sequence[CaseId], note: Callable[[str], None] = print,
                ) -> tuple[RunResults, dict[str, Path], int | None]:
    """Connect to the cluster at config.fleet.ray, shard `cases` over its alive nodes (plan_shards: each case on the
    least-loaded node with the resource its runtime needs), run each shard on its node under the session
    (supervised per-case workers, conform's one thread), stream the rows into OUT/NODE/results.json, and write what
    a local `harness conform` writes in OUT: results.json (merge_conform) and conformance.html. A lost node costs
    its unfinished cases (crashed, with the reason); the first SIGINT or SIGTERM stops the wait and writes what
    arrived (interrupted). Returns (the merged run, its files, the stopping signal's exit status or None)."""
    from harness.execution.session import point_latest
    from harness.measure.memory import default_case_memory_gb
    from harness.workloads import get_workload

    nodes = connect(config.fleet.ray)
    shards, unplaced = plan_shards(cases, nodes, config.fleet.placement)
    for line in plan_lines(cases, nodes, shards, unplaced):
        note(line)
    out_dir = config.outputs.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    # conform's one thread travels to every node (it is the workload's default, not this machine's); only the
    # memory cap left at this machine's default is the node's own
    keep_memory = config.process.case_memory_gb == default_case_memory_gb()
    with ShardSignals(config, note) as signals:  # the local command's signal rule: a stop keeps what arrived
        node_runs = [sr.run for sr in signals.wait(lambda before: run_shards(
            config, shards, note, before=before, case_lines=False,
            node_defaults=["case_memory_gb"] if keep_memory else []))]
        interrupted = signals.stopped
        if unplaced:
            node_runs.append(unplaced_run(config, unplaced, out_dir))
        merged = merge_conform(config, cases, node_runs, interrupted)
        write_results(merged, out_dir)  # OUT/results.json, as the local command writes it
        if config.outputs.history and not interrupted:
            from harness.history.record import record_run

            for run in node_runs:  # each node's run on its own machine's series
                if run.environment.machine_fingerprint:
                    record_run(run, config.outputs.history, str(out_dir / "results.json"), note)
        outputs = {"json": out_dir / "results.json", **get_workload("conform").render(merged, out_dir)}
        write_results(merged, out_dir)  # what rendering added (each runtime's wall time)
        point_latest(out_dir)
    return merged, outputs, signals.exit_status()
