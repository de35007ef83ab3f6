"""GPU facts in the environment snapshot, with a fake NVML, and their graceful absence on CPU machines."""

from __future__ import annotations

from gpu_fakes import FakeNvml
from harness.results.environment import gpu_end_snapshot, gpu_snapshot, nvml_facts
from harness.results.stored import RunEnvironmentRecord


def test_gpu_facts_through_nvml():
    facts = nvml_facts(FakeNvml())
    assert facts["driver"] == "580.65.06" and facts["cuda_driver"] == "13.0"
    gpu = facts["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["sm_clock_mhz"] == 1980
    assert gpu["mem_clock_mhz"] == 2619 and gpu["power_limit_w"] == 700.0 and gpu["memory_total_mb"] == 81920


def test_no_driver_degrades_to_reasons():
    facts = nvml_facts(FakeNvml(fail_init=True))
    assert facts["gpus"] == [] and facts["nvml"].startswith("not available: no NVIDIA driver")
    snap = gpu_snapshot(FakeNvml(fail_init=True))
    for key in ("torch_cuda", "cudnn", "tensorrt"):
        assert isinstance(snap[key], (str, int))  # a version, or "not available: <reason>"


def test_clock_drop_between_start_and_end_is_flagged():
    start = RunEnvironmentRecord(gpu=nvml_facts(FakeNvml(sm_clock=1980)))
    assert gpu_end_snapshot(start, FakeNvml(sm_clock=1900))["gpu_clock_drop"] is None  # within 10 %
    end = gpu_end_snapshot(start, FakeNvml(sm_clock=1410, power_mw=500_000))
    assert end["gpu_clock_drop"] == ["GPU 0 SM clock 1980 -> 1410 MHz", "GPU 0 power limit 700.0 -> 500.0 W"]
    assert end["gpu_end"]["gpus"][0]["sm_clock_mhz"] == 1410


def test_cpu_machine_end_snapshot_has_no_drop():
    start = RunEnvironmentRecord(gpu=nvml_facts(FakeNvml(fail_init=True)))
    assert gpu_end_snapshot(start, FakeNvml(fail_init=True))["gpu_clock_drop"] is None


def test_torch_build_is_read_from_its_files_without_importing_torch(tmp_path, monkeypatch):
    """torch's version and CUDA build come from its installed version.py (importing torch took 2-3 s of every
    run's start); they agree with what torch says of itself; a CUDA build's version.py is read the same."""
    import importlib.util
    from types import SimpleNamespace

    import torch

    from harness.results.environment import _torch_build

    assert _torch_build() == (torch.__version__, torch.version.cuda)
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: SimpleNamespace(origin=str(fake / "__init__.py")))
    monkeypatch.setattr("harness.results.environment.version", lambda name: "2.11.0+cu130")
    assert _torch_build() == ("2.11.0+cu130", "13.0")
