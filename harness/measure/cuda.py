"""CUDA facts and device timing: why CUDA cannot run here (NVML, torch), and CUDA-event timers for the Timer."""

from __future__ import annotations

import functools
import os
from typing import Any, Protocol

# What a timed call covers (CaseResult.timing_scope and details["device_timing_scope"]).
HOST_TO_HOST = "host_to_host"  # host wall time; inputs start and outputs end in host memory (copies included)
DEVICE_RESIDENT = "device_resident"  # host wall time after a device sync; inputs/outputs stay in device memory
DEVICE_EVENTS = "device_events"  # CUDA events recorded on the runtime's stream around the call: GPU time only


class DeviceTimer(Protocol):
    """Brackets each timed call on the device; read after the runtime's synchronize().

    `start()` and `stop()` run inside the host-timed region (a few microseconds each: they only enqueue an
    event); `elapsed_ns()` runs after the host clock is read, so its cost is outside both measurements.
    """

    scope: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def elapsed_ns(self) -> int: ...


class CudaEventTimer:
    """torch.cuda.Event pair recorded on `stream` (a torch stream, default: the current stream)."""

    scope = DEVICE_EVENTS

    def __init__(self, stream: Any = None, torch_module: Any = None) -> None:
        torch = torch_module
        if torch is None:
            import torch
        self._stream = stream if stream is not None else torch.cuda.current_stream()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> None:
        self._end.record(self._stream)

    def elapsed_ns(self) -> int:
        self._end.synchronize()  # a no-op when the runtime's synchronize() already waited for the stream
        return int(round(self._start.elapsed_time(self._end) * 1e6))  # elapsed_time is in milliseconds


# ---------------------------------------------------------------------------------------------- availability
@functools.lru_cache(maxsize=1)
def nvidia_driver_reason() -> str | None:
    """None when NVML finds an NVIDIA driver and at least one GPU, else why not (fork-safe: no CUDA context)."""
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py (pynvml) is not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses per cause; the message names it
        return f"no NVIDIA driver: NVML init failed ({_nvml_error(exc)})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001
        return f"NVML cannot count GPUs ({_nvml_error(exc)})"
    finally:
        _nvml_shutdown(pynvml)
    if count < 1:
        return "the NVIDIA driver reports no GPU"
    return None


@functools.lru_cache(maxsize=1)
def torch_cuda_reason() -> str | None:
    """None when torch can run CUDA kernels here, else the precise reason. Initialises CUDA: workers only."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable: {exc}"
    driver = nvidia_driver_reason()
    if torch.version.cuda is None:
        build = f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)"
        return f"{build}; {driver}" if driver else build
    if driver:
        return f"{driver}; torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use CUDA"
    try:
        if not torch.cuda.is_available():
            return f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA {torch.version.cuda})"
    except Exception as exc:  # noqa: BLE001
        return f"torch.cuda.is_available() raised {type(exc).__name__}: {exc}"
    return None


def cuda_reason() -> str | None:
    """The reason a CUDA runtime cannot run here (no driver first, then torch), or None."""
    return nvidia_driver_reason() or torch_cuda_reason()


def _nvml_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def _nvml_shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass


def nvml_device_index() -> int | str:
    """The NVML device of CUDA device 0 in this process: CUDA_VISIBLE_DEVICES' first entry (index or UUID)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.isdigit():
        return int(first)
    if first.startswith(("GPU-", "MIG-")):
        return first
    return 0


def nvml_handle(pynvml: Any) -> Any:
    """NVML handle of the GPU this process computes on (after nvmlInit)."""
    which = nvml_device_index()
    if isinstance(which, str):
        return pynvml.nvmlDeviceGetHandleByUUID(which)
    return pynvml.nvmlDeviceGetHandleByIndex(which)
