"""Environment snapshot recorded with every run: machine, OS, libraries, git commit, threads, CPU quietness."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from harness.errors import install_hint
from harness.results.stored import RunEnvironmentRecord

LIBRARIES = ("inference-harness", "torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "numpy",
             "pandas", "jinja2", "pytest", "pytest-benchmark", "psutil", "nvidia-ml-py", "tensorrt")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# the modules runtimes import (Runtime.module): which installed distribution provides each is recorded, because
# one module has several builds (onnxruntime: onnxruntime, onnxruntime-gpu, onnxruntime-openvino, ...)
RUNTIME_MODULES = ("onnxruntime", "torch", "openvino", "tvm", "ai_edge_litert", "tensorrt")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def module_provider(module: str) -> dict[str, str] | None:
    """{"distribution", "version"} of the installed distribution whose files hold the top-level `module` (a
    package or a single file) that `import module` would load in this interpreter (found without importing it);
    None when no distribution does."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    folder = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    return site_providers(folder, (module,)).get(module)


def site_providers(folder: str | Path, modules: tuple[str, ...] | None = None) -> dict[str, dict[str, str]]:
    """The top-level modules (all, or those in `modules`) that the distributions installed in `folder` (one
    site-packages) provide, each with {"distribution", "version"}. Reads the RECORD and METADATA files only."""
    out: dict[str, dict[str, str]] = {}
    root = Path(folder)
    for info in sorted(root.glob("*.dist-info")) if root.is_dir() else ():
        try:
            record = (info / "RECORD").read_text(errors="replace")
        except OSError:
            continue
        tops = set()
        for line in record.splitlines():
            name = line.split(",", 1)[0]
            if name.endswith("/__init__.py") and name.count("/") == 1:
                tops.add(name.split("/", 1)[0])
            elif name.endswith(".py") and "/" not in name:
                tops.add(name[:-3])
        tops = {t for t in tops if t.isidentifier() and (modules is None or t in modules)}
        if not tops:
            continue
        meta = _name_version(info / "METADATA")
        if meta is None:
            continue
        for t in tops:
            out.setdefault(t, {"distribution": meta[0], "version": meta[1]})
    return out


def _name_version(path: Path) -> tuple[str, str] | None:
    name = version = None
    try:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("Name:") and name is None:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("Version:") and version is None:
                version = line.split(":", 1)[1].strip()
            elif not line.strip():
                break
    except OSError:
        return None
    return (name, version) if name and version else None


def module_providers() -> dict[str, dict[str, str]]:
    """module_provider of every module in RUNTIME_MODULES that some distribution provides here."""
    out = {}
    for module in RUNTIME_MODULES:
        got = module_provider(module)
        if got is not None:
            out[module] = got
    return out


def git_commit(where: Path | None = None) -> dict[str, Any]:
    where = where or Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty) if commit else None}


def cpu_busy_percent(interval: float = 0.5) -> float:
    """System-wide CPU use over `interval` seconds while the harness is idle: other jobs' load."""
    import psutil

    return float(psutil.cpu_percent(interval=interval))


def cpu_fingerprint(cpu: str | None = None, cores: int | None = None, memory_gb: float | None = None,
                    gpu_names: list[str] | None = None) -> str:
    """The machine fingerprint of snapshot(): CPU model, logical cores, memory, OS and architecture (and the GPU
    names where there are GPUs); the arguments default to this machine's CPU facts."""
    import psutil

    cpu = cpu if cpu is not None else cpu_model()
    cores = cores if cores is not None else psutil.cpu_count(logical=True)
    memory_gb = memory_gb if memory_gb is not None else round(psutil.virtual_memory().total / 2**30, 2)
    fp_src = f"{cpu}|{cores}|{memory_gb}|{platform.system()}|{platform.machine()}"
    if gpu_names:  # results from different GPUs are different machines (CPU-only fingerprints unchanged)
        fp_src += "|" + ",".join(gpu_names)
    return hashlib.sha256(fp_src.encode()).hexdigest()[:16]


def snapshot(threads: int | None = None, quiet_check_s: float = 0.5) -> RunEnvironmentRecord:
    """The machine and software a run measured on, read as a stored snapshot is (RunEnvironmentRecord: its
    fields, then the facts only printed or carried as open keys). `machine` labels the run in merged reports."""
    import psutil

    vm = psutil.virtual_memory()
    cpu = cpu_model()
    hostname, cores = socket.gethostname(), psutil.cpu_count(logical=True)
    memory_gb = round(vm.total / 2**30, 2)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    env: dict[str, Any] = {
        "hostname": hostname,
        "cpu_model": cpu,
        "cpu_cores_logical": cores,
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "memory_total_gb": memory_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "libraries": library_versions(),
        "providers": module_providers(),
        "git": git_commit(),
        "threads": {"harness_threads": threads, **{v: os.environ.get(v) for v in THREAD_VARS}},
        "cpu_affinity": affinity,
    }
    if quiet_check_s > 0:
        busy = cpu_busy_percent(quiet_check_s)
        cpus = len(affinity or ()) or cores or 1
        env.update(cpu_busy_percent_at_start=busy, cpu_quiet_at_start=busy < 15.0,
                   cpu_cores_free_at_start=round(max(0.0, cpus * (1.0 - busy / 100.0)), 2))
    gpu = gpu_snapshot()
    gpu_names = [str(g.get("name")) for g in gpu.get("gpus", [])]
    env.update(gpu=gpu, machine_fingerprint=cpu_fingerprint(cpu, cores, memory_gb, gpu_names),
               machine=f"{hostname} ({cpu}, {cores} cpus, threads={threads})")
    return RunEnvironmentRecord.from_dict(env, "this machine's snapshot")


def default_threads() -> int:
    """Threads per runtime by default: the CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------- GPU facts
CLOCK_DROP_FRACTION = 0.10  # an SM clock lower by more than this at the end of the run is flagged


def _na(reason: str) -> str:
    return f"not available: {reason}"


def gpu_snapshot(nvml: Any = None) -> dict[str, Any]:
    """GPU name, driver, CUDA (torch's and the driver's), cuDNN, TensorRT, clocks and power limits.

    Never initialises CUDA (NVML and version queries only: a CUDA context belongs to the worker that measures,
    and `--no-isolation` runs measure in this process). Every figure that cannot be read says
    "not available: <reason>".
    """
    build = _torch_build()
    out: dict[str, Any] = {"torch_cuda": _torch_cuda_version(build), "cudnn": _cudnn_version(build),
                           "tensorrt": _tensorrt_version()}
    out.update(nvml_facts(nvml))
    return out


def nvml_facts(nvml: Any = None) -> dict[str, Any]:
    """Driver, the driver's CUDA version and per-GPU facts with clocks, through NVML."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return {"gpus": [], "nvml": _na(f"nvidia-ml-py is not importable: {exc}")}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        return {"gpus": [], "nvml": _na(f"no NVIDIA driver: NVML init failed ({type(exc).__name__}: {exc})"),
                "driver": _na("no NVIDIA driver"), "cuda_driver": _na("no NVIDIA driver")}
    try:
        out: dict[str, Any] = {"nvml": "ok", "driver": _text(_try(nvml.nvmlSystemGetDriverVersion))}
        cuda = _try(nvml.nvmlSystemGetCudaDriverVersion)
        out["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda
        count = _try(nvml.nvmlDeviceGetCount)
        out["gpus"] = [_gpu_facts(nvml, i) for i in range(count if isinstance(count, int) else 0)]
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _gpu_facts(nvml: Any, index: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = _try(nvml.nvmlDeviceGetMemoryInfo, h)
    power = _try(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
    return {
        "index": index, "name": _text(_try(nvml.nvmlDeviceGetName, h)),
        "uuid": _text(_try(nvml.nvmlDeviceGetUUID, h)),
        "memory_total_mb": round(mem.total / 2**20) if hasattr(mem, "total") else mem,
        "sm_clock_mhz": _try(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _try(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
        "sm_clock_max_mhz": _try(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": _try(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
        "power_limit_w": power / 1000 if isinstance(power, (int, float)) else power,
        "temperature_c": _try(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
        "throttle_reasons": _try(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                                 or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"), h),
    }


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - an unsupported query on this GPU/driver is a reason, not a crash
        return _na(f"{type(exc).__name__}: {exc}")


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _torch_build() -> tuple[str, str | None] | None:
    """(torch's version, the CUDA it was built with or None) from its installed files, without importing torch
    (2-3 s: most of a short run's start-up). None where torch is not installed."""
    import ast
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
        found = re.search(r"^cuda(?:\s*:[^=\n]*)?\s*=\s*(.+)$", text, re.MULTILINE)
        cuda = ast.literal_eval(found.group(1).strip()) if found else None
        # torch.__version__ carries the local build tag ("2.11.0+cu130") that a wheel's metadata may lack
        own = re.search(r"^__version__(?:\s*:[^=\n]*)?\s*=\s*(.+)$", text, re.MULTILINE)
        full = str(ast.literal_eval(own.group(1).strip())) if own else version("torch")
        return full, (str(cuda) if cuda else None)
    except (OSError, ValueError, SyntaxError, PackageNotFoundError):
        return None


def _torch_cuda_version(build: tuple[str, str | None] | None) -> str:
    if build is None:
        try:
            import torch
        except ImportError as exc:
            return _na(f"torch is not importable: {exc}")
        return torch.version.cuda or _na(f"torch {torch.__version__} is a CPU-only build")
    return build[1] or _na(f"torch {build[0]} is a CPU-only build")


def _cudnn_version(build: tuple[str, str | None] | None) -> Any:
    if build is not None and build[1] is None:  # a CPU-only build has no cuDNN: no need to import torch
        return _na("torch was built without cuDNN")
    try:
        import torch

        v = torch.backends.cudnn.version()  # loads libcudnn, does not initialise CUDA
    except Exception as exc:  # noqa: BLE001
        return _na(f"{type(exc).__name__}: {exc}")
    return v if v is not None else _na("torch was built without cuDNN")


def _tensorrt_version() -> str:
    try:
        return version("tensorrt")
    except PackageNotFoundError:
        pass
    try:
        import tensorrt

        return str(tensorrt.__version__)
    except ImportError:
        return _na(f'tensorrt is not installed (optional extra: {install_hint("tensorrt")})')


def gpu_end_snapshot(start_env: RunEnvironmentRecord, nvml: Any = None) -> dict[str, Any]:
    """Clocks and power limits again at the end of the run, with a flag where a GPU's SM clock dropped.

    A drop (more than CLOCK_DROP_FRACTION) or a lower power limit hints at thermal or power throttling
    during the run: the run's GPU figures may be slower than the hardware's steady state.
    """
    end = nvml_facts(nvml)
    start_gpus = {g.get("uuid") or g.get("index"): g for g in (start_env.gpu or {}).get("gpus", [])}
    drops = []
    for g in end.get("gpus", []):
        s = start_gpus.get(g.get("uuid") or g.get("index"))
        if not s:
            continue
        a, b = s.get("sm_clock_mhz"), g.get("sm_clock_mhz")
        numbers = isinstance(a, (int, float)) and isinstance(b, (int, float))
        if numbers and a > 0 and b < a * (1 - CLOCK_DROP_FRACTION):
            drops.append(f"GPU {g['index']} SM clock {a} -> {b} MHz")
        pa, pb = s.get("power_limit_w"), g.get("power_limit_w")
        if isinstance(pa, (int, float)) and isinstance(pb, (int, float)) and pb < pa:
            drops.append(f"GPU {g['index']} power limit {pa} -> {pb} W")
    return {"gpu_end": end, "gpu_clock_drop": drops or None}
