"""Contention of a measurement block from the kernel's records (schedstat run-queue wait, preemptions, PSI, steal
time), read around a timed loop, never inside it; the `contended` verdict and its cause (docs/method.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.results.stored import BlockContention, CaseContentionRecord

# A block is contended when its threads waited for a CPU this share of their runnable time or more. Quiet on
# this 2-core machine: 0-3% (kernel housekeeping, the sampler thread); one busy loop on a core the pool uses:
# 25-60%. See docs/method.md for the calibration runs.
WAIT_FRACTION_LIMIT = 0.10


def default_contention_limit() -> float:
    """WAIT_FRACTION_LIMIT, or $HARNESS_CONTENTION_LIMIT (a fraction; 1 never calls a block contended)."""
    text = (os.environ.get("HARNESS_CONTENTION_LIMIT") or "").strip()
    if not text:
        return WAIT_FRACTION_LIMIT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # read where a run's configuration is made: one line there, never silently 0.10
        from harness.errors import UsageError

        raise UsageError(f"$HARNESS_CONTENTION_LIMIT={text!r}: expected a fraction in [0, 1] (1: never call a "
                         f"block contended; unset: {WAIT_FRACTION_LIMIT:g})")
    return value


# ... and only when the wait is long enough to matter next to the block (not a few slices of a short block)
MIN_WAIT_S = 0.005

# Steal time: inside a VM, the time the hypervisor ran other guests on this VM's CPUs (the 8th number of the
# `cpu` line of /proc/stat). A noisy neighbour shows here, not as run-queue wait. A block is contended when the
# steal over it was this share of its CPUs' time (wall x CPUs) or more ...
STEAL_FRACTION_LIMIT = 0.05
# ... and at least two of the kernel's 10 ms ticks (one tick is the resolution of /proc/stat: one alone in a
# short block is rounding, not a neighbour)
MIN_STEAL_S = 0.02


@dataclass(frozen=True)
class Snapshot:
    wall_ns: int
    run_ns: int | None  # sums over the process's threads (schedstat); None where the kernel has no schedstat
    wait_ns: int | None
    slices: int | None
    cpu_s: float
    involuntary: int | None
    psi_some_us: int | None
    machine_busy_s: float | None = None  # all CPUs' non-idle time (/proc/stat), ours included
    steal_s: float | None = None  # all CPUs' steal time (/proc/stat): the hypervisor ran another guest
    cpus: int | None = None  # the CPUs /proc/stat counts (its cpuN lines)


def _stat_cpu(stat: Path) -> tuple[float | None, float | None, int | None]:
    """(busy seconds, steal seconds, CPUs) from /proc/stat's `cpu` line and its cpuN lines; None where unreadable
    (a kernel without the steal column: no steal figure)."""
    try:
        lines = stat.read_text().splitlines()
        first = lines[0].split()
        if first[0] != "cpu":
            return None, None, None
        ticks = [int(x) for x in first[1:9]]
    except (OSError, ValueError, IndexError):
        return None, None, None
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]  # idle, iowait
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit()) or None
    steal = ticks[7] / hz if len(ticks) >= 8 else None
    return (sum(ticks) - idle) / hz, steal, cpus


def _machine_busy_s(stat: Path) -> float | None:
    return _stat_cpu(stat)[0]


def _schedstat(task_dir: Path) -> tuple[int, int, int] | None:
    run = wait = slices = 0
    seen = False
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    for tid in tids:
        try:
            fields = (task_dir / tid / "schedstat").read_text().split()
        except OSError:  # a thread that ended between listdir and read
            continue
        if len(fields) >= 3:
            run, wait, slices = run + int(fields[0]), wait + int(fields[1]), slices + int(fields[2])
            seen = True
    return (run, wait, slices) if seen else None


def _psi_some_us(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def snapshot(proc: Path = Path("/proc/self"), pressure: Path = Path("/proc/pressure/cpu"),
             stat: Path = Path("/proc/stat")) -> Snapshot:
    """What the kernel says about this process and the machine now (a few hundred microseconds)."""
    sched = _schedstat(proc / "task")
    times = os.times()
    involuntary = None
    try:
        import psutil

        involuntary = psutil.Process().num_ctx_switches().involuntary
    except Exception:  # noqa: BLE001 - a figure we cannot read is absent, never a failed case
        pass
    busy, steal, cpus = _stat_cpu(stat)
    return Snapshot(time.perf_counter_ns(), sched[0] if sched else None, sched[1] if sched else None,
                    sched[2] if sched else None, times.user + times.system, involuntary, _psi_some_us(pressure),
                    busy, steal, cpus)


def figures(before: Snapshot, after: Snapshot, threads: int) -> BlockContention:
    """The block's contention figures (no verdict yet: `classify`): wall_s, cpu_cores, run_s, runqueue_wait_s, wait_fraction,
    involuntary_switches, psi_some (share of the block), steal_s and steal_fraction (the hypervisor's steal over
    the block, a share of wall x CPUs), threads."""
    wall_s = max(1e-9, (after.wall_ns - before.wall_ns) / 1e9)
    out: dict[str, Any] = {"wall_s": round(wall_s, 4), "threads": threads,
                           "cpu_cores": round((after.cpu_s - before.cpu_s) / wall_s, 3)}
    if before.run_ns is not None and after.run_ns is not None and before.wait_ns is not None \
            and after.wait_ns is not None:
        run = max(0, after.run_ns - before.run_ns)
        wait = max(0, after.wait_ns - before.wait_ns)
        out["run_s"] = round(run / 1e9, 6)  # the threads' time on a CPU (schedstat: nanoseconds, not ticks)
        out["runqueue_wait_s"] = round(wait / 1e9, 4)
        out["wait_fraction"] = round(wait / (run + wait), 4) if run + wait else 0.0
    if before.involuntary is not None and after.involuntary is not None:
        out["involuntary_switches"] = after.involuntary - before.involuntary
    if before.machine_busy_s is not None and after.machine_busy_s is not None:
        others = max(0.0, (after.machine_busy_s - before.machine_busy_s) - (after.cpu_s - before.cpu_s))
        out["others_cores"] = round(others / wall_s, 2)  # other processes' CPU use (10 ms ticks: coarse)
        out["cores_free"] = round(max(0.0, (os.cpu_count() or 1) - others / wall_s), 2)
    if before.psi_some_us is not None and after.psi_some_us is not None:
        out["psi_some"] = round(min(1.0, (after.psi_some_us - before.psi_some_us) / 1e6 / wall_s), 4)
    if before.steal_s is not None and after.steal_s is not None:
        steal = max(0.0, after.steal_s - before.steal_s)
        cpus = after.cpus or before.cpus or os.cpu_count() or 1
        out["steal_s"] = round(steal, 4)
        out["steal_fraction"] = round(min(1.0, steal / (wall_s * cpus)), 4)
    return BlockContention(**out)


def classify(block: BlockContention, limit: float = WAIT_FRACTION_LIMIT,
             steal_limit: float = STEAL_FRACTION_LIMIT) -> str | None:
    """The cause in words when the block was contended, else None: its threads waited `limit` of their runnable
    time for a CPU or more (and at least MIN_WAIT_S), or the hypervisor stole `steal_limit` of the CPUs' time or
    more (and at least MIN_STEAL_S); both causes when both. A `limit` of 1 turns the verdict off."""
    if limit >= 1.0:
        return None
    causes = [c for c in (_wait_cause(block, limit), _steal_cause(block, steal_limit)) if c]
    return "; ".join(causes) or None


def _steal_cause(block: BlockContention, steal_limit: float) -> str | None:
    steal = block.steal_fraction
    if steal is None or steal_limit >= 1.0 or steal < steal_limit or (block.steal_s or 0.0) < MIN_STEAL_S:
        return None
    return (f"the hypervisor gave {steal:.0%} of the CPUs' time to other VMs (steal: {block.steal_s:.3g} "
            f"CPU-seconds in a {block.wall_s:.3g} s block)")


def _wait_cause(block: BlockContention, limit: float) -> str | None:
    wait = block.wait_fraction
    if wait is None or wait < limit or (block.runqueue_wait_s or 0.0) < MIN_WAIT_S:
        return None
    free = f", {block.cores_free:.1f} core(s) free" if block.cores_free is not None else ""
    psi = f"; machine CPU pressure {block.psi_some:.0%}" if block.psi_some is not None else ""
    switches = block.involuntary_switches
    preempted = f", preempted {switches} times" if switches else ""
    return (f"{block.threads} thread(s){free}: the worker's threads waited {wait:.0%} of their runnable time "
            f"for a CPU ({block.runqueue_wait_s:.3g} thread-seconds of waiting in a {block.wall_s:.3g} s "
            f"block{preempted}){psi}")


class ContentionProbe:
    """start() after the warm-up, stop() after the timed loop: the block's figures, cause and verdict."""

    def __init__(self, threads: int, limit: float = WAIT_FRACTION_LIMIT, read: Any = snapshot,
                 steal_limit: float = STEAL_FRACTION_LIMIT) -> None:
        self.threads, self.limit, self._read = max(1, int(threads)), limit, read
        self.steal_limit = steal_limit
        self._before: Snapshot | None = None

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> BlockContention | None:
        if self._before is None:
            return None
        out = figures(self._before, self._read(), self.threads)
        self._before = None
        cause = classify(out, self.limit, self.steal_limit)
        return replace(out, contended=cause is not None, cause=cause)


class ContentionTracker:
    """The contention tracker (harness.measure.tracker): a probe around the timed calls of every block, started
    after the block's warm-up; each block's figures in `window.records["contention"]` (the Block record's
    field). The case's own figure is `case_contention` over the blocks it keeps (a block --settle measured
    again is replaced), so this tracker fills no CaseResult field itself."""

    def __init__(self, threads: int, limit: float = WAIT_FRACTION_LIMIT) -> None:
        self.threads, self.limit = threads, limit

    @contextmanager
    def track(self, window: Any) -> Iterator[None]:
        probe = ContentionProbe(self.threads, self.limit)
        window.on_timed(probe.start)
        yield
        window.records["contention"] = probe.stop()

    def fields(self, window: Any) -> dict[str, Any]:
        return {}


NEIGHBOUR_CORES = 0.25  # other processes' CPU use over a block (cores) below which its wait is its own doing


def own_wait(block: BlockContention | None, min_others: float = NEIGHBOUR_CORES) -> BlockContention | None:
    """`block` with a contended verdict taken back when nothing else used the machine: its threads waited, but
    other processes used under `min_others` cores over it and the hypervisor stole nothing (its own threads
    outnumbered the cores, or woke slowly from idle: the configuration's behaviour, which a deployment sees
    too, not the machine's load). The cause is kept as `own_wait`. For replays whose threads sleep between
    requests (harness recommend); the matrix's timed loops never sleep and keep `classify`'s verdict."""
    if not block or not block.contended or block.others_cores is None:
        return block
    if block.others_cores >= min_others or _steal_cause(block, STEAL_FRACTION_LIMIT):
        return block
    return replace(block, contended=False, cause=None, own_wait=block.cause)


def case_contention(blocks: list[BlockContention | None]) -> CaseContentionRecord | None:
    """A case's contention from its blocks': the worst block's figures, how many blocks were contended, and the
    verdict (contended when any block was: its samples are in the case's percentiles)."""
    seen = [b for b in blocks if b]
    if not seen:
        return None
    worst = max(seen, key=lambda b: b.wait_fraction or 0.0)
    contended = [b for b in seen if b.contended]
    return CaseContentionRecord(
        blocks=len(seen), contended_blocks=len(contended), contended=bool(contended),
        wait_fraction_max=worst.wait_fraction,
        psi_some_max=max((b.psi_some for b in seen if b.psi_some is not None), default=None),
        steal_fraction_max=max((b.steal_fraction for b in seen if b.steal_fraction is not None), default=None),
        cause=max(contended, key=lambda b: b.wait_fraction or 0.0).cause if contended else None)


QUIET_WINDOW_S = 0.25  # how long one look at the machine lasts (/proc/stat ticks are 10 ms: 25 of them)


def wait_quiet(threads: int, timeout_s: float, window_s: float = QUIET_WINDOW_S, read: Any = snapshot,
               sleep: Any = time.sleep) -> dict[str, Any]:
    """--settle: look at the machine in windows of `window_s` until as many cores are free of other processes as
    the case has threads (and CPU pressure, where the kernel reports it, under 10%), or `timeout_s` passed.
    Returns what was seen: waited_s, quiet, looks, and the last window's cores_free and psi_some."""
    threads = max(1, int(threads))
    t0 = time.perf_counter()
    looks = 0
    while True:
        before = read()
        sleep(window_s)
        last = figures(before, read(), threads)
        looks += 1
        free, psi = last.cores_free, last.psi_some
        quiet = (free is None or free >= threads - 0.05) and (psi is None or psi < 0.10)
        waited = time.perf_counter() - t0
        if quiet or waited >= timeout_s:
            return {"waited_s": round(waited, 3), "quiet": quiet, "looks": looks,
                    "cores_free": free, "psi_some": psi}
