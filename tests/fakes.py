"""Fake models and runtimes for the harness's own tests (loaded with HARNESS_PLUGINS=fakes).

They exercise the harness without torch: deterministic outputs, controllable speed, and runtimes that
misbehave on purpose (SIGSEGV, SIGABRT, hang, memory blow-up, drift, unavailable).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import shared_exports

from harness.model import BATCH, ModelSpec, TensorSpec, register_model
from harness.precision import Precision
from harness.runtimes import Availability, Runtime, register_runtime


def _no_module() -> None:
    raise RuntimeError("fake model: no torch module")


FAKE_MODEL = register_model(ModelSpec(
    name="fake-linear", build=_no_module, inputs=(TensorSpec("x", (BATCH, 8)),), outputs=("y",),
    task="classification", reference_runtime="fake-ok", tags=frozenset({"fake"}),
), replace=True)


class FakeOk(Runtime):
    """y = 2x, taking `delay_s` per call (a stand-in for a model's compute)."""

    name: ClassVar[str] = "fake-ok"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16})
    delay_s: ClassVar[float] = 0.0
    calls = 0

    def _activate(self) -> None:
        self.calls = 0

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        self.calls += 1
        self.on_call(self.calls)
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"y": prepared["x"] * 2.0}

    def on_call(self, n: int) -> None:
        pass


def _variant(name: str, base: type = FakeOk, **attrs: Any) -> type:
    return register_runtime(type(name.title().replace("-", ""), (base,), {"name": name, **attrs}), replace=True)


class _SegvLoad(FakeOk):
    def _activate(self) -> None:
        os.kill(os.getpid(), signal.SIGSEGV)


class _CrashInLoop(FakeOk):
    """Dies on its 8th call: 1 accuracy call + 4 warm-up calls (50 ms each, 0.2 s) put call 8 in the timed loop."""

    delay_s: ClassVar[float] = 0.05
    crash_signal: ClassVar[int] = signal.SIGABRT

    def on_call(self, n: int) -> None:
        if n >= 8:
            os.kill(os.getpid(), self.crash_signal)


class _Hang(FakeOk):
    def on_call(self, n: int) -> None:
        time.sleep(3600)


class _Oom(FakeOk):
    def _activate(self) -> None:
        self.hog = []
        for _ in range(64):  # up to 16 GiB in 256 MiB blocks, far past any test's cap
            self.hog.append(np.empty(256 * 2**20, dtype=np.uint8))  # address space, as RLIMIT_AS counts


class _Drift(FakeOk):
    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        return {"y": prepared["x"] * 2.0 + 0.5}


class _Unavailable(FakeOk):
    @classmethod
    def availability(cls) -> Availability:
        return Availability(False, "FakeAcceleratorProvider not available: no fake device on this machine")


class _Raises(FakeOk):
    def _activate(self) -> None:
        raise ValueError("model file is garbage")


class _Unsupported(FakeOk):
    def _activate(self) -> None:
        from harness.errors import UnsupportedModelError

        raise UnsupportedModelError("fake-unsupported cannot take this model: its importer lacks an op")


class _CrashSecond(FakeOk):
    """Fails on its second activation in a process: in a worker it dies of SIGSEGV (as a native crash would),
    in the harness's own process it raises."""

    activations: ClassVar[int] = 0

    def _activate(self) -> None:
        import multiprocessing

        _CrashSecond.activations += 1
        if _CrashSecond.activations == 2:
            if multiprocessing.parent_process() is not None:
                os.kill(os.getpid(), signal.SIGSEGV)
            raise RuntimeError("second activation")
        super()._activate()


class FakeGraph(FakeOk):
    """Runs its model's file as its artifact: the file says what a call costs (`cost_us=N`), so a test can tell
    which file ran (the nightly gate's side A must run the baseline's stored copy, side B tonight's). Each call
    advances `tick` (a fake clock) by that cost where a test set one, else busy-waits it. `crash_after_s=T` in the
    file: the process dies of SIGSEGV on its first call T seconds after activation (a native crash of that
    build, past the warm-ups)."""

    name: ClassVar[str] = "fake-graph"
    tick: ClassVar[Any] = None  # Callable[[int], None]: a fake clock's advance

    def _activate(self) -> None:
        from harness.artifacts.cache import Artifact

        path = self.model.onnx_path
        if path is None:
            raise RuntimeError(f"fake-graph runs a model file; {self.model.name} has none")
        text = Path(path).read_text()
        self.cost_ns = int(float(text.split("cost_us=")[1].split()[0]) * 1000)
        crash = float(text.split("crash_after_s=")[1].split()[0]) if "crash_after_s=" in text else 0.0
        self.crash_at = time.perf_counter() + crash if crash else 0.0
        self.artifact = Artifact(path=path, key="fake", cache_hit=True, build_s=0.0, meta={})
        super()._activate()

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        if self.crash_at and time.perf_counter() >= self.crash_at:
            os.kill(os.getpid(), signal.SIGSEGV)
        if FakeGraph.tick is not None:
            FakeGraph.tick(self.cost_ns)
        else:
            end = time.perf_counter_ns() + self.cost_ns
            while time.perf_counter_ns() < end:
                pass
        return {"y": prepared["x"] * 2.0}


register_runtime(FakeGraph, replace=True)


class _Caching(FakeOk):
    """Computes (3 ms) an input it has not seen; answers a repeated input from its cache at once."""

    def _activate(self) -> None:
        self.cache: dict[bytes, np.ndarray] = {}
        super()._activate()

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        key = prepared["x"].tobytes()
        if key not in self.cache:
            time.sleep(0.003)
            self.cache[key] = prepared["x"] * 2.0
        return {"y": self.cache[key]}


class _StaleWhenTimed(FakeOk):
    """Correct through infer(); its bound (timed) call computes once and returns that first output for every
    later input (a stale result when timed)."""

    def bind(self, feed: Any) -> Any:
        real = super().bind(feed)
        stale = getattr(self, "stale", None)
        if stale is None:
            self.stale = stale = real()
        return lambda: stale


class _Flip(FakeOk):
    """One output element wrong (+1) in 1 of $FAKE_FLIP_K calls (at random; 0: never): a silent data corruption."""

    def _activate(self) -> None:
        self.rng = np.random.default_rng(int(os.environ.get("FAKE_FLIP_SEED", "0")))
        super()._activate()

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        y = prepared["x"] * 2.0
        k = int(os.environ.get("FAKE_FLIP_K", "0"))
        if k and self.rng.integers(k) == 0:
            y = y.copy()
            y.reshape(-1)[3] += 1.0
        return {"y": y}


class _Warming(FakeOk):
    """2 ms a call, 15% more with each process (a run's worker) counted in $FAKE_ROUND_FILE: a machine that slows
    round after round of a burn-in, as one that heats up."""

    delay: ClassVar[float | None] = None

    def _activate(self) -> None:
        if _Warming.delay is None:  # the first activation in this process: one more round
            given = os.environ.get("FAKE_ROUND_FILE")  # unset: a machine that does not warm (2 ms every round)
            path = Path(given) if given else None
            n = int(path.read_text() or 0) if path is not None and path.is_file() else 0
            if path is not None and path.parent.is_dir():
                path.write_text(str(n + 1))
            _Warming.delay = 0.002 * (1 + 0.15 * n)
        super()._activate()

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        time.sleep(_Warming.delay or 0.002)
        return {"y": prepared["x"] * 2.0}


class _NodeSpeed(FakeOk):
    """4 ms a call times $FAKE_NODE_FACTOR (a node made slower: a Ray node started with that variable); a node
    started with $FAKE_NODE_HANG set never returns from its first call (a hung node)."""

    @property
    def delay_s(self) -> float:  # type: ignore[override]
        return 0.004 * float(os.environ.get("FAKE_NODE_FACTOR", "1"))

    def on_call(self, n: int) -> None:
        while os.environ.get("FAKE_NODE_HANG"):
            time.sleep(3600)


for _n in ("fake-ok", "fake-ok-b", "fake-ok-c", "fake-ok-d"):
    _variant(_n)
_variant("fake-slow", delay_s=0.05)
_variant("fake-2ms", delay_s=0.002)
_variant("fake-node", _NodeSpeed)
_variant("fake-cache", _Caching)
_variant("fake-stale", _StaleWhenTimed)
_variant("fake-flip", _Flip)
_variant("fake-warming", _Warming)  # a known latency per call for LoadGen scenario tests (sleep: frees the GIL)
_variant("fake-segv-load", _SegvLoad)
_variant("fake-abort-run", _CrashInLoop)
_variant("fake-segv-run", _CrashInLoop, crash_signal=signal.SIGSEGV)
_variant("fake-hang", _Hang)
_variant("fake-oom", _Oom)
_variant("fake-drift", _Drift)
_variant("fake-unavailable", _Unavailable)
_variant("fake-raises", _Raises)
_variant("fake-unsupported", _Unsupported)
_variant("fake-crash-second", _CrashSecond)


def fake_latency(p50_ms: float, iterations: int = 100, **figures: Any) -> Any:
    """A case's latency statistics (harness.results.stats.LatencyStats) for a test that sets a few figures: every
    percentile, the mean, min and max at `p50_ms` and no spread unless given; no intervals (ci_level None) unless
    given, as in results from before them."""
    import dataclasses

    from harness.results.stats import LatencyStats

    flat = LatencyStats(iterations=iterations, p50_ms=p50_ms, p90_ms=p50_ms, p95_ms=p50_ms, p99_ms=p50_ms,
                        mean_ms=p50_ms, std_ms=0.0, min_ms=p50_ms, max_ms=p50_ms, iqr_ms=0.0, cv=0.0, noisy=False,
                        rcv=0.0)
    return dataclasses.replace(flat, **figures)

# a harness process a test started (HARNESS_PLUGINS=fakes): the session's torch.onnx exports shared with it
shared_exports.install()


def loaded_proc(wait_share: float, others: float = 1.5) -> Any:
    """A fake /proc reader (harness.measure.contention's Snapshot) whose every look, a second apart, finds the
    process waited `wait_share` of its runnable time for a CPU while other processes used `others` cores."""
    from harness.measure.contention import Snapshot

    t = [0]

    def read() -> Snapshot:
        t[0] += 1
        s = t[0] * 10**9
        return Snapshot(s, int(s * (1 - wait_share)), int(s * wait_share), t[0], t[0] * 0.5, 0, None,
                        machine_busy_s=t[0] * (0.5 + others), steal_s=0.0, cpus=2)
    return read
