"""Memory over a case: host RSS peak (the kernel's VmHWM, else a psutil sampler thread), GPU via NVML and torch."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results.records import MemoryRecord

MB = 2**20
DEFAULT_PERIOD_S = 0.01


def _linux_hwm() -> tuple[Callable[[], bool], Callable[[], int | None]] | None:
    """(reset, read) for the kernel's peak RSS of this process (VmHWM, bytes), or None off Linux."""
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    if not status.is_file():
        return None

    def reset() -> bool:
        try:
            clear.write_text("5")  # "5" resets the peak RSS only (Linux >= 4.0); no other effect
            return True
        except OSError:
            return False

    def read() -> int | None:
        try:
            m = re.search(r"VmHWM:\s+(\d+)\s+kB", status.read_text())
        except OSError:
            return None
        return int(m.group(1)) * 1024 if m else None

    return reset, read


@dataclass
class MemoryReport:
    """What a sampler measured: the two headline figures and every figure with what it covers."""

    host_peak_mb: float | None
    gpu_peak_mb: float | None
    figures: MemoryRecord = field(default_factory=MemoryRecord)


class MemorySampler:
    """Samples memory on a daemon thread every `period_s` from `start()` to `stop()`.

    gpu: sample NVML (this process's and the device's used memory). torch_allocator: read torch's CUDA
    allocator peaks (reset at start) where torch has initialised CUDA. `process`, `nvml`, `torch_module` and
    `hwm` are injectable for tests (a fake psutil.Process, a fake pynvml, a fake torch, None for no VmHWM).
    """

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, gpu: bool = False, torch_allocator: bool = False,
                 process: Any = None, nvml: Any = None, torch_module: Any = None,
                 hwm: tuple[Callable[[], bool], Callable[[], int | None]] | None | str = "linux") -> None:
        if process is None:
            import psutil

            process = psutil.Process()
        self.period_s = period_s
        self.process = process
        self.gpu = gpu
        self.torch_allocator = torch_allocator
        self._nvml = nvml
        self._torch = torch_module
        self._hwm = _linux_hwm() if hwm == "linux" else hwm
        self._hwm_reset = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._rss_before = 0
        self._rss_peak = 0
        self._gpu_proc_peak: int | None = None
        self._gpu_dev_peak: int | None = None
        self._gpu_dev_before: int | None = None
        self._handle: Any = None
        self._gpu_problem: str | None = None
        self._samples = 0
        self._sample_ns = 0
        self._t0 = 0.0
        self._duration_s = 0.0
        self.report: MemoryReport | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "MemorySampler":
        self._t0 = time.perf_counter()
        self._rss_before = self.process.memory_info().rss
        self._rss_peak = self._rss_before
        if self._hwm is not None:
            self._hwm_reset = self._hwm[0]()
        if self.gpu:
            self._start_nvml()
        if self.torch_allocator:
            torch = self._torch_cuda()
            if torch is not None:
                torch.cuda.reset_peak_memory_stats()
        self._sample()
        if self.gpu or not self._hwm_reset:  # the kernel keeps the host peak itself where the reset worked
            self._thread = threading.Thread(target=self._loop, name="harness-memory-sampler", daemon=True)
            self._thread.start()
        return self

    def hold(self) -> None:
        """Stop the sampling thread before a timed loop, with one sample now; stop() takes the last one.

        A thread that wakes every period to call NVML competes with a launch-bound caller for the GIL and a
        core: measured on an H200 (docs/hardware-runs.md). The figures stay whole: the host peak is the
        kernel's VmHWM, torch's allocator keeps its own peak, and a process's NVML usage does not fall while
        a caching allocator (torch's, ONNX Runtime's arena) holds what it took, so the sample at stop() is
        the loop's peak."""
        self._sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def stop(self, covers: str = "") -> MemoryReport:
        """Stop sampling (idempotent) and return the report."""
        if self.report is not None:
            return self.report
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._sample()  # the state at the end counts too
        self._duration_s = time.perf_counter() - self._t0
        self.report = self._build_report(covers)
        if self._nvml is not None and self._handle is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        return self.report

    def close(self) -> None:
        """Stop without caring for the report (error paths)."""
        if self.report is None:
            self.stop("the case ended early")

    # ------------------------------------------------------------------ sampling
    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def _sample(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            rss = self.process.memory_info().rss
        except Exception:  # noqa: BLE001 - a sampler must never break the case
            rss = 0
        proc, dev = self._gpu_used() if self._handle is not None else (None, None)
        with self._lock:
            self._rss_peak = max(self._rss_peak, rss)
            if proc is not None:
                self._gpu_proc_peak = max(self._gpu_proc_peak or 0, proc)
            if dev is not None:
                self._gpu_dev_peak = max(self._gpu_dev_peak or 0, dev)
            self._samples += 1
            self._sample_ns += time.perf_counter_ns() - t0

    def _start_nvml(self) -> None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                self._gpu_problem = f"nvidia-ml-py (pynvml) is not importable: {exc}"
                return
            self._nvml = pynvml
        from harness.measure.cuda import nvml_handle

        try:
            self._nvml.nvmlInit()
            self._handle = nvml_handle(self._nvml)
        except Exception as exc:  # noqa: BLE001
            self._gpu_problem = f"NVML not available: {type(exc).__name__}: {exc}"
            self._handle = None
            return
        _, self._gpu_dev_before = self._gpu_used()

    def _gpu_used(self) -> tuple[int | None, int | None]:
        """(this process's used bytes or None where NVML does not say, the device's used bytes)."""
        nvml, handle = self._nvml, self._handle
        proc: int | None = None
        try:
            pid = os.getpid()
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(p, "usedGpuMemory", None)
                if p.pid == pid and used is not None:
                    proc = (proc or 0) + int(used)
        except Exception:  # noqa: BLE001 - not supported on this device/driver, or no permission
            proc = None
        try:
            dev: int | None = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # noqa: BLE001
            dev = None
        return proc, dev

    def _torch_cuda(self) -> Any:
        """torch, where it has initialised CUDA in this process (never initialises it itself)."""
        torch = self._torch
        if torch is None:
            import sys

            torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return torch
        except Exception:  # noqa: BLE001
            return None
        return None

    # ------------------------------------------------------------------ report
    def _build_report(self, covers: str) -> MemoryReport:
        peak = self._rss_peak
        hwm_used = False
        if self._hwm is not None and self._hwm_reset:
            hwm = self._hwm[1]()
            if hwm is not None:  # the kernel's exact peak since the reset (sampled RSS can only lag it)
                peak, hwm_used = max(peak, hwm), True
        gpu: dict[str, Any] = {}  # the GPU's fields, given only where the GPU was sampled (a CPU case has none)
        if self.gpu:
            gpu = {"gpu_process_peak_mb": _mb(self._gpu_proc_peak), "gpu_device_used_peak_mb": _mb(self._gpu_dev_peak),
                   "gpu_device_used_before_mb": _mb(self._gpu_dev_before),
                   **({"gpu_problem": self._gpu_problem} if self._gpu_problem else {})}
        allocator: dict[str, Any] = {}
        torch = self._torch_cuda() if self.torch_allocator else None
        if torch is not None:
            allocator = {"torch_max_allocated_mb": _mb(torch.cuda.max_memory_allocated()),
                         "torch_max_reserved_mb": _mb(torch.cuda.max_memory_reserved())}
        gpu_peak, source = (self._gpu_peak(gpu.get("gpu_process_peak_mb"), allocator.get("torch_max_reserved_mb"))
                            if self.gpu else (None, None))
        record = MemoryRecord(
            covers=covers or "activation, first inference, warm-up and timed loop",
            host_rss_before_mb=_mb(self._rss_before), host_rss_peak_mb=_mb(peak),
            host_delta_mb=_mb(peak - self._rss_before), host_peak_source="vmhwm" if hwm_used else "sampled_rss",
            **gpu, **allocator, **({"gpu_source": source} if self.gpu else {}),
            sampler={
                "thread": self._thread is not None, "period_ms": self.period_s * 1e3, "samples": self._samples,
                "mean_sample_us": round(self._sample_ns / max(1, self._samples) / 1e3, 2),
                # CPU time the sampler spent reading memory, as a share of the case's wall time
                "busy_fraction": round(self._sample_ns / 1e9 / max(self._duration_s, 1e-9), 5),
            })
        return MemoryReport(host_peak_mb=record.host_rss_peak_mb, gpu_peak_mb=gpu_peak, figures=record)

    def _gpu_peak(self, process_mb: float | None, reserved_mb: float | None) -> tuple[float | None, str | None]:
        """The case's GPU peak and where it came from: NVML's process figure, else torch's reserved memory, else
        the device's use over its use before the case; (None, None) where none was read."""
        if process_mb is not None:
            return process_mb, "nvml_process"
        if reserved_mb is not None:
            return reserved_mb, "torch_max_reserved"
        if self._gpu_dev_peak is not None and self._gpu_dev_before is not None:
            return _mb(self._gpu_dev_peak - self._gpu_dev_before), "nvml_device_delta"
        return None, None


# what a case's memory figures cover, by whether its activation was reused from the previous case
MEMORY_COVERS = {
    False: "activation and first inference sampled; warm-up and timed loop by their start and end (peaks "
           "that the kernel and the allocators keep)",
    True: "first inference, warm-up and timed loop; the activation was reused from the previous case (same "
          "model x runtime x precision), so its memory is in host_rss_before_mb, not in host_delta_mb",
}


class MemoryTracker:
    """The memory tracker of a case (harness.measure.tracker, case scope): the sampler started before the
    activation, its thread held before the first timed block (MemorySampler.hold), stopped when the case's
    timed part ends; fills host_peak_mb, gpu_peak_mb and memory."""

    def __init__(self, gpu: bool = False, torch_allocator: bool = False, sampler: MemorySampler | None = None
                 ) -> None:
        self.sampler = sampler or MemorySampler(gpu=gpu, torch_allocator=torch_allocator)
        self.report: MemoryReport | None = None

    @contextmanager
    def track(self, window: Any) -> Iterator[None]:
        self.sampler.start()
        window.on_timed(self.sampler.hold)
        try:
            yield
        except BaseException:
            self.sampler.close()
            raise
        self.report = self.sampler.stop(MEMORY_COVERS[bool(window.reused)])

    def fields(self, window: Any) -> dict[str, Any]:
        r = self.report
        if r is None:
            return {}
        return {"host_peak_mb": r.host_peak_mb, "gpu_peak_mb": r.gpu_peak_mb, "memory": r.figures}


def _mb(value: int | float | None) -> float | None:
    return None if value is None else round(value / MB, 2)


# ---------------------------------------------------------------------------------------- allocation failures

# What runtimes say when an allocation fails (in an exception's text or a dead worker's stderr).
ALLOCATION_MARKERS = ("MemoryError", "bad_alloc", "Failed to allocate", "failed to allocate", "Unable to allocate",
                      "Cannot allocate memory", "can't allocate memory", "not enough memory", "out of memory",
                      "OutOfMemoryError", "std::length_error")
_UNITS = {"B": 1, "bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
_SIZE_PATTERNS = (
    re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE),                              # torch CPU allocator
    re.compile(r"requested buffer of size (\d+)"),                                   # ONNX Runtime arena
    re.compile(r"(?:tried to allocate|unable to allocate|asked for) ([\d.]+) ?(B|[KMGTPE]i?B)\b", re.IGNORECASE),  # CUDA, numpy
    re.compile(r"allocat\w* (\d+) bytes", re.IGNORECASE),
)


@dataclass(frozen=True)
class AllocationFailure:
    """An allocation that failed: the marker found and the size asked for (bytes; None when not said)."""

    marker: str
    requested_bytes: int | None

    def describe(self) -> str:
        if self.requested_bytes is None:
            return "an allocation failed"
        return f"an allocation asked for {format_bytes(self.requested_bytes)}"


def allocation_failure(text: str) -> AllocationFailure | None:
    """The allocation failure `text` reports (torch, CUDA, ONNX Runtime, numpy, C++ bad_alloc), or None."""
    marker = next((m for m in ALLOCATION_MARKERS if m in text), None)
    if marker is None:
        return None
    for pattern in _SIZE_PATTERNS:
        m = pattern.search(text)
        if m:
            unit = m.group(2) if m.lastindex and m.lastindex >= 2 else "B"
            scale = next((v for k, v in _UNITS.items() if k.lower() == unit.lower()), 1)
            return AllocationFailure(marker, int(float(m.group(1)) * scale))
    return AllocationFailure(marker, None)


def oom_reason(failure: AllocationFailure, phase: str, cap_gb: float | None, detail: str = "") -> str:
    """One line for an `oom` case: what was asked for, in which phase, under which cap, and the runtime's words."""
    cap = f"{cap_gb:g} GiB" if cap_gb else "none"
    detail = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", detail)  # onnxruntime colours its log lines
    first = next((ln.strip() for ln in detail.splitlines() if ln.strip()), "")
    tail = f": {first[:300]}" if first else ""
    return f"out of memory in phase {phase}: {failure.describe()} (memory cap {cap}){tail}"


def format_bytes(n: float) -> str:
    """1.5 GiB, 48.0 GiB, 3.6 TiB: binary units, one decimal."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n >= _UNITS[unit]:
            return f"{n / _UNITS[unit]:.1f} {unit}"
    return f"{int(n)} B"


def default_case_memory_gb() -> float:
    """The default address-space cap per worker: half of this machine's memory, in GiB."""
    import psutil

    return round(psutil.virtual_memory().total / 2**30 * 0.5, 1)
