"""`harness gate-check --nightly BASELINE --ray`: the rounds of gate-check's whole gates spread over the Ray nodes of
the baseline's hardware class through `harness gate --ray`'s shards, judged and tallied as one gate-check."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.execution.gate_ray import GateShard, gate_nodes
from harness.execution.gate_run import STORED, GateCase, GateOutcome, judge_rows
from harness.execution.ray_shards import Node, Shard, ShardRun, required_resource, run_shards
from harness.gating.gatecheck import NightlyTally
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.store import write_results

Trial = tuple[int, str, float]  # (round, label: "aa" or "10%", the planted slowdown as a fraction)


def trials_of(levels: Sequence[float]) -> list[tuple[str, float]]:
    """A round's trials, in order: A/A, then each level (as `harness gate-check --nightly` runs them locally)."""
    return [("aa", 0.0)] + [(f"{lv:.0%}", lv) for lv in levels]


def assign_rounds(nodes: Sequence[Node], rounds: int, levels: Sequence[float]) -> dict[str, list[Trial]]:
    """Whole rounds dealt to the nodes in turn (round r on node r mod N): a round's A/A and slowed gates run on one
    machine, one after the other, as on one runner locally."""
    out: dict[str, list[Trial]] = {n.node_id: [] for n in nodes}
    for r in range(rounds):
        node = nodes[r % len(nodes)]
        out[node.node_id] += [(r, label, level) for label, level in trials_of(levels)]
    return out


@dataclass
class TrialShard:
    """What a node runs of `gate-check --nightly --ray` (harness.execution.ray_shards.ShardWork): each of its trials
    a whole gate of every case (the gate's own driver, GateShard) with its own supervised workers, side B slowed
    by the trial's level, the block order drawn with the round's seed; each row tagged with its trial."""

    trials: dict[str, list[Trial]]  # node id -> its trials (the node finds its own)
    gate: GateShard

    def __call__(self, session: Any, cases: Sequence[CaseId]) -> Iterator[CaseResult]:
        import ray

        base = session.config
        if not session.started:
            session.start()
        for r, label, level in self.trials.get(ray.get_runtime_context().get_node_id(), []):
            session.config = base.replace(ab_inject=level, ab_seed=r)
            _fresh_workers(session)  # each trial a gate of its own: its own workers, as each night has
            # the node's run holds one trial's rows at a time (a run holds a case once); every row streams to
            # the driver, which keeps each trial's rows (ShardRun.streamed) and writes them per trial
            session.run.cases.clear()
            for row in self.gate(session, cases):
                row.details["gate_check"] = {"round": r, "trial": label}
                yield row
        session.config = base


def _fresh_workers(session: Any) -> None:
    """The session's supervised workers replaced by new ones (the executor HarnessSession.start makes)."""
    from harness.execution.supervisor import IsolatedExecutor
    from harness.execution.worker import InProcessExecutor

    if session.executor is not None:
        session.executor.close()
    session.executor = IsolatedExecutor(say=session.progress.note) if session.config.process.isolation \
        else InProcessExecutor()


@dataclass
class RayGateCheck:
    """The tally of every trial that came back, the plan's lines, and the trials whose node was lost; `stopped`: 128 +
    the signal that stopped the run (then nothing is tallied, as the local check: each node's trials so far are in
    ROOT/NODE/results.json)."""

    tally: NightlyTally
    lines: list[str]
    lost: list[str]  # "round 2 A/A on NODE: why" per trial not finished
    stopped: int | None = None


def trial_rows(sr: ShardRun, trial: Trial, plans: Sequence[GateCase]) -> tuple[list[CaseResult], str]:
    """A trial's rows from its node's run, every plan once; a plan its node never finished (the node lost, or its
    shard failed) a `crashed` row of phase `shard`, which the gate's judging leaves unjudged (node lost). Also the
    reason when the trial was cut short ("" when complete)."""
    r, label, _ = trial
    rows = {c.case.id: c for c in sr.streamed
            if (c.details or {}).get("gate_check") == {"round": r, "trial": label}}
    why = sr.error or "its shard ended before this trial finished"
    missing = [g for g in plans if g.case.id not in rows]
    for g in missing:
        rows[g.case.id] = CaseResult(g.case, "crashed", phase="shard", reason=(
            f"ray node {sr.shard.node.label} lost before this case finished: {why}"))
    return [rows[g.case.id] for g in plans], why if missing else ""


def ray_gate_check(config: RunConfig, runs: list[RunResults], replay: Any, gates: Any, plans: list[GateCase],
                   levels: Sequence[float], rounds: int, root: Path,
                   note: Callable[[str], None] = print) -> RayGateCheck:
    """`gate-check --nightly --ray`: connect, keep the nodes of the baseline's hardware class holding every --model
    file and every resource the gate's cases need (`--placement`), deal them whole rounds (assign_rounds), run
    each node's trials as one shard (harness.execution.ray_shards.run_shards: streamed into ROOT/NODE/results.json,
    a lost node costing its unfinished trials), then judge each trial's rows as the local gate does (judge_rows)
    and tally them (NightlyTally). A trial its node did not finish counts its rows unjudged (node lost), never a
    pass or a detection. The first SIGINT or SIGTERM stops the wait (the nodes' tasks cancelled): nothing tallied,
    `stopped` 128 + the signal, as the local check stops."""
    import ray

    from harness.execution.session import HarnessSession
    from harness.measure.memory import default_case_memory_gb

    used, _left_out, wanted = gate_nodes(config, runs, note)
    needs = sorted({required_resource(g.case.runtime, config.fleet.placement) for g in plans})
    able = [n for n in used if all(n.resources.get(r, 0) > 0 for r in needs)]
    for n in used:
        if n not in able:
            note(f"ray: {n.label}: not used: it lacks the resource(s) "
                 f"{', '.join(r for r in needs if n.resources.get(r, 0) <= 0)} (a trial runs every case of the gate "
                 "on one node)")
    if not able:
        raise UsageError(f"--ray {config.fleet.ray}: no node of the baseline's hardware class has every resource "
                         f"the gate's cases need ({', '.join(needs)}): nothing to measure on")
    assigned = assign_rounds(able, rounds, levels)
    by_node = {n.node_id: n for n in able}
    lines = [f"ray: {rounds} round(s) of (A/A + {len(levels)} levels) over {sum(bool(t) for t in assigned.values())}"
             f" node(s) of hardware class {wanted or '(the baseline names none: every node)'}, each trial a whole "
             "gate on one node: " + ", ".join(
                 f"{by_node[k].label} round(s) {','.join(str(r + 1) for r in sorted({t[0] for t in v}))}"
                 for k, v in assigned.items() if v)]
    for line in lines:
        note(line)
    blobs = {}
    for g in plans:
        sha = g.stored.artifact_sha256 if g.stored is not None else None
        if not g.fallback and g.artifact is not None and sha and sha not in blobs:
            blobs[sha] = ray.put(Path(g.artifact).read_bytes())  # once; each node pulls what its cases need
    gate = GateShard({g.case.id: g for g in plans}, replay, runs[-1], blobs)
    shards = [Shard(by_node[k], [g.case for g in plans]) for k, v in assigned.items() if v]
    keep_memory = config.process.case_memory_gb == default_case_memory_gb()
    cfg = config.replace(out_dir=root)
    root.mkdir(parents=True, exist_ok=True)
    tally = NightlyTally(levels=tuple(label for label, _ in trials_of(levels)[1:]))
    guard = HarnessSession(cfg)  # its signal rule: the first SIGINT/SIGTERM stops, later ones are absorbed
    with guard.signals_watched():
        try:
            node_runs = run_shards(cfg, shards, note, work=TrialShard(assigned, gate),
                                   node_defaults=["case_memory_gb"] if keep_memory else [])
        except KeyboardInterrupt as exc:
            return RayGateCheck(tally, lines, [], 128 + int(getattr(exc, "signum", None) or guard.stop_signal or 2))
    lost = []
    done: dict[tuple[int, str], tuple[ShardRun, Trial]] = {}
    for sr in node_runs:
        for trial in assigned[sr.shard.node.node_id]:
            done[(trial[0], trial[1])] = (sr, trial)
    for r in range(rounds):  # tallied in the local order: round by round, A/A first
        for label, _ in trials_of(levels):
            sr, trial = done[(r, label)]
            rows, why = trial_rows(sr, trial, plans)
            if why:
                lost.append(f"round {r + 1} {'A/A' if label == 'aa' else label} on {sr.shard.node.label}: {why}")
            run = RunResults(run_id=f"{sr.config.outputs.run_id}-r{r}-{label.rstrip('%')}",
                             started_at=sr.run.started_at, config=sr.run.config, environment=sr.run.environment,
                             cases=rows, complete=not why)
            write_results(run, sr.out_dir / f"r{r}-{label.rstrip('%')}")  # as the local gate-check's ROOT/rR-LEVEL
            outcome = GateOutcome(run=run, workers_started=None)
            judge_rows(outcome, [dataclasses.replace(p, note="") for p in plans], run, runs, gates)
            tally.add(label, outcome.records, list(outcome.fallbacks), STORED)
            note(f"  round {r + 1}/{rounds} {label} [node {sr.shard.node.label}]: {outcome.summary(False)}")
    return RayGateCheck(tally, lines, lost)
