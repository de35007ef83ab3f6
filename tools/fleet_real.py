"""A real fleet on this machine: a local Ray cluster of one-CPU nodes, each pinned to its own core, one node slowed by
a real means, `harness qualify --ray --serial` per trial; the detection rate, the false flags, the smallest slowdown
found in 95% of trials.

The nodes run one at a time (--serial), each node's processes pinned to core K mod CPUs (the raylet and every
process it starts inherit the driver's CPU affinity at the node's start). In trial t at slowdown level d, node
t mod N is slowed while its shard runs, by one of two real means (--means):

- `neighbour`: a busy process pinned to that node's core, burning d of each --period-ms of CPU time (a duty cycle);
- `cgroup`: the node's processes (its raylet and every descendant) moved into a cgroup-v1 CPU controller group
  with a quota of (1 - d) of one CPU per --period-ms (/sys/fs/cgroup/cpu must be writable).

Level 0 is the identical fleet (nothing slowed: every flag is a false flag). Both means show in the kernel's
run-queue records, so the harness's contention probe may call the slowed node's blocks contended and place it
`not judged` ("slow but contended"), as it should for a neighbour; `--contention-limit 1` turns that verdict off
(the placement alone). The table counts, per level: the slowed node placed `slow`, placed `not judged`, its measured
p50 distance from its peers (median over trials), and the other nodes flagged (slow, fast or noisy: false flags).

The measurement (20 trials per level, on a quiet machine; about 1 minute a trial on 2 cores):

    python tools/fleet_real.py --trials 20 --levels 0,0.1,0.2,0.3,0.5 --means neighbour --out reports/fleet-real
    python tools/fleet_real.py --trials 20 --levels 0,0.1,0.2,0.3,0.5 --means neighbour --contention-limit 1 \\
        --out reports/fleet-real-nc

It needs the [ray] extra and onnxruntime (the zoo's mlp on ort-cpu); it writes OUT/trial-LEVEL-NN/ (each
qualification's folders) and OUT/fleet-real.json, and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPEC = """name = "fleet-real"
description = "the zoo's mlp on ONNX Runtime, short blocks: a four-node fleet on one machine"
[measure]
min_time = {min_time}
min_iters = 50
threads = 1
[defaults.require]
p50_ms_max = 1000
[[case]]
model = "mlp"
runtime = "ort-cpu"
batch = {batch}
"""

NEIGHBOUR = """
import os, sys, time
core, duty, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {core})
busy = duty * period
while True:  # burn `busy` s of CPU time in each `period` s of wall time: a duty cycle on one core
    t0, c0 = time.perf_counter(), time.process_time()
    while time.process_time() - c0 < busy:
        pass
    rest = period - (time.perf_counter() - t0)
    if rest > 0:
        time.sleep(rest)
"""
CGROUP = Path("/sys/fs/cgroup/cpu")
FLAGS = ("slow", "fast", "noisy")  # a placement that flags a node on its timing


def cgroup_writable() -> bool:
    """Whether a cgroup-v1 CPU group can be made here (made and removed at once)."""
    probe = CGROUP / f"harness-fleet-probe-{os.getpid()}"
    try:
        probe.mkdir()
        (probe / "cpu.cfs_quota_us").write_text("-1")
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return True


class Slower:
    """Slows one node while its shard runs, and nothing else: `start(core, pids)` and `stop()`."""

    def __init__(self, means: str, level: float, period_ms: float) -> None:
        self.means, self.level, self.period_s = means, level, period_ms / 1000.0
        self.proc: subprocess.Popen[bytes] | None = None
        self.moved: list[int] = []
        self.group = CGROUP / f"harness-fleet-slow-{os.getpid()}"

    def start(self, core: int, pids: list[int]) -> None:
        self.stop()
        if self.level <= 0:
            return
        if self.means == "neighbour":
            self.proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(core), str(self.level),
                                          str(self.period_s)])
            return
        self.group.mkdir(exist_ok=True)
        period_us = int(self.period_s * 1e6)
        (self.group / "cpu.cfs_period_us").write_text(str(period_us))
        (self.group / "cpu.cfs_quota_us").write_text(str(max(1000, int(period_us * (1.0 - self.level)))))
        for pid in pids:
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                (self.group / "cgroup.procs").write_text(str(pid))
                self.moved.append(pid)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None
        if self.moved or self.group.is_dir():
            pids = [int(p) for p in (self.group / "cgroup.procs").read_text().split()] if self.group.is_dir() else []
            for pid in pids:  # every process of the group, the node's workers started meanwhile too, back out
                with contextlib.suppress(OSError):
                    (CGROUP / "cgroup.procs").write_text(str(pid))
            self.moved = []

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self.group.rmdir()


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root.pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []


@contextlib.contextmanager
def pinned(core: int) -> Iterator[None]:
    """This process's CPU affinity set to `core` while a node starts (its processes inherit it), then restored."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def start_cluster(n: int, cores: list[int]) -> tuple[Any, dict[str, tuple[int, Any]]]:
    """A local Ray cluster of `n` one-CPU nodes, node k pinned to cores[k % len(cores)] and carrying the custom
    resource fleet_node_k; returns it and node id -> (core, ray node)."""
    from ray.cluster_utils import Cluster

    with pinned(cores[0]):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"fleet_node_0": 1}})
    nodes = {cluster.head_node.node_id: (cores[0], cluster.head_node)}
    for k in range(1, n):
        core = cores[k % len(cores)]
        with pinned(core):
            node = cluster.add_node(num_cpus=1, resources={f"fleet_node_{k}": 1})
        nodes[node.node_id] = (core, node)
    cluster.wait_for_nodes()
    return cluster, nodes


def raylet_pid(node: Any) -> int | None:
    procs = getattr(node, "all_processes", {}) or {}
    for info in procs.get("raylet", []):
        return int(info.process.pid)
    return None


def one_trial(spec: Path, address: str, out: Path, slowed_id: str, nodes: dict[str, tuple[int, Any]],
              slower: Slower) -> dict[str, Any]:
    """One `harness qualify SPEC --ray ADDRESS --serial`, node `slowed_id` slowed while its shard runs."""
    from harness.cli import main
    from harness.execution import fleet_run

    real = fleet_run.run_shards

    def before(sr: Any) -> None:  # serial: the previous shard has finished when the next one starts
        node_id = sr.shard.node.node_id
        if node_id == slowed_id:
            core, node = nodes[node_id]
            pid = raylet_pid(node)
            slower.start(core, descendants(pid) if pid else [])
        else:
            slower.stop()

    fleet_run.run_shards = lambda *a, **kw: real(*a, **{**kw, "before": before})  # type: ignore[assignment]
    t0 = time.monotonic()
    try:
        code = main(["qualify", str(spec), "--ray", address, "--serial", "--out", str(out)])
    finally:
        fleet_run.run_shards = real  # type: ignore[assignment]
        slower.stop()
    doc = json.loads((out / "fleet-certificate.json").read_text())
    slowed = next(lb for lb in doc["nodes"] if lb.endswith(slowed_id[:8]))
    def dev(figure: str) -> float | None:
        got = [n.get("deviation_pct") for r in doc["fleet"]["rows"] if r["figure"] == figure
               for n in r["nodes"] if n["node"] == slowed]
        return got[0] if got else None

    return {"exit": code, "seconds": round(time.monotonic() - t0, 1), "slowed": slowed,
            "placements": {lb: n["placement"] for lb, n in doc["nodes"].items()},
            "slowed_deviation_pct": dev("p50_ms"), "slowed_p99_deviation_pct": dev("p99_ms")}


def tabulate(trials: list[dict[str, Any]], levels: list[float]) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        got = [t for t in trials if t["level"] == level]
        if not got:
            continue
        slowed = [t["placements"][t["slowed"]] for t in got]
        others = [p for t in got for lb, p in t["placements"].items() if lb != t["slowed"]]
        devs = sorted(t["slowed_deviation_pct"] for t in got if t["slowed_deviation_pct"] is not None)
        p99 = sorted(t.get("slowed_p99_deviation_pct") for t in got if t.get("slowed_p99_deviation_pct") is not None)
        rows.append({"level": level, "trials": len(got),
                     "slowed_found": sum(p == "slow" for p in slowed),
                     "slowed_not_judged": sum(p == "not judged" for p in slowed),
                     "slowed_deviation_pct_median": devs[len(devs) // 2] if devs else None,
                     "slowed_p99_deviation_pct_median": p99[len(p99) // 2] if p99 else None,
                     "other_node_trials": len(others),
                     "others_flagged": sum(p in FLAGS for p in others),
                     "others_not_judged": sum(p == "not judged" for p in others)})
    return rows


def table_text(rows: list[dict[str, Any]], means: str) -> str:
    head = (f"| level ({means}) | trials | slowed node placed slow | placed not judged | its p50 from its peers "
            "(median) | its p99 | other nodes flagged (false flags) | other nodes not judged |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        dev = "-" if r["slowed_deviation_pct_median"] is None else f"{r['slowed_deviation_pct_median']:+.1f}%"
        p99 = r.get("slowed_p99_deviation_pct_median")
        p99_text = "-" if p99 is None else f"{p99:+.1f}%"
        found = "-" if r["level"] == 0 else f"{r['slowed_found']}/{r['trials']} ({100 * r['slowed_found'] / r['trials']:.0f}%)"
        lines.append(f"| {r['level']:g} | {r['trials']} | {found} | {r['slowed_not_judged']} | {dev} | {p99_text} | "
                     f"{r['others_flagged']}/{r['other_node_trials']} | {r['others_not_judged']} |")
    found95 = [r for r in rows if r["level"] > 0 and r["slowed_found"] >= 0.95 * r["trials"]]
    lines.append("smallest level found in 95% of trials: " + (
        f"{found95[0]['level']:g} (the slowed node's p50 {found95[0]['slowed_deviation_pct_median']:+.1f}% from its "
        "peers, median)" if found95 else "none of those measured"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per level (default 20)")
    ap.add_argument("--levels", default="0,0.1,0.2,0.3,0.5",
                    help="slowdown levels: the neighbour's duty cycle, or the share of a CPU the cgroup quota "
                         "takes away (0: nothing slowed)")
    ap.add_argument("--means", choices=("neighbour", "cgroup"), default="neighbour")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--period-ms", type=float, default=10.0, help="the duty cycle's or the quota's period")
    ap.add_argument("--min-time", type=float, default=0.3, help="[measure] min_time of the spec, s per block")
    ap.add_argument("--batch", type=int, default=1, help="the mlp's batch (longer calls: a duty cycle then moves "
                                                          "the p50, not only the p99)")
    ap.add_argument("--contention-limit", help="$HARNESS_CONTENTION_LIMIT for the nodes (1: never contended)")
    ap.add_argument("--out", default="reports/fleet-real")
    args = ap.parse_args(argv)
    levels = [float(x) for x in args.levels.split(",") if x.strip()]
    if args.means == "cgroup" and not cgroup_writable():
        print(f"--means cgroup: {CGROUP} is not writable here; use --means neighbour", file=sys.stderr)
        return 2
    if args.contention_limit is not None:
        os.environ["HARNESS_CONTENTION_LIMIT"] = args.contention_limit  # the nodes inherit it at their start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.toml"
    spec.write_text(SPEC.format(min_time=args.min_time, batch=args.batch))
    cores = sorted(os.sched_getaffinity(0))
    cluster, nodes = start_cluster(args.nodes, cores)
    ids = list(nodes)
    trials: list[dict[str, Any]] = []
    try:
        for level in levels:
            slower = Slower(args.means, level, args.period_ms)
            try:
                for t in range(args.trials):
                    slowed = ids[t % len(ids)]
                    where = out / f"trial-{level:g}-{t + 1:02d}"
                    got = one_trial(spec, cluster.address, where, slowed, nodes, slower)
                    got.update(level=level, trial=t + 1, means=args.means)
                    trials.append(got)
                    print(f"level {level:g} trial {t + 1}: slowed {got['slowed']} placed "
                          f"{got['placements'][got['slowed']]} ({got['slowed_deviation_pct']}%), others "
                          + ", ".join(p for lb, p in got["placements"].items() if lb != got["slowed"])
                          + f"; {got['seconds']} s", flush=True)
            finally:
                slower.close()
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    rows = tabulate(trials, levels)
    text = table_text(rows, args.means)
    print(text)
    (out / "fleet-real.json").write_text(json.dumps({"argv": sys.argv, "cores": cores, "rows": rows,
                                                     "trials": trials}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
