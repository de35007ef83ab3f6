"""CaseRunner's GPU bookkeeping with fake runtimes: memory figures, device samples, warm-up floor, scopes."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from harness.config import RunConfig

from harness.measure.timer import TimingPolicy
from harness.execution import CaseRunner
from harness.report.tables import cases_frame
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.runtimes import register_runtime
from harness.results.stored import RunEnvironmentRecord


class FakeDeviceTimer:
    scope = "device_events"

    def __init__(self) -> None:
        self.n = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.n += 1

    def elapsed_ns(self) -> int:
        return 1000 * self.n


@pytest.fixture
def gpu_like(fakes):
    class FakeGpu(fakes.FakeOk):
        """A runtime declaring a device timer, a warm-up floor and GPU memory sources (NVML absent here)."""

        name: ClassVar[str] = "fake-gpu-like"
        timing_scope: ClassVar[str] = "device_resident"
        warmup_floor_s: ClassVar[float] = 0.3
        memory_sources: ClassVar[frozenset[str]] = frozenset({"nvml"})

        def _activate(self) -> None:
            super()._activate()
            # 40 MiB resident during the case: above glibc's largest dynamic mmap threshold (32 MiB), so it is
            # always fresh pages, never heap memory an earlier test freed but the process still holds
            self.hog = np.ones(40 * 2**20, dtype=np.uint8)

        def device_timer(self) -> Any:
            return FakeDeviceTimer()

    return register_runtime(FakeGpu, replace=True)


@pytest.fixture
def config(fakes, tmp_path):
    return RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), batch_sizes=(1, 4),
                     timing=TimingPolicy(min_time_s=0.01, min_iters=5, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")


def case(runtime: str, batch: int = 2) -> CaseId:
    return CaseId("fake-linear", runtime, "fp32", batch, None, "cpu")


def test_cpu_case_has_host_memory_and_no_gpu_or_device_figures(config):
    r = CaseRunner().run(case("fake-ok"), config)
    assert r.status == "passed", r.reason
    assert r.host_peak_mb and r.host_peak_mb > 0 and r.gpu_peak_mb is None
    assert r.memory.host_rss_peak_mb == r.host_peak_mb
    assert r.memory.host_delta_mb >= 0 and r.memory.covers.startswith("activation")
    assert "gpu_process_peak_mb" not in r.memory.as_dict()  # a CPU case stores no GPU key
    assert r.device_samples_ns == [] and "device_latency" not in r.details
    assert r.details["warmup_time_s"] == config.measure.timing.warmup_time_s  # CPU: the run's warm-up, unchanged


def test_gpu_like_case_records_device_samples_warmup_floor_and_memory(config, gpu_like):
    runner = CaseRunner()
    r = runner.run(case("fake-gpu-like", 1), config)
    assert r.status == "passed", r.reason
    assert r.timing_scope == "device_resident"
    assert len(r.device_samples_ns) == len(r.samples_ns) and r.device_samples_ns[0] == 1000
    assert r.details["device_timing_scope"] == "device_events"
    assert r.details["device_latency"]["iterations"] == len(r.samples_ns)
    assert r.details["warmup_time_s"] == 0.3 > config.measure.timing.warmup_time_s
    assert r.host_peak_mb >= r.memory.host_rss_before_mb + 7  # the 40 MiB block counted at its peak
    assert "gpu_source" in r.memory.as_dict()  # NVML attempted (None here, with the problem recorded)
    reused = runner.run(case("fake-gpu-like", 4), config)
    assert reused.details["activation_reused"] and "reused" in reused.memory.covers
    runner.close()


def test_memory_fields_round_trip_and_fill_the_csv_columns(config):
    r = CaseRunner().run(case("fake-ok"), config)
    back = CaseResult.from_dict(r.as_dict())
    assert back.host_peak_mb == r.host_peak_mb and back.memory == r.memory and back.gpu_peak_mb is None
    run = RunResults(run_id="x", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[r])
    row = cases_frame(run).iloc[0]
    assert row["host_peak_mb"] == r.host_peak_mb and row["gpu_peak_mb"] is None
