"""IsolatedExecutor: cases run in a worker process that the parent supervises without polling."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import multiprocessing as mp
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import ResultsError
from harness.measure.memory import ALLOCATION_MARKERS, allocation_failure, oom_reason
from harness.config import RunConfig
from harness.results.schema import CaseId, CaseResult

if TYPE_CHECKING:  # harness.envs itself is imported when a case needs it
    from harness.envs import RuntimeEnv

_PR_SET_PDEATHSIG = 1


def worker_context() -> Any:
    """The multiprocessing context every harness worker starts from: a forkserver that preloads the worker's
    modules (a clean process: nothing of the parent's state, threads or user code is inherited)."""
    ctx = mp.get_context("forkserver")
    # quiet_start first: the server ignores Ctrl-C from its first import (a terminal's Ctrl-C reaches the whole
    # process group; a server still importing its preload printed a KeyboardInterrupt traceback)
    ctx.set_forkserver_preload(["harness.execution.quiet_start", "harness.execution.worker"])
    return ctx


STOP_GRACE_S = 5.0


def stop_forkserver(server: Any = None, grace_s: float = STOP_GRACE_S) -> bool:
    """End the forkserver (it would end with this process): a finished run leaves no worker or server behind.
    multiprocessing's resource tracker is left to end with this process, as it does within milliseconds.

    The server is asked to stop (its "alive" pipe closed) and given `grace_s` to end; past that it is killed.
    CPython's own stop waits for it without a limit, and a server that did not end hung a whole Ray shard in
    `harness qualify --ray` (seen on a node starved of CPU by a busy neighbour: the shard's last step, its
    session's close, waited in os.waitpid for minutes), and once a server was not reapable even after SIGKILL
    (the wait after the kill hung too): so after the kill it is waited for `grace_s` more at most, then left to
    end by itself. Returns True when the server had to be killed.
    `server`: a multiprocessing.forkserver.ForkServer (default: this process's)."""
    from multiprocessing import forkserver, util

    server = server if server is not None else getattr(forkserver, "_forkserver", None)
    lock = getattr(server, "_lock", None)
    if lock is None or not hasattr(server, "_forkserver_pid"):  # not CPython's layout: its own stop
        stop = getattr(server, "_stop", None)
        if stop is not None:
            with contextlib.suppress(OSError, ChildProcessError):
                stop()
        return False
    killed = False
    with lock:
        pid = server._forkserver_pid
        if pid is None:
            return False
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)  # asks the server to stop
        server._forkserver_alive_fd = None
        deadline = time.monotonic() + grace_s
        try:
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                now = time.monotonic()
                if now >= deadline + grace_s:  # not reapable even after SIGKILL: never wait on it any longer
                    break
                if now >= deadline and not killed:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                time.sleep(0.01)
        except (OSError, ChildProcessError):  # already reaped, or not our child
            pass
        server._forkserver_pid = None
        address = server._forkserver_address
        if address and not util.is_abstract_socket_namespace(address):
            with contextlib.suppress(OSError):
                os.unlink(address)
        server._forkserver_address = None
    return killed


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _EnvProcess:
    """A worker started with a runtime environment's interpreter (harness.envs), with multiprocessing.Process's
    interface as the executor uses it: the same loop (`_worker_main`) over a socket pair, another Python."""

    def __init__(self, python: str, log_path: str, cap_bytes: int | None, defer_blocks: bool,
                 loop: str = "case") -> None:
        parent, child = socket.socketpair()
        with open(log_path, "ab") as log:  # an import error before the worker's own redirect lands in the log too
            self._popen = subprocess.Popen(
                [python, "-m", "harness.execution.env_worker", str(child.fileno()), log_path, str(cap_bytes or 0),
                 "1" if defer_blocks else "0", loop], pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=log, stderr=log)
        child.close()
        self.conn = Connection(parent.detach())

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()


class IsolatedExecutor:
    isolated = True

    def __init__(self, defer_blocks: bool = False, say: Callable[[str], None] | None = None) -> None:
        self.defer_blocks = defer_blocks  # see CaseRunner: the session measures later blocks in rounds
        self.say = say or _to_stderr  # progress lines of environments built or reused (the run's progress)
        self._ctx = worker_context()
        self._proc: Any = None
        self._conn: Connection | None = None
        self._log_path: str | None = None
        self._env_key: str | None = None  # the environment of the current worker (None: the harness's own)
        self._parked: dict[str | None, tuple[Any, Connection, str]] = {}  # idle workers of other environments
        self._envs: dict[str, RuntimeEnv | str] = {}  # environments used in this run, or why one failed
        self.workers_started = 0
        self._last_tail = ""  # the worker's stderr tail for the last reply that reported an OOM

    # ------------------------------------------------------------------ worker lifecycle
    def _ensure_worker(self, config: RunConfig, env: RuntimeEnv | None = None) -> None:
        """A live worker in `env`'s interpreter (None: the harness's own); a worker of another environment is
        parked, alive, for the cases that come back to it."""
        key = env.key if env is not None else None
        alive = self._proc is not None and self._proc.is_alive()
        if alive and self._env_key == key:
            return
        if alive:
            assert self._conn is not None and self._log_path is not None
            self._parked[self._env_key] = (self._proc, self._conn, self._log_path)
            self._proc = self._conn = self._log_path = None
        else:
            self._reap()
        parked = self._parked.pop(key, None)
        if parked is not None:
            if parked[0].is_alive():
                self._proc, self._conn, self._log_path = parked
                self._env_key = key
                return
            self._reap_one(*parked)
        fd, self._log_path = tempfile.mkstemp(prefix="harness-worker-", suffix=".log")
        os.close(fd)
        memory_gb = config.process.case_memory_gb
        cap_bytes = int(memory_gb * 2**30) if memory_gb else None
        sys.stdout.flush()
        sys.stderr.flush()
        if env is not None:
            proc = _EnvProcess(str(env.python), self._log_path, cap_bytes, self.defer_blocks)
            self._proc, self._conn = proc, proc.conn
        else:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(target=_worker_main,
                                     args=(child_conn, self._log_path, cap_bytes, self.defer_blocks),
                                     name="harness-worker", daemon=True)
            proc.start()
            child_conn.close()
            self._proc, self._conn = proc, parent_conn
        self._env_key = key
        self.workers_started += 1

    def _environment(self, case: CaseId, config: RunConfig) -> RuntimeEnv | str | None:
        """The environment `case` runs in (built on first use), None for the harness's own, or why it could not
        be built (the case is then a skip with that reason)."""
        from harness.envs import EnvBuildError, EnvStore, environment_for
        from harness.errors import HarnessError
        from harness.runtimes import get_runtime

        try:
            cls = get_runtime(case.runtime)
        except Exception:  # noqa: BLE001 - an unknown runtime is the worker's error to report
            return None
        spec = environment_for(cls, config.process.envs)
        if spec is None:
            return None
        if spec.key not in self._envs:
            wheels = config.process.env_wheels
            try:
                self._envs[spec.key] = EnvStore(config.artifacts.cache_dir).ensure(
                    spec, wheels=Path(wheels) if wheels else None, progress=self.say, who=case.runtime)
            except (EnvBuildError, HarnessError) as exc:  # e.g. the cache folder is not writable (CacheDirError)
                self._envs[spec.key] = str(exc)
        return self._envs[spec.key]

    def _reap(self, grace_s: float = 2.0) -> None:
        """Stop the current worker (politely, then SIGKILL) and wait for it: no process is left behind."""
        proc, conn, log_path = self._proc, self._conn, self._log_path
        self._proc = self._conn = None
        self._log_path = None
        self._reap_one(proc, conn, log_path, grace_s)

    @staticmethod
    def _reap_one(proc: Any, conn: Connection | None, log_path: str | None, grace_s: float = 2.0) -> None:
        if conn is not None:
            try:
                if proc is not None and proc.is_alive():
                    conn.send(("stop",))
            except (OSError, ValueError):
                pass
        if proc is not None:
            proc.join(grace_s)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        if conn is not None:
            conn.close()
        if log_path:
            try:
                os.unlink(log_path)
            except OSError:
                pass

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)

    def renew(self) -> None:
        """End every worker (the current one and those parked for other environments): the next request of each
        starts a new process. The gate and `harness ab` on one CPU activate a case's two sides anew this way
        (pairs.renews_workers): a worker's process (its heap, where its libraries and buffers landed) biased its calls there for its whole
        life, and a model loaded again in the same process did not draw that bias again (docs/measurements.md, "A
        new worker per activation")."""
        self._reap()
        for parked in self._parked.values():
            self._reap_one(*parked)
        self._parked.clear()

    def close(self) -> None:
        self.renew()
        if stop_forkserver():
            self.say(f"the workers' forkserver did not end within {STOP_GRACE_S:g} s of its stop: killed")

    # ------------------------------------------------------------------ one case
    def run(self, case: CaseId, config: RunConfig, payload: Any = None) -> CaseResult:
        """`case` of the run's workload in the worker (with the workload's `payload` for it), supervised: a crash,
        hang or memory-cap hit costs this case's row and the worker is replaced."""
        env = self._environment(case, config)
        if isinstance(env, str):
            return CaseResult(case, "skipped", phase="load", reason=env)
        reply = self._exchange(("case", case, config, payload), case, config, env)
        if isinstance(reply, CaseResult):
            reply.environment = env.record() if env is not None else None
            return reply
        try:
            result = CaseResult.from_dict(reply, f"{case.id}: the worker's result")
        except ResultsError as exc:  # a figure the strict reader refuses (NaN, negative...): this case's row only
            return CaseResult(case, "error", phase="results", reason=f"its result was refused: {exc}"[:1000])
        if env is not None:
            result.environment = env.record()
        if result.status == "oom":  # the worker's heap may be unusable: replace it
            result.stderr_tail = result.stderr_tail or self._last_tail
            self._reap()
        return result

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool = True) -> dict[str, Any]:
        """A later measurement block of `case` in the worker (CaseRunner.measure_block), supervised like a case:
        a crash, timeout or OOM costs this block ({"error": reason}), never the case's earlier blocks."""
        env = self._environment(case, config)
        if isinstance(env, str):
            return {"error": env}
        reply = self._exchange(("block", case, config, fresh), case, config, env)
        if isinstance(reply, CaseResult):
            return {"error": f"{reply.status}: {reply.reason}"}
        if reply.get("status") == "oom":
            self._reap()
        return reply

    def _exchange(self, msg: tuple[Any, ...], case: CaseId, config: RunConfig,
                  env: RuntimeEnv | None = None) -> dict[str, Any] | CaseResult:
        """Send one request to the worker and wait for its reply (a dict); a CaseResult when the worker could
        not be started, timed out or died (the worker is then replaced on the next request)."""
        self._last_tail = ""
        for attempt in (1, 2):  # a worker that died while idle is replaced once
            self._ensure_worker(config, env)
            assert self._conn is not None and self._log_path is not None
            log_offset = os.path.getsize(self._log_path)
            try:
                self._conn.send(msg)
                break
            except (OSError, ValueError):
                self._reap()
        else:
            return CaseResult(case, "crashed", phase="load", reason="the worker process could not be started")
        phase = "load"
        t0 = time.monotonic()
        timeout_s = config.process.case_timeout_s
        deadline = t0 + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            # Blocks in select(): the parent uses no CPU while the worker measures.
            if remaining <= 0 or not self._conn.poll(remaining):
                self._kill()
                tail = self._stderr_tail(log_offset)
                self._reap()
                return CaseResult(case, "timeout", phase=phase, stderr_tail=tail,
                                  reason=f"exceeded --case-timeout {timeout_s:g} s in phase {phase}",
                                  duration_s=round(time.monotonic() - t0, 3))
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                return self._worker_died(case, phase, log_offset, config, time.monotonic() - t0)
            if reply[0] == "phase":
                phase = reply[1]
            elif reply[0] == "result":
                self._last_tail = self._stderr_tail(log_offset) if reply[1].get("status") == "oom" else ""
                return reply[1]

    def _worker_died(self, case: CaseId, phase: str, log_offset: int, config: RunConfig, elapsed: float) -> CaseResult:
        proc = self._proc
        if proc is not None:
            proc.join(5)
        code = proc.exitcode if proc is not None else None
        tail = self._stderr_tail(log_offset)
        self._reap()
        failure = allocation_failure(tail)
        signame = None
        if code is not None and code < 0:
            try:
                signame = signal.Signals(-code).name
            except ValueError:
                signame = f"signal {-code}"
        how = f"the worker died ({signame})" if signame else f"the worker exited with status {code}"
        if failure is not None:
            line = next((ln for ln in reversed(tail.splitlines()) if any(m in ln for m in ALLOCATION_MARKERS)), "")
            return CaseResult(case, "oom", phase=phase, signal=signame, stderr_tail=tail,
                              reason=f"{oom_reason(failure, phase, config.process.case_memory_gb, line)}; {how}",
                              details={"oom_requested_bytes": failure.requested_bytes}, duration_s=round(elapsed, 3))
        if signame:
            return CaseResult(case, "crashed", phase=phase, signal=signame, stderr_tail=tail,
                              reason=f"worker killed by {signame} in phase {phase}", duration_s=round(elapsed, 3))
        return CaseResult(case, "crashed", phase=phase, stderr_tail=tail,
                          reason=f"worker exited with status {code} in phase {phase}", duration_s=round(elapsed, 3))

    def _stderr_tail(self, offset: int, lines: int = 20, chars: int = 4000) -> str:
        if not self._log_path:
            return ""
        try:
            with open(self._log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace").strip()
        fatal = text.rfind("Fatal Python error")
        if fatal >= 0:  # faulthandler prints the innermost frames first: keep its head
            return "\n".join(text[fatal:].splitlines()[:lines * 2])[:chars]
        return "\n".join(text.splitlines()[-lines:])[-chars:]


def _worker_main(conn: Connection, log_path: str, cap_bytes: int | None, defer_blocks: bool = False) -> None:
    """The worker: dies with its parent, ignores Ctrl-C (the parent decides), logs to a file, capped memory."""
    worker_prologue(log_path, cap_bytes)

    from harness.execution.worker import CaseRunner

    runner = CaseRunner(defer_blocks=defer_blocks)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "block":
            _, case, config, fresh = msg
            conn.send(("phase", "run"))
            try:
                block = runner.measure_block(case, config, fresh)
            except MemoryError as exc:
                block = {"error": f"MemoryError: {exc}", "status": "oom"}
            except Exception as exc:  # noqa: BLE001 - the block's error goes back to the session
                block = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.flush()
            sys.stderr.flush()
            conn.send(("result", block))
            if block.get("status") == "oom":
                break
            continue
        if msg[0] != "case":
            break
        _, case, config, payload = msg
        result = runner.run(case, config, lambda p: conn.send(("phase", p)), payload=payload)
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(("result", result.as_dict()))
        if result.status == "oom":
            break
    runner.close()
    conn.close()
    os._exit(0)


def worker_prologue(log_path: str, cap_bytes: int | None = None) -> None:
    """What every harness worker process does first: die with its parent, ignore Ctrl-C (the parent decides),
    write stdout and stderr to `log_path` (a segfault leaves a Python traceback there), cap its address space."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:  # the parent closed this worker (a Ctrl-C) before it started: nothing to do
        os._exit(0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # pytest's capture may have replaced sys.stdout/err with its own files: point them at the log again.
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if cap_bytes:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = cap_bytes if hard == resource.RLIM_INFINITY else min(cap_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
