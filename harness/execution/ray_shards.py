"""`harness run --ray`: the matrix sharded over a Ray cluster's nodes, one shard per node, merged into one folder."""

from __future__ import annotations

import contextlib
import errno

import fnmatch
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError, install_hint
from harness.results.schema import BROKEN, CaseId, CaseResult, RunResults
from harness.results.store import ResultsWriter, atomic_write_text, write_results
from harness.results.stored import RunEnvironmentRecord
from harness.workloads import get_workload

ENV_PREFIXES = ("HARNESS_",)  # the driver's HARNESS_* variables (plugins, cache) travel to every shard


def required_resource(runtime: str, rules: Sequence[tuple[str, str]]) -> str:
    """The resource a runtime's cases need: the first matching --placement rule, else GPU for a runtime whose
    device is cuda, else CPU."""
    for glob, resource in rules:
        if fnmatch.fnmatchcase(runtime, glob):
            return resource
    from harness.runtimes import get_runtime

    try:
        return "GPU" if get_runtime(runtime).device == "cuda" else "CPU"
    except UsageError:  # an unknown runtime: its cases report that themselves, on any node
        return "CPU"


@dataclass
class Node:
    node_id: str
    address: str
    resources: dict[str, float]

    @property
    def label(self) -> str:
        return f"{self.address}-{self.node_id[:8]}"


# What runs a shard's cases on its node: (the node's session, the cases) -> each case's row as it finishes. A
# picklable callable (it travels to the node with the task); None runs each case through the session.
ShardWork = Callable[[Any, Sequence[CaseId]], Iterator[CaseResult]]


@dataclass
class Shard:
    node: Node
    cases: list[CaseId] = field(default_factory=list)


def plan_shards(cases: Sequence[CaseId], nodes: Sequence[Node], rules: Sequence[tuple[str, str]],
                ) -> tuple[list[Shard], list[CaseResult]]:
    """Cases grouped by activation (model, runtime, precision: they share one session), each group on the
    least-loaded node that has the resource it needs; cases no node can take are skips with the reason."""
    shards = [Shard(n) for n in nodes]
    groups: dict[tuple[Any, ...], list[CaseId]] = {}
    for c in cases:
        groups.setdefault(c.activation_key, []).append(c)
    unplaced = []
    for group in groups.values():
        need = required_resource(group[0].runtime, rules)
        fit = [s for s in shards if s.node.resources.get(need, 0) > 0]
        if not fit:
            unplaced += [CaseResult(c, "skipped", reason=f"no node in the Ray cluster has the resource {need!r} "
                                                       f"that runtime {c.runtime} needs (--placement)")
                         for c in group]
            continue
        min(fit, key=lambda s: len(s.cases)).cases.extend(group)
    return [s for s in shards if s.cases], unplaced


def measuring_priority(driver: int, tasks: Path = Path("/proc/self/task"), get: Callable[..., int] = os.getpriority,
                       set_: Callable[..., None] = os.setpriority) -> dict[str, Any]:
    """On a node: every thread of this process set to the driver's niceness `driver`, so the node measures at the
    priority the local command would. Ray starts its workers at niceness 15 (the raylet's worker_niceness): a
    shard left there yields to every process at 0 beside it (two busy loops left its set-up 3% of a core: 88 s
    where the local command took 14, so a 90 s load was gone before its first probe; docs/measurements.md). The
    threads started later, and the workers they start, inherit it. Lowering a niceness needs the privilege to
    (root, CAP_SYS_NICE or RLIMIT_NICE); without it the niceness stays, said. Returns {"driver", "ray_worker",
    "measuring"} and "why" where the node could not take the driver's."""
    before = get(os.PRIO_PROCESS, 0)
    out: dict[str, Any] = {"driver": driver, "ray_worker": before, "measuring": before}
    if before == driver:
        return out
    try:
        tids = [int(t) for t in os.listdir(tasks)]
    except OSError:
        tids = [0]  # no /proc: this thread alone
    try:
        for tid in tids:
            try:
                set_(os.PRIO_PROCESS, tid, driver)
            except ProcessLookupError:  # a thread that ended between listdir and here
                continue
    except OSError as exc:  # PermissionError: no privilege to lower a niceness; put back what was set
        for tid in tids:
            try:
                set_(os.PRIO_PROCESS, tid, before)
            except OSError:
                pass
        out["why"] = (f"{type(exc).__name__}: {exc.strerror or exc}: start the node's raylet with "
                      f"RAY_worker_niceness={driver} (`RAY_worker_niceness={driver} ray start ...`)")
        return out
    out["measuring"] = get(os.PRIO_PROCESS, 0)
    return out


def priority_line(label: str, record: Any) -> str | None:
    """The driver's line for a node that measures at another niceness than the driver (None: the same)."""
    if not isinstance(record, dict) or record.get("measuring") == record.get("driver"):
        return None
    return (f"[{label}] measures at niceness {record.get('measuring')}, not the driver's {record.get('driver')} "
            f"(Ray's worker niceness; {record.get('why') or 'not lowered'}): beside a busy process its figures and "
            "its set-up yield to it, and are slower than the local command's")


def shard_events(config: RunConfig, cases: Sequence[CaseId], node_defaults: Sequence[str] = (),
                 golden: dict[str, bytes] | None = None, work: ShardWork | None = None,
                 niceness: int | None = None) -> Iterator[tuple[str, Any]]:
    """On a node: the shard under the harness's own session (supervised workers, rounds), yielding
    ("env", snapshot) first, ("case", CaseResult dict) as each case finishes, then ("run", results JSON).
    `node_defaults`: fields the driver left at its own machine's default (threads, case_memory_gb), taken
    from this node's instead. `golden`: the files of a golden-output store (harness qualify), written on the node
    and compared there. `work`: what runs the cases on the node (default: each through the session, as `harness
    run` does; `harness gate --ray` gives its A/B driver). `niceness`: the driver's; the shard and its workers run
    at it (measuring_priority; the run's environment records it as "niceness")."""
    import tempfile

    from harness.execution.session import HarnessSession
    from harness.plugins import load_plugins

    priority = measuring_priority(niceness) if niceness is not None else None  # before any worker starts
    load_plugins()  # a plugin runtime or model is resolved in this process too (the CLI loaded them on the driver)
    local: dict[str, Any] = {k: v() for k, v in _machine_defaults().items() if k in node_defaults}
    out = Path(tempfile.mkdtemp(prefix="harness-shard-"))
    if golden:
        store = out / "golden-store"
        store.mkdir()
        for name, blob in golden.items():
            (store / Path(name).name).write_bytes(blob)
        local["golden_dir"] = str(store)
    session = HarnessSession(config.replace(out_dir=out, baseline=None, history=None, **local))
    session.start()
    assert session.run is not None
    if priority is not None:
        session.run.environment.add(niceness=priority)
    yield "env", {"environment": session.run.environment.as_dict(), "started_at": session.run.started_at}
    yield "state", {"start": _machine_state()}
    rows = work(session, cases) if work is not None else (session.execute(case) for case in cases)
    for result in rows:
        yield "case", result.as_dict()
    session.finish(interrupted=False)
    yield "state", {"end": _machine_state()}  # the node's clocks and temperatures (a burn-in's rounds draw them)
    yield "run", session.run.to_json()


def _machine_state() -> dict[str, Any]:
    from harness.measure.machine_state import machine_state

    try:
        return machine_state()
    except Exception as exc:  # noqa: BLE001 - a sensor that cannot be read never costs the shard
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def _machine_defaults() -> dict[str, Callable[[], Any]]:
    from harness.measure.memory import default_case_memory_gb
    from harness.results.environment import default_threads

    return {"threads": default_threads, "case_memory_gb": default_case_memory_gb}


def _shard_task(config: RunConfig, cases: Sequence[CaseId], node_defaults: Sequence[str],
                golden: dict[str, bytes] | None = None, work: ShardWork | None = None,
                niceness: int | None = None) -> Iterator[tuple[str, Any]]:
    yield from shard_events(config, cases, node_defaults, golden, work, niceness)


def _ray_task() -> Any:
    import ray

    return ray.remote(num_returns="streaming", max_retries=0)(_shard_task)


def cluster_nodes() -> list[Node]:
    import ray

    return [Node(n["NodeID"], str(n.get("NodeManagerAddress", "?")), dict(n.get("Resources") or {}))
            for n in ray.nodes() if n.get("Alive")]


@dataclass(frozen=True)
class ShardDeadline:
    """How long a node's shard may run before it is cancelled and the node reported lost (`harness qualify
    --ray`: every node runs the same cases, so its peers' times say what a shard needs).

    `fixed_s` (--node-deadline): that many seconds, for every node. Otherwise FACTOR x the median time of the
    shards that finished so far (never under FLOOR_S, which leaves room for a runtime environment or artifact a
    node builds that its peers had cached), capped by what the harness's own limits allow a shard: `blocks`
    measurement blocks (cases x --repeats) of at most --case-timeout each, plus START_S; before any peer has
    finished, that cap alone."""

    blocks: int
    case_timeout_s: float
    fixed_s: float | None = None

    FACTOR = 10.0
    FLOOR_S = 300.0
    START_S = 60.0

    def seconds(self, finished: Sequence[float]) -> tuple[float, str]:
        """The deadline now, with its basis in words, from the finished peers' shard times (s)."""
        if self.fixed_s is not None:
            return self.fixed_s, "--node-deadline"
        cap = self.blocks * self.case_timeout_s + self.START_S
        cap_text = (f"{self.blocks} block(s) x --case-timeout {self.case_timeout_s:g} s + {self.START_S:g} s, "
                    "the longest a shard may run")
        if not finished:
            return cap, cap_text
        median = statistics.median(finished)
        peer = max(self.FLOOR_S, self.FACTOR * median)
        if peer >= cap:
            return cap, cap_text
        return peer, (f"{self.FACTOR:g} x the median {median:.1f} s of {len(finished)} finished node(s), at least "
                      f"{self.FLOOR_S:g} s")


class ShardRun:
    """One node's shard as it arrives: its run (environment from the node), finished cases, and what a dead
    node costs (the cases it had not finished, status crashed with the reason)."""

    def __init__(self, config: RunConfig, shard: Shard, out_dir: Path, case_lines: bool = True) -> None:
        self.shard, self.out_dir = shard, out_dir / shard.node.label
        self.case_lines = case_lines  # False: only a case that broke (crashed, timeout, oom) gets its line
        self.config = config.replace(run_id=f"{config.outputs.run_id}-{shard.node.label}")
        self.run = RunResults(run_id=self.config.outputs.run_id, started_at="", config={
            **config.as_dict(), "ray_node": shard.node.node_id}, environment=RunEnvironmentRecord(
            hostname=shard.node.address, machine=f"ray node {shard.node.label}"))
        self.error: str | None = None
        self.machine: dict[str, Any] = {}  # the node's machine state at the shard's start and end
        self.started: float | None = None  # time.monotonic() when its task was sent
        self.seconds: float | None = None  # how long the shard took, once its complete run arrived
        self.closed = False  # cut at its deadline, or the driver stopped: events arriving after that are dropped
        self.streamed: list[CaseResult] = []  # every row as it arrived (gate-check --ray: a case once per trial)
        self.writer = ResultsWriter(self.out_dir)  # OUT/NODE/results.json
        self._lock = threading.Lock()

    def consume(self, events: Iterator[Any], get: Callable[[Any], Any], note: Callable[[str], None]) -> None:
        try:
            for ref in events:
                event = get(ref)
                with self._lock:
                    if self.closed:
                        return
                    self._apply(*event, note)
        except Exception as exc:  # noqa: BLE001 - a dead node, a lost worker, a failed task, a refused results
            # file: whatever it is, it costs this shard's unfinished cases only, never the run
            cause = getattr(exc, "cause", None)  # a RayTaskError: what the task raised on the node
            text = str(cause if isinstance(cause, BaseException) else exc).strip().splitlines()
            what = f"{type(exc).__name__}({type(cause).__name__})" if isinstance(cause, BaseException) else \
                type(exc).__name__
            self.lose(f"{what}: {text[0] if text else ''}"[:500], note)

    def lose(self, error: str, note: Callable[[str], None]) -> None:
        """The node's shard ends here (its node died, or it was cut at its deadline): the cases it had not
        finished become crashed with `error`, its run incomplete; nothing that arrives later is taken."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.error = error
            done = {c.case for c in self.run.cases}
            for case in self.shard.cases:
                if case not in done:
                    self.run.cases.append(CaseResult(case, "crashed", phase="shard", reason=(
                        f"ray node {self.shard.node.label} lost before this case finished: {self.error}")))
            self.run.complete = False
            self._save()
        note(f"[{self.shard.node.label}] shard lost ({self.error}): "
             f"{len(self.shard.cases) - len(done)} case(s) marked crashed")

    def _apply(self, kind: str, payload: Any, note: Callable[[str], None]) -> None:
        from harness.report.progress import case_line
        from harness.results.schema import load_results

        if kind == "env":
            self.run.environment = RunEnvironmentRecord.from_dict(
                {**payload["environment"], "ray_node": self.shard.node.node_id},
                f"ray node {self.shard.node.label}: its snapshot")
            self.run.started_at = payload["started_at"]
            line = priority_line(self.shard.node.label, payload["environment"].get("niceness"))
            if line:
                note(line)
        elif kind == "state":
            self.machine.update(payload)
            return
        elif kind == "case":
            result = CaseResult.from_dict(payload, f"{self.shard.node.label}: a case's result")
            self.run.cases.append(result)
            self.streamed.append(result)
            if self.case_lines or result.status in ("crashed", "timeout", "oom"):
                note(f"[{self.shard.node.label}] {case_line(result)}")
        else:
            write = self.out_dir / "results.json"
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(write, payload)  # a killed driver never leaves half a file
            final = load_results(write)  # through the one strict reader, like any stored run
            final.environment.add(ray_node=self.shard.node.node_id)
            self.run = final
            if self.started is not None:
                self.seconds = time.monotonic() - self.started
        self._save(every=kind != "case")

    def _save(self, every: bool = True) -> None:
        self.writer.save(self.run, every)  # a streamed case's row: at most SAVE_SHARE of the time (ResultsWriter)


PROBE_TIMEOUT_S = 5.0


def probe_address(address: str | None, timeout: float | None = None) -> None:
    """A UsageError within `timeout` seconds when nothing listens at the cluster's address (HOST:PORT, the GCS,
    or ray://HOST:PORT, the Ray Client server): a plain TCP connect before ray.init, which would otherwise
    retry for minutes behind Ray's own warnings. `auto` is probed through $RAY_ADDRESS when that is set (else
    Ray itself says at once that no cluster runs here)."""
    import socket

    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    target = os.environ.get("RAY_ADDRESS", "") if (address or "auto") in ("auto", "") else str(address)
    if not target or target in ("auto", "local"):
        return
    hostport = target.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port_text = hostport.rpartition(":")
    if not sep or not port_text.isdigit():
        raise UsageError(f"--ray {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    host = host.strip("[]")
    try:
        conn = socket.create_connection((host, int(port_text)), timeout=timeout)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise UsageError(f"--ray {address}: nothing answers at {host}:{port_text} ({why}); start the cluster "
                         f"(`ray start --head --port {port_text}`) or give its address") from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0") not in ("", "0"):
            return  # a TLS cluster answers the handshake first: only the connect is checked
        not_ray = _not_grpc(conn, timeout)
    if not_ray:
        raise UsageError(f"--ray {address}: {host}:{port_text} answers but is not a Ray cluster ({not_ray}); give "
                         "the head's GCS address (HOST:6379 by default, as `ray start --head` prints it) or "
                         "ray://HOST:10001 for the Ray Client server")


# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5)
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _not_grpc(conn: Any, timeout: float) -> str:
    """"" when the peer speaks HTTP/2 as gRPC servers do (Ray's GCS and its Client server are gRPC): its first
    frame is a SETTINGS frame on stream 0. Otherwise what it is instead, in a few words (an HTTP/1 server, a
    peer that closed the connection, or one that said nothing within `timeout` s), so that ray.init is never
    handed an address where it would retry for minutes."""
    first = b""
    try:
        conn.settimeout(timeout)
        conn.sendall(_H2_PREFACE)
        deadline = time.monotonic() + timeout
        while len(first) < 9 and time.monotonic() < deadline:
            chunk = conn.recv(9 - len(first))
            if not chunk:
                break
            first += chunk
    except TimeoutError:
        if not first:
            return f"it said nothing within {timeout:g} s of the HTTP/2 greeting that Ray's gRPC answers"
    except OSError as exc:
        if exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED):  # it hung up while we wrote or read
            return "it closed the connection without a reply to the HTTP/2 greeting that Ray's gRPC answers"
        return f"the connection failed: {exc.strerror or type(exc).__name__}"
    if len(first) >= 9 and first[3] == 0x04 and first[5:9] == b"\x00\x00\x00\x00":
        return ""
    if first and all(32 <= b < 127 or b in (9, 10, 13) for b in first):  # text: an HTTP/1 server, a shell...
        try:
            conn.settimeout(min(timeout, 1.0))
            first += conn.recv(200)
        except OSError:
            pass
        line = (first.decode("ascii", "replace").strip().splitlines() or [""])[0][:60]
        kind = "an HTTP/1 server" if line.startswith(("HTTP/", "<")) else "a text protocol"
        return f"{kind}: it answered {line!r}"
    if not first:
        return "it closed the connection without a reply to the HTTP/2 greeting that Ray's gRPC answers"
    return f"it answered {first[:9]!r}, not the HTTP/2 SETTINGS frame of Ray's gRPC"


def merged_run(config: RunConfig, runs: Sequence[RunResults]) -> RunResults:
    """The nodes' runs as one run for OUT/results.json (as a local run writes it): every case once (a case runs
    on one node), `details.ray_node` naming where; the environment of the first node that ran cases, with
    every node's snapshot under `ray_nodes`; complete when every node's run is."""
    import copy

    def label(r: RunResults) -> str:  # a node's run is RUN-NODE; the unplaced cases' run is RUN
        return r.run_id.removeprefix(f"{config.outputs.run_id}-") if r.run_id != config.outputs.run_id \
            else "unplaced"

    measured = [r for r in runs if r.environment.extra("ray_node")] or list(runs)
    environment = copy.deepcopy(measured[0].environment) if measured else RunEnvironmentRecord()
    environment.ray_nodes = {label(r): r.environment.as_dict() for r in measured}
    cases = []
    for r in runs:
        for c in r.cases:
            c = copy.copy(c)
            c.details = {**(c.details or {}), "ray_node": label(r)}
            cases.append(c)
    started = sorted(r.started_at for r in runs if r.started_at)
    finished = sorted(r.finished_at for r in runs if r.finished_at)
    return RunResults(run_id=config.outputs.run_id, started_at=started[0] if started else "",
                      finished_at=finished[-1] if finished else None, config=config.as_dict(),
                      environment=environment, cases=cases, complete=all(r.complete for r in runs),
                      interrupted=any(r.interrupted for r in runs),
                      harness_version=next((r.harness_version for r in runs if r.harness_version), ""))


def connect(address: str | None) -> list[Node]:
    """Probe and join the cluster at `address` (auto, HOST:PORT, ray://HOST:PORT); its alive nodes. A UsageError
    in one line when Ray is missing, nothing (or not Ray) answers there, or the cluster has no alive node."""
    probe_address(address)
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray: {install_hint('ray')}") from None
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    # A driver already connected (qualify --burn-in connects once per round) calls no ray.init again: ray.init
    # installs Ray's own SIGTERM handler (sys.exit(15): no line, no files) at every call, connected or not, over
    # the command's signal rule (harness.execution.fleet_run.fleet_signals). And the handler the command had is put
    # back after it: a SIGTERM outside a wait on the nodes (ShardSignals: the merge, the verdict's files, the
    # summary) then ends a --ray command as it ends the local one, never with Ray's exit status 15
    if not ray.is_initialized():
        try:
            with _sigterm_kept():
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                         runtime_env={"env_vars": env} if env else None)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            text = str(exc).strip().splitlines()
            raise UsageError(f"--ray {address}: cannot connect: {type(exc).__name__}: "
                             f"{text[0] if text else ''}") from None
    nodes = cluster_nodes()
    if not nodes:
        raise UsageError(f"--ray {address}: the cluster has no alive node")
    return nodes


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """SIGTERM handled after the block as before it, whatever the block installed (ray.init: Ray's own handler).
    Only the main thread may set a handler; elsewhere, or for a handler not set from Python, nothing is done."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    kept = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if kept is not None:
            signal.signal(signal.SIGTERM, kept)


def run_shards(config: RunConfig, shards: Sequence[Shard], note: Callable[[str], None] = print,
               serial: bool = False, before: Callable[[ShardRun], None] | None = None,
               golden: dict[str, bytes] | None = None, deadline: ShardDeadline | None = None,
               work: ShardWork | None = None, node_defaults: Sequence[str] | None = None,
               case_lines: bool = True) -> list[ShardRun]:
    """Each shard as one Ray task on its node (node affinity, no retries, all of the node's CPUs and GPUs),
    streamed into out_dir/NODE/results.json as its cases finish. `serial`: one node at a time (nodes that share
    a machine's cores then do not disturb each other's timing); `before(shard_run)` is called as each starts;
    `golden`: a golden-output store's files, sent to every node; `deadline`: a shard still running past it is
    cancelled (its Ray worker killed) and its node lost with the reason ("no result within N s"); `work`: what
    runs a shard's cases on its node (shard_events); `node_defaults`: the fields each node takes from its own
    machine (default: threads and case_memory_gb where the driver left them at its own machine's default);
    `case_lines`: False notes only the cases that broke (`harness conform --ray`: thousands of cases)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = _ray_task()
    runs = [ShardRun(config, s, config.outputs.out_dir, case_lines) for s in shards]
    lock = threading.Lock()

    def locked_note(line: str) -> None:
        with lock:
            note(line)

    current = {"threads": config.measure.threads, "case_memory_gb": config.process.case_memory_gb}
    if node_defaults is None:
        node_defaults = [k for k, v in _machine_defaults().items() if current[k] == v()]
    running: list[tuple[ShardRun, threading.Thread, Any]] = []
    try:
        for sr in runs:
            if before is not None:
                before(sr)
            res = sr.shard.node.resources
            try:
                events = task.options(
                    num_cpus=res.get("CPU", 0), num_gpus=res.get("GPU", 0),
                    scheduling_strategy=NodeAffinitySchedulingStrategy(sr.shard.node.node_id, soft=False),
                ).remote(sr.config, sr.shard.cases, node_defaults, golden, work,
                         os.getpriority(os.PRIO_PROCESS, 0))
            except Exception as exc:  # noqa: BLE001 - a node gone before its task could be placed: its cases lost
                events = _failing(exc)
            sr.started = time.monotonic()
            t = threading.Thread(target=sr.consume, args=(events, ray.get, locked_note), daemon=True)
            t.start()
            running.append((sr, t, events))
            if serial:
                _wait(running[-1:], runs, deadline, locked_note)
        _wait(running, runs, deadline, locked_note)
    except BaseException:  # a signal (SignalStop, Ctrl-C) stopped the wait: the caller writes what arrived
        stop_shards(running)
        raise
    return runs


def stop_shards(running: Sequence[tuple[ShardRun, threading.Thread, Any]]) -> None:
    """The driver stops waiting (a signal): each shard closed as it stands (a row arriving after this is dropped:
    its run and OUT/NODE/results.json hold what arrived, never a crashed row for the cancelled rest) and its Ray
    task cancelled, so no node keeps measuring (and holding its CPUs) for a driver that has stopped."""
    for sr, _t, _events in running:
        sr.closed = True  # a plain flag (no lock: the signal may have come while a row was being taken)
    for _sr, _t, events in running:
        _cancel(events)


class ShardSignals:
    """The local commands' signal rule (HarnessSession's) around a driver's wait on its nodes' shards, one for every
    `--ray` command that waits on run_shards (run, run --baseline, gate, gate-check --nightly, qualify, conform),
    its handlers installed as the wait starts (after ray.init's own) and kept until the block ends: the first
    SIGINT or SIGTERM stops the wait (run_shards closes every shard and cancels its Ray task), `wait`
    then returns the shards that started as what arrived, and a signal after the wait waits for the files (it is
    recorded, not raised). Use: `with ShardSignals(config, note) as sig: runs = sig.wait(lambda before:
    run_shards(..., before=before))`, then write what arrived and exit `sig.exit_status()` (130 / 143)."""

    def __init__(self, config: RunConfig, note: Callable[[str], None] = print) -> None:
        from harness.execution.session import HarnessSession

        self.guard = HarnessSession(config)  # no case runs here: its signal rule only
        self.note = note
        self.started: list[ShardRun] = []
        self.signum: int | None = None  # the signal that stopped the wait
        self._watched: Any = None  # the session's signals_watched(), entered by wait()

    def __enter__(self) -> ShardSignals:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._watched is not None:
            self._watched.__exit__(*exc)

    def watch(self) -> None:
        """The handlers installed as the wait starts (once), after connect() (which keeps the command's SIGTERM
        handler over the one ray.init installs)."""
        if self._watched is None:
            self._watched = self.guard.signals_watched()
            self._watched.__enter__()

    def wait(self, start: Callable[[Callable[[ShardRun], None]], Sequence[ShardRun]]) -> list[ShardRun]:
        """`start(before)` runs the shards (run_shards with that `before`). Its shards when the wait ends; when a
        signal stops it, every shard that started, each run a snapshot of the rows that arrived (one not finished
        marked interrupted, not complete, and its OUT/NODE/results.json rewritten so), `signum` set and a line
        saying how many rows are written."""
        self.watch()
        try:
            runs = list(start(self.started.append))
        except KeyboardInterrupt as exc:  # SignalStop (SIGINT, SIGTERM) or a plain Ctrl-C
            import dataclasses
            import signal

            self.signum = int(getattr(exc, "signum", None) or self.guard.stop_signal or signal.SIGINT)
            self.guard.finishing = True
            runs = list(self.started)
            for sr in runs:  # a stream still arriving adds nothing from here on (run_shards closed each shard)
                sr.run = dataclasses.replace(sr.run, cases=list(sr.run.cases))
                if not sr.run.complete and sr.error is None:  # its node was still measuring
                    sr.run.complete, sr.run.interrupted = False, True
                    sr.writer.save(sr.run)
            self.note(f"ray: interrupted: writing the {sum(len(sr.run.cases) for sr in runs)} row(s) that arrived")
        self.guard.finishing = True  # a signal from here on waits for the files
        return runs

    @property
    def stopped(self) -> bool:
        return self.signum is not None

    def settle(self, run: RunResults) -> RunResults:
        """The merged run of a stopped wait marked interrupted and not complete (a node not started has no run)."""
        if self.stopped:
            run.complete, run.interrupted = False, True
        return run

    def exit_status(self) -> int | None:
        """128 + the signal that stopped the wait or came while the files were written (130, 143); else None."""
        signum = self.signum if self.signum is not None else self.guard.stop_signal
        return 128 + signum if signum is not None else None


POLL_S = 0.5


def _wait(running: Sequence[tuple[ShardRun, threading.Thread, Any]], runs: Sequence[ShardRun],
          deadline: ShardDeadline | None, note: Callable[[str], None]) -> None:
    """Until every shard of `running` has ended or been cut at the deadline (recomputed as peers finish): a cut
    shard's node is lost with the reason and its Ray task cancelled (force: the worker process is killed, and
    the harness's workers under it die with it); its consuming thread is left behind (a daemon that takes
    nothing more)."""
    while True:
        alive = [(sr, t, ev) for sr, t, ev in running if t.is_alive() and not sr.closed]
        if not alive:
            return
        if deadline is None:
            alive[0][1].join()
            continue
        limit, basis = deadline.seconds([r.seconds for r in runs if r.seconds is not None and r.error is None])
        now = time.monotonic()
        for sr, _t, events in alive:
            if sr.started is not None and now - sr.started > limit:
                sr.lose(f"no result within {limit:.0f} s (node deadline: {basis}); its task was cancelled", note)
                _cancel(events)
        alive[0][1].join(POLL_S)


def _cancel(events: Any) -> None:
    """Cancel a shard's Ray task, its worker process killed (a hung shard never ends by itself). Anything else
    (a local stream, or no Ray installed) has no task to cancel."""
    try:
        import ray
    except ImportError:
        return
    if not isinstance(events, ray.ObjectRefGenerator):
        return
    try:
        ray.cancel(events, force=True)
    except Exception:  # noqa: BLE001 - the task finished or its node died meanwhile: nothing left to cancel
        pass


def _failing(exc: Exception) -> Iterator[Any]:
    raise exc
    yield  # pragma: no cover - a generator that raises at its first step


def run_on_ray(config: RunConfig, note: Callable[[str], None] = print,
               signals: ShardSignals | None = None) -> list[RunResults]:
    """Connect to the cluster at config.fleet.ray, shard the matrix over its alive nodes (one task per node, holding
    all of the node's CPUs and GPUs so no two shards share its cores), collect each node's run into
    out_dir/NODE/results.json as cases finish, and return the runs (a last one holds unplaced cases). `signals`:
    the wait under its signal rule (a stop returns what arrived)."""
    nodes = connect(config.fleet.ray)
    cases = get_workload(config.workload).cases(config)
    shards, unplaced = plan_shards(cases, nodes, config.fleet.placement)
    note(f"ray: {len(cases)} case(s) over {len(shards)} of {len(nodes)} node(s): "
         + ", ".join(f"{s.node.label} {len(s.cases)}" for s in shards)
         + (f"; {len(unplaced)} case(s) no node can take" if unplaced else ""))
    out_dir = config.outputs.out_dir
    def start(before: Callable[[ShardRun], None] | None) -> list[ShardRun]:
        return run_shards(config, shards, note, before=before)

    out = [sr.run for sr in (signals.wait(start) if signals is not None else start(None))]
    if unplaced:
        out.append(unplaced_run(config, unplaced, out_dir))
    return out


def unplaced_run(config: RunConfig, unplaced: Sequence[CaseResult], out_dir: Path) -> RunResults:
    """The cases no node could take (plan_shards' skipped rows) as a run of their own, written to
    OUT/unplaced/results.json and merged with the nodes' runs."""
    extra = RunResults(run_id=config.outputs.run_id, started_at="", config=config.as_dict(),
                       environment=RunEnvironmentRecord(hostname="unplaced", machine="no node with the resource"),
                       cases=list(unplaced), complete=True)
    write_results(extra, out_dir / "unplaced")
    return extra


def ray_run(config: RunConfig, note: Callable[[str], None] = print) -> int:
    """`harness run --ray`: the sharded run, then one merged report of every node side by side in out_dir (and
    each node's run recorded with --history). Exit status as `harness run`: 1 when a case failed or broke; the
    first SIGINT or SIGTERM stops the wait (the nodes' tasks cancelled) and, as a local run, writes the rows that
    arrived (OUT/results.json interrupted, not complete, each row naming its node; the report): 130 / 143."""
    from harness.workloads import render_report

    if config.gating.baseline:
        raise UsageError("--baseline with --ray: gate the merged runs afterwards with `harness compare` per node")
    probe_address(config.fleet.ray)  # before anything is created
    out_dir = config.outputs.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    with ShardSignals(config, note) as signals:
        runs = run_on_ray(config, note, signals)
        merged = signals.settle(merged_run(config, runs))
        write_results(merged, out_dir)  # OUT/results.json, as a local run writes it
        trends = None
        if config.outputs.history:
            from harness.history.record import record_run

            trends = []
            for run in runs:
                if run.environment.machine_fingerprint:  # the unplaced cases ran nowhere
                    trends += record_run(run, config.outputs.history, str(out_dir), note) or []
        outputs = {"json": out_dir / "results.json", **render_report(runs, out_dir, trends=trends)}
    for line in summary_lines(merged):
        note(line)
    for name, path in outputs.items():
        note(f"{name:>9}: {path}")
    counts = merged.counts()
    note("ray: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    stopped = signals.exit_status()
    if stopped is not None:  # as a local run a signal stopped: what finished is kept, 128 + the signal
        note(f"run --ray: interrupted: the rows that arrived kept in {out_dir / 'results.json'}")
        return stopped
    return 1 if any(counts[k] for k in ("failed", *BROKEN)) else 0


def summary_lines(run: RunResults) -> list[str]:
    """What a local run prints at its end: the results table (skipped cases grouped), noise notes, counts."""
    import dataclasses

    from harness.report.progress import noise_lines, skipped_lines
    from harness.report.terminal import terminal_table

    shown = dataclasses.replace(run, cases=[c for c in run.cases if c.status != "skipped"])
    lines = ["", "inference harness (ray)"]
    if shown.cases:
        lines.append(terminal_table(shown))
    lines += [*skipped_lines(run), *noise_lines(run)]
    counts = ", ".join(f"{n} {s}" for s, n in run.counts().items() if n)
    lines.append(f"\n{counts}" + ("" if run.complete else " (incomplete)"))
    return lines
