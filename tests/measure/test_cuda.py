"""CUDA helpers without a GPU: availability reasons, NVML device choice, CUDA-event timing with fakes."""

from __future__ import annotations

import sys

import pytest

from gpu_fakes import FakeNvml, fake_torch
from harness.measure import cuda
from harness.measure.cuda import CudaEventTimer, nvml_device_index
from harness.measure.timer import Timer, TimingPolicy


@pytest.fixture
def fresh_reasons():
    cuda.nvidia_driver_reason.cache_clear()
    cuda.torch_cuda_reason.cache_clear()
    yield
    cuda.nvidia_driver_reason.cache_clear()
    cuda.torch_cuda_reason.cache_clear()


def test_no_driver_reason_names_nvml(monkeypatch, fresh_reasons):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    reason = cuda.nvidia_driver_reason()
    assert reason.startswith("no NVIDIA driver: NVML init failed") and "Shared Library Not Found" in reason


def test_driver_present_gives_no_reason(monkeypatch, fresh_reasons):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert cuda.nvidia_driver_reason() is None
    assert nvml.inits == nvml.shutdowns == 1


def test_torch_reason_on_this_machine(fresh_reasons):
    import torch

    reason = cuda.torch_cuda_reason()
    if torch.version.cuda is None:
        assert "is a CPU-only build" in reason
    elif reason is None:
        assert torch.cuda.is_available()


@pytest.mark.parametrize("value, expected", [("", 0), ("3", 3), ("2,0", 2), ("GPU-abc", "GPU-abc")])
def test_nvml_device_follows_cuda_visible_devices(monkeypatch, value, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert nvml_device_index() == expected


class DeviceClock:
    """Host clock and device stream advancing together: each call costs 2 ms host, 1.5 ms on the device."""

    def __init__(self, stream):
        self.now = 0
        self.stream = stream

    def __call__(self):
        return self.now

    def call(self):
        self.stream.log.append("call")
        self.now += 2_000_000
        self.stream.now_ms += 1.5


def test_timer_records_host_and_device_samples_with_events_around_each_call():
    torch = fake_torch()
    stream = torch.cuda.stream
    clock = DeviceClock(stream)
    dt = CudaEventTimer(stream, torch)
    run = Timer(clock).run(clock.call, TimingPolicy(warmup_iters=2, warmup_time_s=0, min_iters=3, min_time_s=0),
                           synchronize=stream.synchronize, device_timer=dt)
    assert run.samples_ns == (2_000_000,) * 3
    assert run.device_samples_ns == (1_500_000,) * 3
    assert dt.scope == "device_events"
    # warm-up without events; then record, call, record, sync per timed call
    assert stream.log == ["call", "sync"] * 2 + ["record", "call", "record", "sync"] * 3


def test_cpu_timing_is_unchanged_without_a_device_timer():
    clock = DeviceClock(fake_torch().cuda.stream)
    run = Timer(clock).run(clock.call, TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=2, min_time_s=0))
    assert run.device_samples_ns == () and len(run.samples_ns) == 2
