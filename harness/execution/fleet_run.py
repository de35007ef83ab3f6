"""`harness qualify SPEC --ray`: the spec's every case run on every node of a Ray cluster (the sharding path of
`harness run --ray`), each node's run streamed into OUT/NODE/results.json."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.errors import SignalStop, UsageError
from harness.execution.qualify_run import spec_run_config
from harness.execution.ray_shards import (
    Node,
    Shard,
    ShardDeadline,
    ShardRun,
    ShardSignals,
    connect,
    run_shards,
)
from harness.gating.fleet import NodeRun
from harness.gating.qualify import QualifySpec


def select_nodes(nodes: Sequence[Node], selector: str | None) -> list[Node]:
    """The nodes a selector names (comma-separated globs matched against a node's label ADDRESS-ID8, its address
    and its node id); every alive node without one. A UsageError when a selector names none."""
    if not selector:
        return list(nodes)
    globs = [g.strip() for g in selector.split(",") if g.strip()]
    picked = [n for n in nodes if any(fnmatch.fnmatchcase(x, g) for g in globs
                                      for x in (n.label, n.address, n.node_id))]
    if not picked:
        raise UsageError(f"--nodes {selector}: no alive node matches (nodes: "
                         f"{', '.join(n.label for n in nodes)})")
    return picked


@contextlib.contextmanager
def fleet_signals(spec: QualifySpec, out_dir: Path, address: str) -> Iterator[Any]:
    """The local qualify's signal rule over the whole of `harness qualify --ray`, between its waits on the nodes
    too (between a burn-in's rounds, while the certificates are made): the cluster connected first (the rounds'
    connect() then calls no ray.init again), then the session's rule until the block ends (each round's wait keeps
    its own, run_fleet's ShardSignals, inside it). A signal between two rounds stops the command as one during a
    round does (the rounds that finished kept, no certificate, 130 / 143); once the caller sets
    `signals.guard.finishing` (every node's run is back: the verdict is made from whole runs) a signal waits for
    the certificates and the exit still says it (`signals.exit_status()`). Yields the ShardSignals, its handlers
    installed."""
    connect(address)
    with ShardSignals(spec_run_config(spec, out_dir)) as signals:
        signals.watch()
        yield signals


def run_fleet(spec: QualifySpec, out_dir: Path, address: str, *, selector: str | None = None,
              serial: bool = False, note: Callable[[str], None] = print,
              before: Callable[[ShardRun], None] | None = None,
              golden: dict[str, bytes] | None = None, node_deadline_s: float | None = None) -> list[NodeRun]:
    """Every case of the spec on every selected node, one Ray task per node holding all of its CPUs and GPUs,
    under the harness's own session there (supervised workers, rounds); `serial` runs one node at a time. A node
    lost mid-run keeps its finished cases and is returned with the reason; `golden`: the golden store's files
    (harness.gating.golden.store_files), compared on every node; its findings are the node's wrong results.
    A shard still running at its deadline (`node_deadline_s`, else ShardDeadline's rule from its peers' times)
    is cancelled and its node lost: "no result within N s". The first SIGINT or SIGTERM stops the wait (the
    nodes' tasks cancelled), writes the rows that arrived as the local qualify does (each node's
    OUT/NODE/results.json marked interrupted, OUT/report.html with every node side by side) and raises SignalStop:
    no certificate of part of the spec."""
    from harness.gating.golden import wrong_findings

    nodes = select_nodes(connect(address), selector)
    config = spec_run_config(spec, out_dir).replace(ray=address)
    cases = [sc.case for sc in spec.cases]
    note(f"qualify {spec.name}: {len(cases)} case(s) on each of {len(nodes)} node(s)"
         + (", one node at a time" if serial else "") + ": " + ", ".join(n.label for n in nodes))
    deadline = ShardDeadline(blocks=len(cases) * config.measure.repeats,
                             case_timeout_s=config.process.case_timeout_s, fixed_s=node_deadline_s)

    def start(started: Callable[[ShardRun], None]) -> list[ShardRun]:
        def both(sr: ShardRun) -> None:  # the signal rule's record of the shards that started, then the caller's
            started(sr)
            if before is not None:
                before(sr)

        return run_shards(config, [Shard(n, list(cases)) for n in nodes], note, serial=serial, before=both,
                          golden=golden, deadline=deadline)

    with ShardSignals(config, note) as signals:  # the local qualify's signal rule
        runs = signals.wait(start)
        if signals.stopped:  # as the local qualify: what arrived written (the nodes ran the same cases: no one
            from harness.workloads import render_report  # merged results.json, each node's file and one report)

            render_report([sr.run for sr in runs], out_dir)  # every node side by side
            note(f"qualify {spec.name} --ray: interrupted: no certificate of part of the spec (the rows that "
                 f"arrived: {', '.join(str(sr.out_dir / 'results.json') for sr in runs)})")
    status = signals.exit_status()
    if status is not None:  # as the local qualify: no certificate; the command exits 128 + the signal
        raise SignalStop(status - 128)
    return [NodeRun(sr.shard.node.label, sr.run,
                    lost=None if sr.error is None else f"ray node {sr.shard.node.label} lost: {sr.error}",
                    wrong=wrong_findings(sr.run), machine=sr.machine) for sr in runs]
