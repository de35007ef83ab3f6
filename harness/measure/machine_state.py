"""The machine's CPU frequency, temperatures and NVML GPU clocks, temperature, power and throttle reasons at one
moment (a burn-in round's start and end); what cannot be read here is None with the reason, never 0."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def machine_state() -> dict[str, Any]:
    import psutil

    out: dict[str, Any] = {"time": time.time()}
    try:
        freq = psutil.cpu_freq()
        out["cpu_freq_mhz"] = float(freq.current) if freq and freq.current else None
    except (OSError, AttributeError, NotImplementedError):
        out["cpu_freq_mhz"] = None
    temps: dict[str, float] = {}
    try:
        for chip, readings in (psutil.sensors_temperatures() or {}).items():
            for i, r in enumerate(readings):
                temps[f"{chip}/{r.label or i}"] = float(r.current)
    except (OSError, AttributeError):
        pass
    if not temps:
        for zone in sorted(Path("/sys/class/thermal").glob("thermal_zone*")):
            try:
                temps[(zone / "type").read_text().strip() or zone.name] = int((zone / "temp").read_text()) / 1000
            except (OSError, ValueError):
                continue
    out["temperatures_c"] = temps or None
    if not temps:
        out["temperatures_unavailable"] = "no temperature sensor readable here (psutil, /sys/class/thermal)"
    out["gpus"] = _nvml()
    return out


def _nvml() -> list[dict[str, Any]] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no GPU: not readable here
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append({
                "index": i,
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                "throttle_reasons": int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
            })
        return gpus
    except Exception:  # noqa: BLE001 - a field this driver does not offer
        return None
    finally:
        pynvml.nvmlShutdown()
