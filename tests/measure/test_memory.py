"""MemorySampler with a fake psutil process, a fake NVML and a fake torch allocator (no GPU needed)."""

from __future__ import annotations

import time

import pytest

from gpu_fakes import FakeNvml, FakeProcess, fake_torch
from harness.measure.memory import MemorySampler


def test_host_peak_and_delta_from_sampled_rss_when_no_kernel_high_water_mark():
    proc = FakeProcess([100, 100, 180, 350, 120])  # MiB, one value per sample
    s = MemorySampler(period_s=0.001, process=proc, hwm=None).start()
    while proc.calls < 6:
        time.sleep(0.001)
    rep = s.stop()
    assert rep.host_peak_mb == 350.0 and rep.gpu_peak_mb is None
    f = rep.figures
    assert f["host_rss_before_mb"] == 100.0 and f["host_delta_mb"] == 250.0
    assert f["host_peak_source"] == "sampled_rss"
    assert f["sampler"]["thread"] is True and f["sampler"]["samples"] >= 5
    assert 0 <= f["sampler"]["busy_fraction"] < 1
    assert "gpu_process_peak_mb" not in f  # a CPU runtime records no GPU figures


def test_kernel_high_water_mark_is_used_without_a_thread():
    calls = []

    def reset() -> bool:
        calls.append("reset")
        return True

    proc = FakeProcess([100, 110])
    s = MemorySampler(process=proc, hwm=(reset, lambda: 512 * 2**20)).start()
    rep = s.stop("first inference, warm-up and timed loop; reused")
    assert calls == ["reset"]
    assert s._thread is None and rep.figures["sampler"]["thread"] is False
    assert rep.host_peak_mb == 512.0 and rep.figures["host_delta_mb"] == 412.0
    assert rep.figures["host_peak_source"] == "vmhwm"
    assert rep.figures["covers"].endswith("reused")


def test_failed_high_water_mark_reset_falls_back_to_the_thread():
    s = MemorySampler(period_s=0.001, process=FakeProcess([10]), hwm=(lambda: False, lambda: 10**12)).start()
    rep = s.stop()
    assert s._thread is not None
    assert rep.figures["host_peak_source"] == "sampled_rss" and rep.host_peak_mb == 10.0  # VmHWM unreset: ignored


def test_linux_high_water_mark_really_resets_here():
    from harness.measure.memory import _linux_hwm

    hwm = _linux_hwm()
    if hwm is None:
        pytest.skip("no /proc/self/status (not Linux)")
    reset, read = hwm
    if not reset():
        pytest.skip("/proc/self/clear_refs is not writable here")
    block = bytearray(64 * 2**20)  # touch 64 MiB
    peak = read()
    del block
    assert peak is not None and peak >= 64 * 2**20


def test_gpu_figures_from_nvml_process_memory():
    nvml = FakeNvml(proc_mb=[500, 900, 2100, 700], device_mb=[1000, 3000, 5000, 2000])
    s = MemorySampler(period_s=0.001, gpu=True, process=FakeProcess([100]), nvml=nvml, hwm=None).start()
    while nvml._pi < 5:
        time.sleep(0.001)
    rep = s.stop()
    f = rep.figures
    assert rep.gpu_peak_mb == 2100.0 and f["gpu_source"] == "nvml_process"  # other pids are not counted
    assert f["gpu_process_peak_mb"] == 2100.0
    assert f["gpu_device_used_peak_mb"] == 5000.0 and f["gpu_device_used_before_mb"] == 1000.0
    assert nvml.inits == nvml.shutdowns == 1


def test_torch_allocator_peaks_are_reset_at_start_and_reported():
    torch = fake_torch(allocated_mb=300, reserved_mb=512)
    nvml = FakeNvml(per_process=False, device_mb=[1000, 1800])  # a container: no per-process figures
    s = MemorySampler(gpu=True, torch_allocator=True, process=FakeProcess([1]), nvml=nvml, torch_module=torch,
                      hwm=None).start()
    assert torch.cuda.resets == 1
    rep = s.stop()
    f = rep.figures
    assert f["gpu_process_peak_mb"] is None
    assert f["torch_max_allocated_mb"] == 300.0 and f["torch_max_reserved_mb"] == 512.0
    assert rep.gpu_peak_mb == 512.0 and f["gpu_source"] == "torch_max_reserved"


def test_device_delta_is_the_last_resort_and_torch_is_never_initialised_by_the_sampler():
    torch = fake_torch(initialized=False)
    nvml = FakeNvml(per_process=False, device_mb=[1000, 1600, 1200])
    s = MemorySampler(period_s=0.001, gpu=True, torch_allocator=True, process=FakeProcess([1]), nvml=nvml,
                      torch_module=torch, hwm=None).start()
    while nvml._di < 4:
        time.sleep(0.001)
    rep = s.stop()
    assert torch.cuda.resets == 0 and "torch_max_reserved_mb" not in rep.figures
    assert rep.gpu_peak_mb == 600.0 and rep.figures["gpu_source"] == "nvml_device_delta"


def test_no_nvml_is_a_recorded_problem_not_an_error():
    s = MemorySampler(gpu=True, process=FakeProcess([1]), nvml=FakeNvml(fail_init=True), hwm=None).start()
    rep = s.stop()
    assert rep.gpu_peak_mb is None and rep.figures["gpu_source"] is None
    assert "NVML not available" in rep.figures["gpu_problem"]


def test_stop_is_idempotent_and_close_stops_the_thread():
    s = MemorySampler(period_s=0.001, process=FakeProcess([1]), hwm=None).start()
    s.close()
    assert not s._thread.is_alive()
    assert s.stop() is s.report and s.report.figures["covers"] == "the case ended early"
