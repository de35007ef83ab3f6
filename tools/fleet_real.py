"""A real fleet on this machine: a local Ray cluster of one-CPU nodes, each pinned to its own core, one node slowed by
a real means, `harness qualify --ray --serial` per trial; the detection rate, the false flags, the smallest slowdown
found in 95% of trials.

The nodes run one at a time (--serial), each node's processes pinned to core K mod CPUs (the raylet and every
process it starts inherit the driver's CPU affinity at the node's start). In trial t at slowdown level d, node
t mod N is slowed while its shard runs, by one of two real means (--means):

- `neighbour`: a busy process pinned to that node's core, burning d of each --period-ms of CPU time (a duty cycle);
- `quota` (`cgroup`, its old name): the node's processes (its raylet and every descendant) moved into a cgroup-v1
  CPU controller group with a quota of (1 - d) of one CPU per --period-ms (/sys/fs/cgroup/cpu must be writable;
  cgroup v2's cpu.max is not used: on a machine whose cpu controller is v1's, v2 has none).

Either means slows the node's calls only where a call spans the gaps it makes: a call much shorter than --period-ms
is mostly untouched (the p99 moves, the p50 barely), so --batch sets calls of several periods.

Level 0 is the identical fleet (nothing slowed: every flag is a false flag). Both means show in the kernel's
run-queue records, so the harness's contention probe may call the slowed node's blocks contended and place it
`not judged` ("slow but contended"), as it should for a neighbour; `--contention-limit 1` turns that verdict off
(the placement alone). The table counts, per level: the slowed node placed `slow`, `not judged`, `ok` or otherwise,
its measured p50 distance from its peers (median over trials), the other nodes flagged (slow, fast or noisy: false
flags), not judged, or lost, and the trials that ran past --trial-timeout.

It cannot hang: each node's shard has `harness qualify --node-deadline` (a hung node is cut and reported lost, the
stacks of its processes written to the trial's folder when py-spy is installed); each trial has --trial-timeout (the
trial is recorded as timed out, the cluster's every process is killed by pid and a fresh cluster started); past
--trial-timeout + 60 s the tool kills the cluster and exits 3. OUT/fleet-real.json is rewritten after every trial
("complete": false until the end), so a killed run keeps its trials; Ctrl-C ends the cluster and prints the table
of the trials that finished (exit 130).

It needs the [ray] extra and onnxruntime (the zoo's mlp on ort-cpu); it writes OUT/trial-LEVEL-NN/ (each
qualification's folders) and OUT/fleet-real.json, and prints the table (docs/measurements.md has the measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
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


class TrialTimeout(BaseException):
    """A trial past --trial-timeout (a BaseException: no `except Exception` on the way swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float, hard: Any) -> Iterator[None]:
    """TrialTimeout in the main thread after `seconds` (SIGALRM); if the trial is still running HARD_GRACE_S later
    (blocked where no signal handler runs), `hard()` from a watchdog thread (it kills and exits)."""
    def alarm(signum: int, frame: Any) -> None:
        raise TrialTimeout(f"no result within --trial-timeout {seconds:g} s")

    done = threading.Event()
    watchdog = threading.Thread(target=lambda: done.wait(seconds + HARD_GRACE_S) or hard(), daemon=True)
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    watchdog.start()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()


HARD_GRACE_S = 60.0


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


class Fleet:
    """The local cluster, started on demand, and ended with every process it had: `kill()` snapshots this
    process's descendants started since the Fleet was made (gcs_server, raylets, Ray workers, the harness's
    forkservers and workers under them, a busy neighbour), shuts Ray down, then kills by pid whatever of that
    snapshot is still alive."""

    def __init__(self, n: int, cores: list[int]) -> None:
        self.n, self.cores = n, cores
        self.since = time.time() - 1.0  # a process of ours older than the Fleet is not its to kill
        self.cluster: Any = None
        self.nodes: dict[str, tuple[int, Any]] = {}
        self.ids: list[str] = []

    def start(self) -> None:
        if self.cluster is None:  # (again after a timed-out trial: node k of the new one takes node k's turn)
            self.cluster, self.nodes = start_cluster(self.n, self.cores)
            self.ids = list(self.nodes)

    def kill(self) -> list[int]:
        """End the cluster and every process it had; the pids that had to be killed."""
        import psutil

        procs = []
        try:
            for proc in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if proc.create_time() >= self.since:
                        procs.append(proc)
        except psutil.Error:
            pass
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()
        self.cluster, self.nodes = None, {}
        killed = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running():  # is_running checks the create time: never a reused pid
                    proc.kill()
                    killed.append(proc.pid)
        psutil.wait_procs([p for p in procs if p.pid in killed], timeout=10)
        return killed


def raylet_pid(node: Any) -> int | None:
    procs = getattr(node, "all_processes", {}) or {}
    for info in procs.get("raylet", []):
        return int(info.process.pid)
    return None


def stacks(pids: list[int]) -> str:
    """py-spy's dump of each of these processes that runs Python (when py-spy is installed), for a hung node."""
    spy = shutil.which("py-spy")
    if spy is None:
        return "py-spy is not installed: no stacks (pip install py-spy)\n"
    parts = []
    for pid in pids[:12]:
        try:
            got = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
            parts.append(f"=== pid {pid}\n{got.stdout}{got.stderr}")
        except (OSError, subprocess.SubprocessError) as exc:
            parts.append(f"=== pid {pid}: {exc}")
    return "\n".join(parts)


def one_trial(spec: Path, address: str, out: Path, slowed_id: str, nodes: dict[str, tuple[int, Any]],
              slower: Slower, node_deadline: float) -> dict[str, Any]:
    """One `harness qualify SPEC --ray ADDRESS --serial --node-deadline S`, node `slowed_id` slowed while its shard
    runs; a node cut at its deadline has its processes' stacks written to OUT/stacks-NODE.txt first."""
    from harness.cli import main
    from harness.execution import fleet_run, ray_shards

    real = fleet_run.run_shards
    real_lose = ray_shards.ShardRun.lose

    def lose(sr: Any, error: str, note: Any) -> None:
        if error.startswith("no result within") and sr.shard.node.node_id in nodes:
            pid = raylet_pid(nodes[sr.shard.node.node_id][1])
            with contextlib.suppress(OSError):
                out.mkdir(parents=True, exist_ok=True)
                (out / f"stacks-{sr.shard.node.label}.txt").write_text(stacks(descendants(pid)[1:] if pid else []))
        real_lose(sr, error, note)

    def before(sr: Any) -> None:  # serial: the previous shard has finished when the next one starts
        node_id = sr.shard.node.node_id
        if node_id == slowed_id:
            core, node = nodes[node_id]
            pid = raylet_pid(node)
            slower.start(core, descendants(pid) if pid else [])
        else:
            slower.stop()

    fleet_run.run_shards = lambda *a, **kw: real(*a, **{**kw, "before": before})  # type: ignore[assignment]
    ray_shards.ShardRun.lose = lose  # type: ignore[method-assign]
    t0 = time.monotonic()
    try:
        code = main(["qualify", str(spec), "--ray", address, "--serial", "--node-deadline", f"{node_deadline:g}",
                     "--out", str(out)])
    finally:
        fleet_run.run_shards = real  # type: ignore[assignment]
        ray_shards.ShardRun.lose = real_lose  # type: ignore[method-assign]
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


SLOWED_SEEN = ("slow", "not judged", "ok")  # the slowed node's placements counted apart; any other is "other"


def tabulate(trials: list[dict[str, Any]], levels: list[float]) -> list[dict[str, Any]]:
    """Per level: the slowed node's placements (slow: found; not judged: seen as contended; ok: missed; other:
    fast, noisy, lost, wrong results, or the trial timed out), its p50 and p99 distance from its peers (medians over
    trials), and the other nodes' placements (flagged slow/fast/noisy: false flags; not judged; lost)."""
    rows = []
    for level in sorted(set(levels)):  # ascending: the smallest level found is the first row found
        got = [t for t in trials if t["level"] == level]
        if not got:
            continue
        slowed = ["timed out" if t.get("timed_out") else t["placements"].get(t["slowed"], "?") for t in got]
        others = [p for t in got for lb, p in t["placements"].items() if lb != t["slowed"]]
        devs = sorted(t["slowed_deviation_pct"] for t in got if t.get("slowed_deviation_pct") is not None)
        p99 = sorted(t["slowed_p99_deviation_pct"] for t in got if t.get("slowed_p99_deviation_pct") is not None)
        rows.append({"level": level, "trials": len(got),
                     "slowed_found": sum(p == "slow" for p in slowed),
                     "slowed_not_judged": sum(p == "not judged" for p in slowed),
                     "slowed_ok": sum(p == "ok" for p in slowed),
                     "slowed_other": sum(p not in SLOWED_SEEN for p in slowed),
                     "slowed_deviation_pct_median": devs[len(devs) // 2] if devs else None,
                     "slowed_p99_deviation_pct_median": p99[len(p99) // 2] if p99 else None,
                     "other_node_trials": len(others),
                     "others_flagged": sum(p in FLAGS for p in others),
                     "others_not_judged": sum(p == "not judged" for p in others),
                     "others_lost": sum(p == "lost" for p in others),
                     "timed_out": sum(bool(t.get("timed_out")) for t in got)})
    return rows


def table_text(rows: list[dict[str, Any]], means: str) -> str:
    def pct(r: dict[str, Any], key: str) -> str:
        return f"{r[key]}/{r['trials']} ({100 * r[key] / r['trials']:.0f}%)"

    def signed(v: float | None) -> str:
        return "-" if v is None else f"{v:+.1f}%"

    lines = [f"| level ({means}) | trials | slowed node: slow (found) | not judged | ok (missed) | other | its p50 "
             "from its peers (median) | its p99 | other nodes flagged (false flags) | not judged | lost | trials "
             "timed out |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        slowed = (["-", "-", "-", "-"] if r["level"] == 0 else
                  [pct(r, "slowed_found"), pct(r, "slowed_not_judged"), pct(r, "slowed_ok"), str(r["slowed_other"])])
        lines.append(f"| {r['level']:g} | {r['trials']} | {' | '.join(slowed)} | "
                     f"{signed(r['slowed_deviation_pct_median']) if r['level'] else '-'} | "
                     f"{signed(r['slowed_p99_deviation_pct_median']) if r['level'] else '-'} | "
                     f"{r['others_flagged']}/{r['other_node_trials']} | {r['others_not_judged']} | "
                     f"{r['others_lost']} | {r['timed_out']} |")
    found95 = [r for r in rows if r["level"] > 0 and r["slowed_found"] >= 0.95 * r["trials"]]
    lines.append("smallest level found in 95% of trials: " + (
        f"{found95[0]['level']:g} (the slowed node's p50 {signed(found95[0]['slowed_deviation_pct_median'])} from "
        "its peers, median)" if found95 else "none of those measured"))
    return "\n".join(lines)


def write_partial(out: Path, doc: dict[str, Any], trials: list[dict[str, Any]], levels: list[float],
                  complete: bool) -> None:
    """OUT/fleet-real.json with the trials so far and their table (atomically: a killed run leaves a whole file)."""
    body = json.dumps({**doc, "complete": complete, "rows": tabulate(trials, levels), "trials": trials}, indent=1)
    tmp = out / "fleet-real.json.tmp"
    tmp.write_text(body)
    os.replace(tmp, out / "fleet-real.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per level (default 20)")
    ap.add_argument("--levels", default="0,0.1,0.2,0.3,0.5",
                    help="slowdown levels: the neighbour's duty cycle, or the share of a CPU the quota takes away "
                         "(0: nothing slowed)")
    ap.add_argument("--means", choices=("neighbour", "quota", "cgroup"), default="neighbour",
                    help="how the node is slowed (cgroup: the old name of quota)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--period-ms", type=float, default=10.0, help="the duty cycle's or the quota's period")
    ap.add_argument("--min-time", type=float, default=0.3, help="[measure] min_time of the spec, s per block")
    ap.add_argument("--batch", type=int, default=1, help="the mlp's batch (longer calls: a duty cycle then moves "
                                                          "the p50, not only the p99)")
    ap.add_argument("--contention-limit", help="$HARNESS_CONTENTION_LIMIT for the nodes (1: never contended)")
    ap.add_argument("--node-deadline", type=float, default=90.0,
                    help="harness qualify --node-deadline, s: a node's shard past it is cut and the node lost "
                         "(default 90; a quiet shard takes about 5 s here)")
    ap.add_argument("--trial-timeout", type=float,
                    help="s per trial (default: nodes x --node-deadline + 60); past it the trial is recorded as "
                         "timed out and the cluster restarted")
    ap.add_argument("--out", default="reports/fleet-real")
    args = ap.parse_args(argv)
    levels = [float(x) for x in args.levels.split(",") if x.strip()]
    means = "quota" if args.means == "cgroup" else args.means
    if means == "quota" and not cgroup_writable():
        print(f"--means quota: {CGROUP} (cgroup v1's cpu controller) is not writable here; use --means neighbour",
              file=sys.stderr)
        return 2
    if args.contention_limit is not None:
        os.environ["HARNESS_CONTENTION_LIMIT"] = args.contention_limit  # the nodes inherit it at their start
    trial_timeout = args.trial_timeout or args.nodes * args.node_deadline + 60.0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.toml"
    spec.write_text(SPEC.format(min_time=args.min_time, batch=args.batch))
    cores = sorted(os.sched_getaffinity(0))
    doc = {"argv": sys.argv, "cores": cores, "means": means, "period_ms": args.period_ms, "batch": args.batch,
           "node_deadline_s": args.node_deadline, "trial_timeout_s": trial_timeout}
    fleet = Fleet(args.nodes, cores)
    trials: list[dict[str, Any]] = []
    slower = Slower(means, 0.0, args.period_ms)

    def hard() -> None:  # the trial is stuck where no signal reaches: kill everything, keep what finished
        print(f"trial still running {HARD_GRACE_S:g} s past --trial-timeout: killing the cluster and exiting",
              file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            slower.close()
        fleet.kill()
        os._exit(3)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # the finally below ends the cluster

    signal.signal(signal.SIGTERM, on_term)
    write_partial(out, doc, trials, levels, complete=False)
    stopped = ""
    try:
        fleet.start()
        for level in levels:
            slower.close()
            slower = Slower(means, level, args.period_ms)
            for t in range(args.trials):
                fleet.start()
                slowed = fleet.ids[t % len(fleet.ids)]
                where = out / f"trial-{level:g}-{t + 1:02d}"
                t0 = time.monotonic()
                try:
                    with time_limit(trial_timeout, hard):
                        got = one_trial(spec, fleet.cluster.address, where, slowed, fleet.nodes, slower,
                                        args.node_deadline)
                except (TrialTimeout, Exception) as exc:  # noqa: BLE001 - a trial that broke is recorded, never the run's end
                    slower.stop()
                    killed = fleet.kill()
                    why = str(exc) if isinstance(exc, TrialTimeout) else f"{type(exc).__name__}: {exc}"[:300]
                    got = {"timed_out": why, "slowed": f"?-{slowed[:8]}", "placements": {},
                           "seconds": round(time.monotonic() - t0, 1), "killed_pids": len(killed)}
                got.update(level=level, trial=t + 1, means=means)
                trials.append(got)
                write_partial(out, doc, trials, levels, complete=False)
                if got.get("timed_out"):
                    print(f"level {level:g} trial {t + 1}: NO RESULT ({got['timed_out']}); {len(killed)} "
                          "process(es) of the cluster killed, a fresh cluster for the next trial", flush=True)
                    continue
                print(f"level {level:g} trial {t + 1}: slowed {got['slowed']} placed "
                      f"{got['placements'][got['slowed']]} ({got['slowed_deviation_pct']}%), others "
                      + ", ".join(p for lb, p in got["placements"].items() if lb != got["slowed"])
                      + f"; {got['seconds']} s", flush=True)
    except KeyboardInterrupt:  # Ctrl-C: the table of the trials that finished, marked incomplete
        stopped = f"interrupted after {len(trials)} trial(s): the table below is of those"
    finally:
        with contextlib.suppress(Exception):
            slower.close()
        fleet.kill()
    if stopped:
        print(stopped)
    print(table_text(tabulate(trials, levels), means))
    write_partial(out, doc, trials, levels, complete=not stopped)
    return 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
