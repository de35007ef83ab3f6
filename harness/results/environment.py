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

LIBRARIES = ("inference-harness", "torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "numpy",
             "pandas", "jinja2", "pytest", "pytest-benchmark", "psutil", "nvidia-ml-py", "tensorrt")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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


def snapshot(threads: int | None = None, quiet_check_s: float = 0.5) -> dict[str, Any]:
    """The machine and software a run measured on. `machine` labels the run in merged reports."""
    import psutil

    vm = psutil.virtual_memory()
    cpu = cpu_model()
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu,
        "cpu_cores_logical": psutil.cpu_count(logical=True),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "memory_total_gb": round(vm.total / 2**30, 2),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "libraries": library_versions(),
        "git": git_commit(),
        "threads": {"harness_threads": threads, **{v: os.environ.get(v) for v in THREAD_VARS}},
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    if quiet_check_s > 0:
        busy = cpu_busy_percent(quiet_check_s)
        env["cpu_busy_percent_at_start"] = busy
        env["cpu_quiet_at_start"] = busy < 15.0
    fp_src = f"{cpu}|{env['cpu_cores_logical']}|{env['memory_total_gb']}|{platform.system()}|{platform.machine()}"
    env["machine_fingerprint"] = hashlib.sha256(fp_src.encode()).hexdigest()[:16]
    env["machine"] = f"{env['hostname']} ({cpu}, {env['cpu_cores_logical']} cpus, threads={threads})"
    return env


def default_threads() -> int:
    """Threads per runtime by default: the CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)
