"""Fakes for the GPU code paths: pynvml, psutil.Process, torch.cuda (events, allocator) and tensorrt."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

MB = 2**20


class FakeProcess:
    """psutil.Process stand-in whose RSS follows a script, one value per memory_info() call (last repeats)."""

    def __init__(self, rss_mb: list[float]) -> None:
        self.values = [int(v * MB) for v in rss_mb]
        self.calls = 0

    def memory_info(self) -> Any:
        v = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return SimpleNamespace(rss=v)


class NVMLError(Exception):
    pass


class FakeNvml:
    """pynvml stand-in: one GPU; memory figures follow scripts; clocks and versions configurable."""

    NVML_CLOCK_SM = 0
    NVML_CLOCK_MEM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, proc_mb: list[float] | None = None, device_mb: list[float] | None = None,
                 pid: int | None = None, fail_init: bool = False, sm_clock: int = 1980, power_mw: int = 700_000,
                 per_process: bool = True) -> None:
        import os

        self.proc = [int(v * MB) for v in (proc_mb or [0])]
        self.device = [int(v * MB) for v in (device_mb or [0])]
        self.pid = pid if pid is not None else os.getpid()
        self.fail_init = fail_init
        self.sm_clock = sm_clock
        self.power_mw = power_mw
        self.per_process = per_process
        self.inits = self.shutdowns = 0
        self._pi = self._di = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        if not self.per_process:
            raise NVMLError("Not Supported")
        v = self.proc[min(self._pi, len(self.proc) - 1)]
        self._pi += 1
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=v), SimpleNamespace(pid=1, usedGpuMemory=999 * MB)]

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        v = self.device[min(self._di, len(self.device) - 1)]
        self._di += 1
        return SimpleNamespace(used=v, total=80 * 1024 * MB)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return "GPU-1234"

    def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
        return self.sm_clock if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, h: str, kind: int) -> int:
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return self.power_mw

    def nvmlDeviceGetTemperature(self, h: str, kind: int) -> int:
        return 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 0


class FakeEvent:
    """torch.cuda.Event stand-in: record() stores the fake device clock of the stream."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.t_ms: float | None = None
        self.synced = 0

    def record(self, stream: Any) -> None:
        self.t_ms = stream.now_ms
        stream.log.append("record")

    def synchronize(self) -> None:
        self.synced += 1

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.t_ms is not None and end.t_ms is not None
        return end.t_ms - self.t_ms


class FakeStream:
    def __init__(self) -> None:
        self.now_ms = 0.0
        self.log: list[str] = []
        self.cuda_stream = 0xBEEF

    def synchronize(self) -> None:
        self.log.append("sync")


class FakeCuda:
    """torch.cuda stand-in: events, allocator peaks, initialisation state."""

    Event = FakeEvent

    def __init__(self, allocated_mb: float = 0, reserved_mb: float = 0, initialized: bool = True) -> None:
        self.allocated = int(allocated_mb * MB)
        self.reserved = int(reserved_mb * MB)
        self.initialized = initialized
        self.resets = 0
        self.stream = FakeStream()

    def is_initialized(self) -> bool:
        return self.initialized

    def reset_peak_memory_stats(self) -> None:
        self.resets += 1

    def max_memory_allocated(self) -> int:
        return self.allocated

    def max_memory_reserved(self) -> int:
        return self.reserved

    def current_stream(self) -> FakeStream:
        return self.stream


def fake_torch(**kw: Any) -> Any:
    return SimpleNamespace(cuda=FakeCuda(**kw))


class _Enum:
    def __init__(self, **members: int) -> None:
        for k, v in members.items():
            setattr(self, k, v)


class FakeTrt:
    """tensorrt stand-in recording what the builder was asked for. version 10 has FP16/INT8 flags and the
    entropy calibrator; version 11 has neither (strong typing and Q/DQ only)."""

    class Logger:
        WARNING = 2

        def __init__(self, level: int) -> None:
            self.level = level

    def __init__(self, version: str = "10.13.0", parse_ok: bool = True, build_ok: bool = True) -> None:
        self.__version__ = version
        self.major = int(version.split(".")[0])
        self.parse_ok, self.build_ok = parse_ok, build_ok
        self.MemoryPoolType = _Enum(WORKSPACE=0)
        self.NetworkDefinitionCreationFlag = _Enum(STRONGLY_TYPED=1)
        self.BuilderFlag = _Enum(TF32=9, FP16=10, INT8=11) if self.major < 11 else _Enum(TF32=0)
        self.builds: list[dict[str, Any]] = []
        trt = self

        if self.major < 11:
            class IInt8EntropyCalibrator2:
                def __init__(self) -> None:
                    pass
            self.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2

        class Builder:
            def __init__(self, logger: Any) -> None:
                self.record: dict[str, Any] = {"flags": set(), "profiles": [], "calibrator": None}
                trt.builds.append(self.record)

            def create_network(self, flags: int) -> Any:
                self.record["network_flags"] = flags
                return SimpleNamespace(num_inputs=1, get_input=lambda i: SimpleNamespace(name="x"))

            def create_builder_config(self) -> Any:
                record = self.record

                class Config:
                    def set_memory_pool_limit(self, pool: int, size: int) -> None:
                        record["workspace"] = size

                    def set_flag(self, flag: int) -> None:
                        record["flags"].add(flag)

                    def clear_flag(self, flag: int) -> None:
                        record["flags"].discard(flag)
                        record.setdefault("cleared", set()).add(flag)

                    def add_optimization_profile(self, profile: Any) -> None:
                        record["profiles"].append(profile.shapes)

                    def set_calibration_profile(self, profile: Any) -> None:
                        record["calibration_profile"] = profile.shapes

                    def __setattr__(self, name: str, value: Any) -> None:
                        if name == "int8_calibrator":
                            record["calibrator"] = value
                        object.__setattr__(self, name, value)

                return Config()

            def create_optimization_profile(self) -> Any:
                p = SimpleNamespace(shapes={})
                p.set_shape = lambda name, lo, opt, hi: p.shapes.__setitem__(name, (tuple(lo), tuple(opt), tuple(hi)))
                return p

            def build_serialized_network(self, network: Any, config: Any) -> Any:
                cal = self.record["calibrator"]
                if cal is not None:  # TensorRT pulls batches until get_batch returns None
                    while cal.get_batch(["x"]) is not None:
                        pass
                return b"ENGINE" if trt.build_ok else None

        class OnnxParser:
            num_errors = 1

            def __init__(self, network: Any, logger: Any) -> None:
                pass

            def parse_from_file(self, path: str) -> bool:
                return trt.parse_ok

            def get_error(self, i: int) -> str:
                return "In node 0 (Foo): UNSUPPORTED_NODE"

        self.Builder, self.OnnxParser = Builder, OnnxParser


class FakeTensor:
    def __init__(self, arr: Any) -> None:
        self.arr = arr

    def cuda(self) -> "FakeTensor":
        return self

    def data_ptr(self) -> int:
        return id(self.arr)


def fake_torch_for_trt(name: str = "NVIDIA H100 80GB HBM3", cc: tuple[int, int] = (9, 0)) -> Any:
    props = SimpleNamespace(name=name, major=cc[0], minor=cc[1])
    cuda = SimpleNamespace(get_device_properties=lambda i: props)
    return SimpleNamespace(cuda=cuda, from_numpy=FakeTensor)
