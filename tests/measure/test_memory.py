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
    f = rep.figures.as_dict()
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
    assert s._thread is None and rep.figures.as_dict()["sampler"]["thread"] is False
    assert rep.host_peak_mb == 512.0 and rep.figures.as_dict()["host_delta_mb"] == 412.0
    assert rep.figures.as_dict()["host_peak_source"] == "vmhwm"
    assert rep.figures.as_dict()["covers"].endswith("reused")


def test_failed_high_water_mark_reset_falls_back_to_the_thread():
    s = MemorySampler(period_s=0.001, process=FakeProcess([10]), hwm=(lambda: False, lambda: 10**12)).start()
    rep = s.stop()
    assert s._thread is not None
    assert rep.figures.as_dict()["host_peak_source"] == "sampled_rss" and rep.host_peak_mb == 10.0  # VmHWM unreset: ignored


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
    f = rep.figures.as_dict()
    assert rep.gpu_peak_mb == 2100.0 and f["gpu_source"] == "nvml_process"  # other pids are not counted
    assert f["gpu_process_peak_mb"] == 2100.0
    assert f["gpu_device_used_peak_mb"] == 5000.0 and f["gpu_device_used_before_mb"] == 1000.0
    assert nvml.inits == nvml.shutdowns == 1
    # the stored layout: the GPU's keys between the host's and the sampler's, as results.json always had them
    assert list(f) == ["covers", "host_rss_before_mb", "host_rss_peak_mb", "host_delta_mb", "host_peak_source",
                       "gpu_process_peak_mb", "gpu_device_used_peak_mb", "gpu_device_used_before_mb", "gpu_source",
                       "sampler"]


def test_torch_allocator_peaks_are_reset_at_start_and_reported():
    torch = fake_torch(allocated_mb=300, reserved_mb=512)
    nvml = FakeNvml(per_process=False, device_mb=[1000, 1800])  # a container: no per-process figures
    s = MemorySampler(gpu=True, torch_allocator=True, process=FakeProcess([1]), nvml=nvml, torch_module=torch,
                      hwm=None).start()
    assert torch.cuda.resets == 1
    rep = s.stop()
    f = rep.figures.as_dict()
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
    assert torch.cuda.resets == 0 and "torch_max_reserved_mb" not in rep.figures.as_dict()
    assert rep.gpu_peak_mb == 600.0 and rep.figures.as_dict()["gpu_source"] == "nvml_device_delta"


def test_no_nvml_is_a_recorded_problem_not_an_error():
    s = MemorySampler(gpu=True, process=FakeProcess([1]), nvml=FakeNvml(fail_init=True), hwm=None).start()
    rep = s.stop()
    assert rep.gpu_peak_mb is None and rep.figures.as_dict()["gpu_source"] is None
    assert "NVML not available" in rep.figures.as_dict()["gpu_problem"]


def test_stop_is_idempotent_and_close_stops_the_thread():
    s = MemorySampler(period_s=0.001, process=FakeProcess([1]), hwm=None).start()
    s.close()
    assert not s._thread.is_alive()
    assert s.stop() is s.report and s.report.figures.as_dict()["covers"] == "the case ended early"


# Messages as the allocators print them (torch 2.x CPU, CUDA caching allocator, ONNX Runtime's arena, numpy).
ALLOCATION_MESSAGES = [
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried "
     "to allocate 4398046511104 bytes.", 4398046511104, "4.0 TiB"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 48.00 GiB. GPU 0 has a total capacity of "
     "79.19 GiB of which 30.12 GiB is free.", 48 * 2**30, "48.0 GiB"),
    ("Fail: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running ConstantOfShape node. "
     "Name:'' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:360 void* "
     "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*) Failed to allocate memory "
     "for requested buffer of size 4000000000000", 4 * 10**12, "3.6 TiB"),
    ("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 3.64 TiB for an array with shape "
     "(1000000000000,) and data type float32", int(3.64 * 2**40), "3.6 TiB"),
    ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc", None, None),
]


@pytest.mark.parametrize("text, size, shown", ALLOCATION_MESSAGES)
def test_allocation_failures_are_recognised_with_the_size_asked_for(text, size, shown):
    from harness.measure.memory import allocation_failure, oom_reason

    failure = allocation_failure(text)
    assert failure is not None and failure.requested_bytes == size
    reason = oom_reason(failure, "run", 8.0, text)
    assert reason.startswith("out of memory in phase run: ") and "(memory cap 8 GiB)" in reason
    assert (f"asked for {shown}" in reason) if shown else ("an allocation failed" in reason)


@pytest.mark.parametrize("text", ["ValueError: operands could not be broadcast together with shapes (2,) (3,)",
                                  "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 5x3)", ""])
def test_other_errors_are_not_allocation_failures(text):
    from harness.measure.memory import allocation_failure

    assert allocation_failure(text) is None


def test_oom_reason_is_one_line_without_colour_codes():
    from harness.measure.memory import allocation_failure, oom_reason

    log = ("\x1b[1;31m2026-11-23 19:48:36.898 [E:onnxruntime:, sequential_executor.cc:677 ExecuteKernel] Non-zero "
           "status code returned while running Expand node. Status Message: Failed to allocate memory for requested "
           "buffer of size 51539607552\n\x1b[m")
    reason = oom_reason(allocation_failure(log), "warmup", None, log)
    assert reason.startswith("out of memory in phase warmup: an allocation asked for 48.0 GiB (memory cap none): ")
    assert "\x1b" not in reason and "\n" not in reason


def test_the_previous_activation_is_released_before_a_case_s_memory_is_measured(tmp_path, fakes):
    """A case that does not reuse the previous activation must not carry its memory: the worker drops the old
    activation before the case's sampler starts (an H200 run showed every batch-1 case with the batch-32 case's
    GPU memory before it). A fake runtime holds 300 MB on activation; the next case (another precision) must
    not count it."""
    from typing import ClassVar

    import numpy as np

    from harness.execution import CaseRunner
    from harness.options import OPTIONS, parse_run_options
    from harness.results.schema import CaseId
    from harness.runtimes import register_runtime

    class FakeHeavy(fakes.FakeOk):
        name: ClassVar[str] = "fake-heavy"

        def _activate(self) -> None:
            super()._activate()
            big = 300 if self.precision == "fp32" else 1
            self.ballast = np.ones(big * 2**20 // 8)  # touched pages: RSS

        def _deactivate(self) -> None:
            self.ballast = None

    register_runtime(FakeHeavy, replace=True)
    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-heavy", batch_sizes="1", precisions="fp32,fp16",
               threads="1", min_time="0.01", min_iters="5", warmup="1", cache_dir=str(tmp_path / "c"),
               out=str(tmp_path / "o"))
    config = parse_run_options(raw)
    runner = CaseRunner()
    heavy = runner.run(CaseId("fake-linear", "fake-heavy", "fp32", 1, None, "cpu"), config)
    light = runner.run(CaseId("fake-linear", "fake-heavy", "fp16", 1, None, "cpu"), config)
    assert heavy.status in ("passed", "failed") and light.status in ("passed", "failed"), (heavy.reason, light.reason)
    assert heavy.memory.host_delta_mb > 250
    # the fp32 activation (300 MB) was dropped before the fp16 case's figures started
    assert light.memory.host_rss_before_mb < heavy.memory.host_rss_peak_mb - 250, (light.memory, heavy.memory)
