"""Each configuration of `harness recommend` in a worker process of its own: no other configuration's state in its
figures, and a crash or a hang costs that configuration, never the search (docs/recommend.md)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.execution.supervisor import _EnvProcess, worker_context, worker_prologue
from harness.model import ModelSpec
from harness.traffic.replay import ReplayRun
from harness.workloads.capacity.live import ConfigRef, Reference, _Pool

if TYPE_CHECKING:
    from harness.envs import RuntimeEnv

OPEN_TIMEOUT_S = 1800.0  # set-up: an INT8 calibration or a conversion of a large model, the first time
PROBE_GRACE_S = 300.0  # a probe may take its schedule's length three times over, plus this
TAIL_CHARS = 2000


class IsolatedConfig:
    """The parent's side of one configuration's worker: LiveConfig's interface (open, probe, close, drift,
    memory_mb) over a pipe. The worker starts on first use and is closed by the pool (least recently used)."""

    def __init__(self, ref: ConfigRef, spec: ModelSpec, pool: _Pool, reference: Reference | None,
                 env: RuntimeEnv | None = None, log_dir: str | None = None) -> None:
        self.ref, self.pool, self.reference, self.env = ref, pool, reference, env
        self.log_dir = log_dir  # where its worker's log goes (the command's scratch folder; None: $TMPDIR)
        self.name = ref.name
        self.drift: float | None = None
        self.memory_mb: float | None = None
        self._proc: Any = None
        self._conn: Connection | None = None
        self._log: str | None = None

    def open(self) -> None:
        if self._proc is None:
            self._start()
        self.pool.use(self)

    def _start(self) -> None:
        fd, self._log = tempfile.mkstemp(prefix="harness-recommend-", suffix=".log", dir=self.log_dir)
        os.close(fd)
        try:  # a set-up that fails in any way (a signal while the worker starts, here or in the worker) closes the
            #   worker it started and removes its log: no process is left waiting for commands that never come (the
            #   command used to hang at its end), no log is left in $TMPDIR
            if self.env is not None:  # the runtime's own environment (harness.envs), as `harness run` starts it
                proc = _EnvProcess(str(self.env.python), self._log, None, False, loop="capacity")
                self._proc, self._conn = proc, proc.conn
            else:
                ctx = worker_context()
                parent, child = ctx.Pipe(duplex=True)
                self._proc = ctx.Process(target=_main, args=(child, self._log), name="harness-recommend",
                                         daemon=True)
                self._proc.start()
                child.close()
                self._conn = parent
            reference = self.reference() if self.reference is not None else None
            reply = self._ask(("open", self.ref, reference), OPEN_TIMEOUT_S, "set-up")
        except BaseException:
            self.close()
            raise
        if reply[0] != "ok":
            self.close()
            raise RuntimeError(reply[1])
        self.memory_mb, self.drift = reply[1], reply[2]

    def probe(self, rate: float, n: int, seed: int) -> ReplayRun:
        try:
            self.open()
        except RuntimeError as exc:
            return _failed(str(exc))
        span = n / rate if 0 < rate < float("inf") else 0.0
        reply = self._ask(("probe", rate, n, seed), 3 * span + PROBE_GRACE_S, f"a probe at {rate:.4g} requests/s")
        if reply[0] != "ok":
            return _failed(reply[1])
        return reply[1]

    def _ask(self, msg: tuple[Any, ...], timeout_s: float, what: str) -> tuple[Any, ...]:
        """Send `msg`, wait for the reply: ("ok", ...) or ("error", why); a worker that died or hung is ended
        and its reply is the error, with the tail of its log."""
        assert self._conn is not None
        try:
            self._conn.send(msg)
            if self._conn.poll(timeout_s):
                return self._conn.recv()
            why = f"the worker hung: no answer to {what} in {timeout_s:.0f} s"
        except (EOFError, OSError, BrokenPipeError):
            self._proc.join(2.0)
            code = self._proc.exitcode
            sig = f" (signal {signal.Signals(-code).name})" if code is not None and code < 0 else ""
            why = f"the worker died during {what}: exit code {code}{sig}"
        tail = self._tail()
        self.close()
        return ("error", why + (f"; its log ends: {tail}" if tail else ""))

    def _tail(self) -> str:
        try:
            with open(self._log or "", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - TAIL_CHARS))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def close(self) -> None:
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if proc is not None:
            try:
                if conn is not None:
                    conn.send(("close",))
            except (OSError, BrokenPipeError):
                pass
            if conn is not None or proc.is_alive():  # a signal during start(): a process never started, not joined
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join(2.0)
        if conn is not None:
            conn.close()
        if self._log:
            try:
                os.unlink(self._log)
            except OSError:
                pass
            self._log = None
        self.pool.active.pop(self.name, None)


def _failed(why: str) -> ReplayRun:
    empty = np.zeros(0, dtype=np.int64)
    return ReplayRun(empty, empty, empty, error=why)


def _main(conn: Connection, log_path: str) -> None:
    """The worker: rebuild the configuration from its names when asked to open it (drift against the reference
    outputs the parent sends, memory), then serve probes until told to close. The same loop in the harness's
    interpreter (forkserver) and in a runtime environment's (env_worker)."""
    worker_prologue(log_path)
    cfg = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if msg[0] == "close":
                break
            if msg[0] == "open":
                ref = msg[1]
                cfg = _build(ref, msg[2])
                t0 = time.perf_counter()
                cfg.open()
                print(f"{ref.name}: opened in {time.perf_counter() - t0:.1f} s", flush=True)
                conn.send(("ok", cfg.memory_mb, cfg.drift))
            elif msg[0] == "probe":
                assert cfg is not None, "probe before open"
                conn.send(("ok", cfg.probe(*msg[1:])))
        except Exception as exc:  # noqa: BLE001 - the error goes back to the parent, the worker stays
            import traceback

            traceback.print_exc()
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    if cfg is not None:
        cfg.close()


def _build(ref: ConfigRef, reference: Mapping[str, np.ndarray] | None) -> Any:
    from harness.model import get_model
    from harness.model_files import register_user_model
    from harness.plugins import load_plugins
    from harness.workloads.capacity.live import live_config

    load_plugins()
    if ref.user_model:
        register_user_model(ref.user_model)
    spec = get_model(ref.model)
    return live_config(ref, spec, _Pool(keep=1), (lambda: reference) if reference is not None else None)
