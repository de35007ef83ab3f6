"""The energy tracker (harness.measure.energy) on fake counters: a fake powercap (RAPL) tree that wraps, a fake
NVML, fake time. Energy is measured around blocks, the idle draw subtracted, short windows refused, and where no
counter exists the record says unavailable with the reason, never 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.measure import energy as en
from harness.measure.energy import EnergyTracker, NvmlCounter, counters_for, rapl_counters
from harness.measure.tracker import TRACKERS, Tracker
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency


class FakeTime:
    """A clock and a sleep; every counter draws `watts[name]` while time passes (a second source of truth)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.hooks: list = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.advance(s)

    def advance(self, s: float) -> None:
        for h in self.hooks:
            h(s)
        self.now += s


def powercap(tmp_path: Path, zones: dict[str, tuple[str, int, int]]) -> Path:
    """zones: dir name -> (name, energy_uj, max_energy_range_uj)."""
    root = tmp_path / "powercap"
    root.mkdir()
    for d, (name, e, top) in zones.items():  # as the kernel lays it: a subzone inside its package, linked at the top
        parent = d.rsplit(":", 1)[0]
        z = root / parent / d if d.count(":") == 2 else root / d
        z.mkdir(parents=True)
        if z.parent != root:
            (root / d).symlink_to(z)
        (z / "name").write_text(name + "\n")
        (z / "energy_uj").write_text(f"{e}\n")
        (z / "max_energy_range_uj").write_text(f"{top}\n")
    return root


def drive(zone: Path, clock: FakeTime, watts: float) -> None:
    """The zone's energy_uj advances at `watts` while the fake clock moves, wrapping at its range."""
    top = int((zone / "max_energy_range_uj").read_text())

    def hook(s: float) -> None:
        e = int((zone / "energy_uj").read_text()) + int(watts * s * 1e6)
        (zone / "energy_uj").write_text(f"{e % (top + 1)}\n")

    clock.hooks.append(hook)


def test_no_counter_is_unavailable_with_the_reason_never_zero(tmp_path):
    counters, reasons = counters_for("cpu", powercap=tmp_path / "absent")
    assert counters == [] and reasons == [f"no RAPL counters ({tmp_path / 'absent'} is absent)"]
    t = EnergyTracker(counters, reasons)
    t.prepare()
    t.start()
    t.stop(100)
    rec = t.record(batch=4)
    assert rec.status == "unavailable" and "is absent" in rec.reason
    assert rec.joules_per_inference is None and rec.inferences_per_joule is None and rec.net_joules is None


def test_unreadable_zones_and_a_gpu_without_a_driver_say_why(tmp_path):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 5, 2**32)})
    (root / "intel-rapl:0" / "energy_uj").chmod(0)
    counters, why = rapl_counters(root)
    if counters:  # root reads a file whatever its mode: nothing to check here
        pytest.skip("running as root: a file's mode does not stop reading it")
    assert "not readable" in why

    class NoDriver:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    counters, reasons = counters_for("cuda", powercap=tmp_path / "absent", nvml=NoDriver())
    assert counters == [] and any("NVML init failed" in r for r in reasons)


def test_package_and_dram_over_blocks_with_a_wraparound_and_the_idle_draw_subtracted(tmp_path):
    top = 10_000_000  # 10 J: wraps every 0.2 s at 50 W; at 20 W idle every 0.5 s
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 9_000_000, top),
                               "intel-rapl:0:0": ("core", 0, top),  # inside the package's figure: not counted
                               "intel-rapl:0:1": ("dram", 100, 2**32)})
    clock = FakeTime()
    pkg, dram = root / "intel-rapl:0", root / "intel-rapl:0:1"
    state = {"busy": False}

    def package(s: float) -> None:  # 20 W idle, 50 W while a block runs
        w = 50.0 if state["busy"] else 20.0
        e = int((pkg / "energy_uj").read_text()) + int(w * s * 1e6)
        (pkg / "energy_uj").write_text(f"{e % (top + 1)}\n")

    clock.hooks.append(package)
    drive(dram, clock, 2.0)
    counters, why = rapl_counters(root)
    assert why is None and [c.name for c in counters] == ["package-0", "dram (package-0)"]
    t = EnergyTracker(counters, clock=clock, sleep=clock.sleep, idle_s=0.3)
    t.prepare()  # 0.3 s idle: 20 W and 2 W
    for calls in (50, 30):
        t.start()
        state["busy"] = True
        clock.advance(0.1)  # a 0.1 s block: the package counter wraps inside it once (9 J + ...)
        state["busy"] = False
        t.stop(calls)
    rec = t.record(batch=2)
    assert rec.status == "measured" and rec.calls == 80
    by = {s.name: s for s in rec.sources}
    assert by["package-0"].joules == pytest.approx(10.0, rel=1e-6)  # 2 x 0.1 s x 50 W, one wrap undone
    assert by["package-0"].idle_w == pytest.approx(20.0, rel=1e-3)
    assert by["package-0"].net_joules == pytest.approx(10.0 - 20.0 * 0.2, rel=1e-3)  # 6 J above idle
    assert by["dram (package-0)"].net_joules == pytest.approx(0.0, abs=1e-3)  # drew its idle only
    assert rec.joules_per_inference == pytest.approx(6.0 / 80, rel=1e-3)
    assert rec.joules_per_sample == pytest.approx(6.0 / 160, rel=1e-3)
    assert rec.inferences_per_joule == pytest.approx(80 / 6.0, rel=1e-3)
    assert 0 < rec.uncertainty_j < 0.1 * rec.net_joules


def test_a_window_shorter_than_the_counters_update_rate_is_refused_not_divided():
    clock = FakeTime()
    joules = {"v": 0.0}

    class Nvml:  # mJ since the driver loaded, moving at 300 W
        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            return int(joules["v"] * 1e3)

    clock.hooks.append(lambda s: joules.__setitem__("v", joules["v"] + 300.0 * s))
    gpu = NvmlCounter(Nvml(), None, "gpu 0 fake")  # updates every 100 ms: a window needs 1 s
    t = EnergyTracker([gpu], clock=clock, sleep=clock.sleep)
    t.prepare()
    t.start()
    clock.advance(0.2)
    t.stop(10)
    short = t.record()
    assert short.status == "refused" and "shorter than 10 updates" in short.reason
    assert short.joules_per_inference is None
    t.start()
    clock.advance(2.0)
    t.stop(1000)
    rec = t.record()
    assert rec.status == "measured" and rec.calls == 1010  # the short block's calls count for nothing measured
    assert rec.sources[0].window_s == pytest.approx(2.0) and rec.sources[0].joules == pytest.approx(600.0, rel=1e-3)


def test_a_counter_that_could_have_wrapped_twice_is_refused(tmp_path):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 0, 1_000_000)})  # 1 J range
    clock = FakeTime()
    drive(root / "intel-rapl:0", clock, 10.0)  # 10 W idle: wraps every 0.1 s
    (counter,), _ = rapl_counters(root)
    t = EnergyTracker([counter], clock=clock, sleep=clock.sleep, idle_s=0.05)
    t.prepare()
    t.start()
    clock.advance(0.5)
    t.stop(5)
    rec = t.record()
    assert rec.status == "refused" and "wrapped the counter more than once" in rec.reason


def test_a_counter_that_stops_answering_ends_the_record_not_the_case():
    class Flaky:
        name, method, update_s, wrap_j = "x", "m", 0.001, None
        n = 0

        def read_j(self) -> float:
            self.n += 1
            if self.n > 2:
                raise OSError("gone")
            return float(self.n)

    t = EnergyTracker([Flaky()], clock=FakeTime(), sleep=lambda s: None)
    t.prepare()
    t.start()
    t.stop(3)
    rec = t.record()
    assert rec.status == "unavailable" and "stopped answering" in rec.reason


def test_the_trackers_share_one_protocol():
    from harness.measure.contention import ContentionTracker
    from harness.measure.memory import MemoryTracker

    assert all(isinstance(t, Tracker) for t in (EnergyTracker([]), ContentionTracker(1), MemoryTracker()))
    assert {n: k.scope for n, k in TRACKERS.items()} == {"memory": "case", "energy": "block", "contention": "block"}


def test_a_forward_case_records_energy_unavailable_here_with_its_reason(tmp_path, fakes, monkeypatch):
    """End to end on this machine's code path: a fake runtime's case stores `energy` in the results, with the
    reason where no counter exists."""
    from harness.execution import CaseRunner
    from harness.options import OPTIONS, parse_run_options
    from harness.results.schema import CaseId

    monkeypatch.setattr(en, "POWERCAP", tmp_path / "no-powercap")
    monkeypatch.setattr(en, "_FOUND", {})
    monkeypatch.setattr(en.counters_for, "__defaults__", (tmp_path / "no-powercap", None))
    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-ok", batch_sizes="1", threads="1", min_time="0.01",
               min_iters="5", warmup="1", cache_dir=str(tmp_path / "c"), out=str(tmp_path / "o"))
    r = CaseRunner().run(CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu"), parse_run_options(raw))
    assert r.energy is not None and r.energy.status == "unavailable"
    assert r.energy.reason == f"no RAPL counters ({tmp_path / 'no-powercap'} is absent)"
    d = r.as_dict()
    assert d["energy"]["status"] == "unavailable" and d["energy"]["joules_per_inference"] is None


def test_the_report_shows_joules_per_inference_where_measured_and_the_reason_where_not():
    from harness.report.render import render_html
    from harness.report.tables import cases_frame
    from harness.results.schema import CaseId, CaseResult, EnergyRecord, EnergySource, RunResults

    def case(batch, energy):
        return CaseResult(CaseId("mlp", "ort-cpu", "fp32", batch, None, "cpu"), "passed",
                          samples_ns=[1000] * 10, latency=fake_latency(0.001, 10), energy=energy)

    measured = EnergyRecord(status="measured", calls=1000, batch=4, sources=[
        EnergySource("package-0", "powercap (RAPL) energy_uj", 30.0, 1.0, 20.0, 10.0, 0.05, 0.001)],
        net_joules=10.0, uncertainty_j=0.05, joules_per_inference=0.01, joules_per_sample=0.0025,
        inferences_per_joule=100.0)
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[
        case(4, measured), case(1, EnergyRecord(status="unavailable", reason="no RAPL counters (x is absent)"))])
    html = render_html(run)
    assert 'id="energy"' in html and "package-0 10 J above 20 W idle" in html
    assert "Energy unavailable for 1 case(s): no RAPL counters (x is absent)." in html
    df = cases_frame(run)
    assert list(df["energy_status"]) == ["measured", "unavailable"]
    assert df["joules_per_inference"].iloc[0] == 0.01 and df["inferences_per_joule"].iloc[0] == 100.0
    old = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[case(1, None)])
    assert 'id="energy"' not in render_html(old)  # results from before energy: the report as it was
