"""The machine's ceilings: measured once per machine key, read back from the cache, re-measured on a key change
or when forced (a fake measurer: no timing in unit tests)."""

from __future__ import annotations

import json

from harness.profile import ceilings as ceil
from harness.profile.ceilings import ceilings_text, machine_ceilings, machine_key


class FakeMeasurer:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, threads: int) -> dict:
        self.calls.append(threads)
        entry = {"name": "gemm-fake", "precision": "fp32", "method": "fake", "size": "n=1", "work_per_rep": 2.0,
                 "repetitions": 3, "best": 10.0 * len(self.calls), "median": 9.0, "unit": "GFLOP/s"}
        bw = {"name": "triad-fake", "precision": "fp64", "method": "fake", "size": "1 MiB", "work_per_rep": 1.0,
              "repetitions": 3, "best": 5.0, "median": 4.0, "unit": "GB/s"}
        return {"threads": threads, "measured_at": "now", "compute": [entry], "peak_gflops": {"fp32": entry["best"]},
                "bandwidth": bw, "bandwidth_gbs": 5.0, "not_measured": {"bf16": "no kernel"}}


def test_measured_once_then_read_back(tmp_path):
    fake = FakeMeasurer()
    key = {"cpu_model": "Fake CPU", "threads": 2}
    first = machine_ceilings(2, cache=tmp_path, measure=fake, key=key)
    again = machine_ceilings(2, cache=tmp_path, measure=fake, key=key)
    assert fake.calls == [2]
    assert first["cache"]["hit"] is False and again["cache"]["hit"] is True
    assert again["peak_gflops"] == {"fp32": 10.0} and again["key"] == key
    stored = json.loads((tmp_path / "ceilings").glob("cpu-t2-*/ceilings.json").__next__().read_text())
    assert stored["bandwidth"]["method"] == "fake"
    assert "Fake CPU" in ceilings_text(again) and "bf16: not measured: no kernel" in ceilings_text(again)


def test_key_change_and_forced_remeasure(tmp_path):
    fake = FakeMeasurer()
    machine_ceilings(2, cache=tmp_path, measure=fake, key={"cpu_model": "A", "threads": 2})
    other = machine_ceilings(2, cache=tmp_path, measure=fake, key={"cpu_model": "A", "threads": 2,
                                                                   "onnxruntime": "9.9"})
    assert fake.calls == [2, 2] and other["peak_gflops"]["fp32"] == 20.0
    forced = machine_ceilings(2, cache=tmp_path, measure=fake, key={"cpu_model": "A", "threads": 2},
                              remeasure=True)
    assert fake.calls == [2, 2, 2] and forced["cache"]["hit"] is False and forced["peak_gflops"]["fp32"] == 30.0
    assert machine_ceilings(2, cache=tmp_path, measure=fake,
                            key={"cpu_model": "A", "threads": 2})["peak_gflops"]["fp32"] == 30.0


def test_default_key_follows_threads_and_versions(tmp_path, monkeypatch):
    fake = FakeMeasurer()
    machine_ceilings(1, cache=tmp_path, measure=fake)
    machine_ceilings(2, cache=tmp_path, measure=fake)
    machine_ceilings(2, cache=tmp_path, measure=fake)
    assert fake.calls == [1, 2]
    key = machine_key(2)
    assert {"cpu_model", "cpu_cores_logical", "machine_fingerprint", "threads", "numpy", "onnxruntime"} <= set(key)
    monkeypatch.setattr(ceil, "METHOD_VERSION", "ceilings/test")
    machine_ceilings(2, cache=tmp_path, measure=fake)
    assert fake.calls == [1, 2, 2]


def test_real_measurers_at_tiny_sizes(monkeypatch):
    """The measuring code itself, shrunk to milliseconds: every entry says its method, size, repetitions and
    best/median, and a precision without a kernel is a reason (no figures asserted: no timing in unit tests)."""
    monkeypatch.setattr(ceil, "GEMM_N", 32)
    monkeypatch.setattr(ceil, "TRIAD_MIN_BYTES", 1 << 16)
    monkeypatch.setattr(ceil, "last_level_cache_bytes", lambda: None)
    result = ceil.measure_ceilings(1)
    for e in [*result["compute"], result["bandwidth"]]:
        if e.get("best") is None:
            assert e["why"] and e["precision"] in result["not_measured"]
        else:
            assert {"method", "size", "repetitions", "best", "median", "unit"} <= set(e)
            assert e["repetitions"] >= ceil.MIN_REPS and e["best"] >= e["median"] > 0
    assert result["peak_gflops"]["fp32"] > 0 and result["bandwidth_gbs"] > 0
    assert "bf16" in result["not_measured"] and "others_cpu_percent" in result


def test_cli_prints_cached_ceilings(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    fake = FakeMeasurer()
    monkeypatch.setattr(ceil, "measure_ceilings", fake)
    assert main(["ceilings", "--threads", "1", "--cache-dir", str(tmp_path)]) == 0
    assert main(["ceilings", "--threads", "1", "--cache-dir", str(tmp_path), "--json"]) == 0
    assert fake.calls == [1]
    out = capsys.readouterr().out
    assert "gemm-fake" in out and '"cache"' in out and '"hit": true' in out
    assert main(["ceilings", "--threads", "1", "--cache-dir", str(tmp_path), "--remeasure"]) == 0
    assert fake.calls == [1, 1]
