"""One results schema: the writer (as_dict / to_json) and the strict reader (schema.reader()) agree on every
stored record, field for field, and a full record survives the round trip."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from harness.precision import Precision
from harness.results.schema import (
    SCHEMA_VERSION,
    BatcherRun,
    Block,
    CaseId,
    CaseResult,
    EnergyRecord,
    EnergySource,
    RunResults,
    AbBlock,
    AbResult,
    ScenarioRun,
    TrafficReplayRecord,
    results_from_doc,
)
from harness.results.stats import latency_stats
from harness.results.records import EndToEndRecord, GenerationRecord, LocalizationRecord, MemoryRecord
from harness.results.stored import BlockContention, CaseContentionRecord, EnvironmentRecord, ProfileRecord
from harness.results.stored import RunEnvironmentRecord

# a block's contention with every figure set (a kernel that reads them all, a verdict taken back: own_wait)
FULL_BLOCK_CONTENTION = BlockContention(
    wall_s=0.5, threads=2, cpu_cores=1.9, run_s=0.9, runqueue_wait_s=0.1, wait_fraction=0.1, involuntary_switches=3,
    others_cores=0.1, cores_free=1.9, psi_some=0.05, steal_s=0.0, steal_fraction=0.0, contended=False,
    cause="waited", own_wait="its own threads")

# Keys the writer adds that are derived from other fields, not fields of their own (the reader ignores them).
DERIVED = {CaseResult: {"id"}, RunEnvironmentRecord: {"os"}}  # (a snapshot's open keys: kept, not declared)


def full_case() -> CaseResult:
    """A CaseResult with every field set to something other than its default (test_full_case_sets_every_field
    keeps it so: a new field must be given a value here)."""
    samples = [1_000_000 + 1_000 * i for i in range(10)]
    return CaseResult(
        case=CaseId("mlp", "ort-cpu", Precision.FP16, 4, 128, "cpu", gen=16, variant="opt=basic"), status="failed", reason="drift 0.2",
        phase="accuracy", signal="SIGSEGV", stderr_tail="tail", samples_ns=samples, warmup_iters=5,
        timing_scope="host_to_host", scenario="offline", latency=latency_stats(samples),
        throughput_sps=3980.1, accuracy={"max_abs": 0.25, "passed": False}, reference_runtime="torch", setup_s=1.5,
        artifact="model.onnx", artifact_cache_hit=True, feed_sha256="ab" * 32, model_fingerprint="cd" * 8,
        details={"note": [1, 2]},
        blocks=[Block.measured(samples[:6], "case", contention=FULL_BLOCK_CONTENTION),
                Block.measured(samples[6:], "round", reactivated=True), Block.failed("worker died", "confirm")],
        blocks_pending=1, duration_s=2.5, host_peak_mb=512.0, gpu_peak_mb=128.0, memory=MemoryRecord.from_dict({"gpu_source": "nvml"}),
        device_samples_ns=[900_000 + i for i in range(10)], precision_recipe="fp16: converter",
        localization=LocalizationRecord.from_dict({"first_layer": "fc1"}), is_reference=True,
        generation=GenerationRecord(ttft_ns=[v - 1000 for v in samples], decode_ns=[[400, 600]] * 10, e2e_ns=samples),
        reference_deterministic=False,
        scenarios=[ScenarioRun("server", "INVALID", reasons=["too slow"], checks={"min_duration": True},
                               min_duration_s=0.5, min_query_count=10, query_count=20, samples_per_query=1,
                               samples_per_s=99.5, latency_ms={"p99": 2.0}, query_latency_ms={"p99": 3.0},
                               early_stopping_ms=2.1, target_qps=100.0, target_latency_ms=10.0,
                               target_latency_percentile=0.99, target_latency_basis="--server-latency", loop_p99_ms=0.2,
                               contended=True, contention_cause="waited",
                               overlatency_queries=3, calls=20, call_p50_ms=0.9,
                               call_mean_ms=1.0, search_step=2, wall_s=1.25, log_dir="loadgen/x", error="e",
                               batcher=BatcherRun(4, 2.0, [1, 0, 3, 5], {"p50": 0.5, "p99": 2.0}, 5))],
        end_to_end=EndToEndRecord(steps=["pre", "post"]), contention=CaseContentionRecord(
            blocks=2, contended_blocks=1, contended=True, wait_fraction_max=0.3, psi_some_max=0.2,
            steal_fraction_max=0.0, cause="run-queue wait"),
        profile=ProfileRecord.from_dict(
            {"total_ms": 1.0, "measured_p50_ms": 1.1, "nodes": [{"node": "fc1", "time_ms": 1.0}]}),
        ab=AbResult(a="base", b="opt=basic", b_case=CaseId("mlp", "ort-cpu", Precision.FP16, 4, 128, "cpu",
                                                           variant="opt=basic"),
                    order=["ab", "ba"], blocks=[AbBlock("a", 0, samples[:5], BlockContention(contended=False)),
                                                AbBlock("b", 0, samples[5:], BlockContention(contended=True))],
                    block_time_s=0.2, inject=0.05, verdict="regressed", reason="B/A 1.05", ratio=1.05, ci_low=1.01,
                    ci_high=1.09, confidence=0.99, min_effect=0.02, pairs_used=1, b_vs_a={"passed": True}),
        environment=EnvironmentRecord(key="0123456789abcdef", requirements=["onnxruntime==1.24.4"], python="3.11.7",
                                      packages={"onnxruntime": "1.24.4"},
                                      providers={"onnxruntime": {"distribution": "onnxruntime", "version": "1.24.4"}}),
        energy=EnergyRecord(status="measured", reason="dram: refused", calls=100, batch=4, sources=[
            EnergySource("package-0", "powercap (RAPL) energy_uj", 3.0, 1.0, 20.0, 1.5, 0.01, 0.001)],
            net_joules=1.5, uncertainty_j=0.01, joules_per_inference=0.015, joules_per_sample=0.00375,
            inferences_per_joule=66.7, method="m"),
        traffic=TrafficReplayRecord(source="t.toml", traffic="Poisson, 10 requests, seed 0", rate=100.0, requests=10,
                                    offered_rps=98.0, throughput_rps=97.5, latency_ms={"p50": 1.0, "p99": 2.0},
                                    send_error_ms={"p99": 0.01}, calls=5, mean_batch=2.0, batcher="max=2,wait=1",
                                    dims="batch from the traffic", contended=True, contention_cause="c",
                                    wall_s=0.1, error="e"))


# a run's snapshot with every field set (and an open key, written after them)
FULL_ENVIRONMENT = RunEnvironmentRecord.from_dict({
    "hostname": "h", "machine": "h (x, 2 cpus, threads=2)", "machine_fingerprint": "0123456789abcdef",
    "cpu_model": "x", "cpu_cores_logical": 2, "cpu_cores_physical": 1, "memory_total_gb": 7.5, "python": "3.11.7",
    "libraries": {"numpy": "2.4.6", "torch": None}, "git": {"commit": "c" * 40, "dirty": False},
    "threads": {"harness_threads": 2}, "gpu": {"gpus": []}, "gpu_end": {"gpus": []},
    "harness_overhead": {"overhead_p50_ns": 80}, "cpu_busy_percent_at_start": 3.0, "cpu_cores_free_at_start": 1.9,
    "cpu_quiet_at_start": True, "cpu_busy_others_percent": 1.5, "ray_nodes": {"n1": {"hostname": "n1"}},
    "os": "Linux-6.8"})


def full_run() -> RunResults:
    return RunResults(run_id="r1", started_at="2026-01-01T00:00:00Z", environment=FULL_ENVIRONMENT,
                      config={"models": ["mlp"]}, cases=[full_case()], finished_at="2026-01-01T00:01:00Z",
                      complete=True, interrupted=True, harness_version="9.9", schema_version=SCHEMA_VERSION)


def written(run: RunResults) -> dict[str, Any]:
    """What the writer puts in results.json, parsed back."""
    return json.loads(run.to_json())


# For each stored record type: how to find one in the written document of full_run().
RECORDS: dict[type, Any] = {
    RunResults: lambda d: d,
    CaseResult: lambda d: d["cases"][0],
    CaseId: lambda d: d["cases"][0]["case"],
    Block: lambda d: d["cases"][0]["blocks"][0],
    ScenarioRun: lambda d: d["cases"][0]["scenarios"][0],
    AbResult: lambda d: d["cases"][0]["ab"],
    AbBlock: lambda d: d["cases"][0]["ab"]["blocks"][0],
    BatcherRun: lambda d: d["cases"][0]["scenarios"][0]["batcher"],
    TrafficReplayRecord: lambda d: d["cases"][0]["traffic"],
    BlockContention: lambda d: d["cases"][0]["blocks"][0]["contention"],
    CaseContentionRecord: lambda d: d["cases"][0]["contention"],
    EnvironmentRecord: lambda d: d["cases"][0]["environment"],
    RunEnvironmentRecord: lambda d: d["environment"],
}


def reader_fields(record: type) -> set[str]:
    """The keys the strict reader reads for `record`: the properties of its JSON schema."""
    schema = TypeAdapter(record).json_schema()
    return set(schema["properties"])


def writer_fields(record: type, doc: dict[str, Any]) -> set[str]:
    """The keys the writer writes for `record` (a full instance: no key is left out for being empty)."""
    return set(RECORDS[record](doc)) - DERIVED.get(record, set())


def schema_drift(record: type, doc: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(written but not read, read but not written) for one record type."""
    w, r = writer_fields(record, doc), reader_fields(record)
    return w - r, r - w


@pytest.mark.parametrize("record", list(RECORDS), ids=lambda r: r.__name__)
def test_writer_and_reader_have_the_same_fields(record: type) -> None:
    only_written, only_read = schema_drift(record, written(full_run()))
    assert not only_written, f"{record.__name__}: written but not read back: {sorted(only_written)}"
    assert not only_read, f"{record.__name__}: read but never written: {sorted(only_read)}"
    assert reader_fields(record) == {f.name for f in dataclasses.fields(record)}


def test_full_case_sets_every_field() -> None:
    """The round trip below covers every field only if the fixture sets each one away from its default (in at
    least one of the records of its type; schema_version can only be the current one)."""
    case = full_case()
    for records in ([full_run()], [case], [case.case], case.blocks, case.scenarios, [case.scenarios[0].batcher],
                    [case.traffic], [case.blocks[0].contention], [case.contention], [case.environment],
                    [full_run().environment]):
        for f in dataclasses.fields(records[0]):
            if f.name == "schema_version":
                continue
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                       else f.default)
            assert any(getattr(r, f.name) != default for r in records), \
                f"{type(records[0]).__name__}.{f.name}: give it a value in full_case()"


def test_a_full_run_survives_write_and_strict_read() -> None:
    run = full_run()
    back = results_from_doc(written(run), "full.json")
    assert back == run
    assert back.environment.extra("os") == "Linux-6.8" and list(written(run)["environment"])[-1] == "os"
    assert back.cases[0].is_reference is True and back.cases[0].reference_deterministic is False
    assert back.cases[0].drift_note == "nondeterministic reference"


def test_one_field_on_one_side_only_is_found() -> None:
    """The check itself: a key the writer adds that the reader does not know, or a field the writer leaves out,
    each fails it."""
    doc = written(full_run())
    doc["cases"][0]["new_metric"] = 1.0
    assert schema_drift(CaseResult, doc) == ({"new_metric"}, set())
    doc = written(full_run())
    del doc["cases"][0]["is_reference"]
    assert schema_drift(CaseResult, doc) == (set(), {"is_reference"})
    del doc["complete"]
    assert schema_drift(RunResults, doc) == (set(), {"complete"})


def _leaves(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every scalar, list and dict validator in a pydantic core schema, with where it is."""
    out = []
    kind = schema.get("type")
    if kind in ("str", "int", "float", "bool", "list", "dict"):
        out.append((path, schema))
    for key, value in schema.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{path}.{schema.get('name', key) if key == 'schema' else key}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, dict):
                    out += _leaves(v, f"{path}.{key}[{i}]")
    return out


def test_the_reader_is_strict_everywhere() -> None:
    """A dataclass record cannot be strict as a whole (pydantic would want an instance), so each field's type
    carries Strict: no field may be left lax (a "4" read as 4, 1 as true, a tuple as a list)."""
    from harness.results.schema import reader

    lax = [p for p, s in _leaves(reader().core_schema) if not s.get("strict")]
    assert not lax, f"lax validators in the results reader: {lax}"


def test_a_run_snapshot_writes_what_it_holds_and_keeps_its_open_keys() -> None:
    """A partial snapshot (an old results file) is written with its few keys; one with a hostname writes every
    snapshot field (null where unknown), the fields added during a run only where added, open keys after the
    fields in the order they came; `add` goes through the record."""
    partial = {"cpu_model": "x", "cpu_cores_logical": 2, "libraries": {"numpy": "2"}}
    assert RunEnvironmentRecord.from_dict(partial).as_dict() == partial
    env = RunEnvironmentRecord.from_dict({"os": "Linux", "hostname": "h", "cpu_affinity": [0, 1]})
    env.add(gpu_end={"gpus": []}, gpu_clock_drop=None)
    env.cpu_busy_others_percent = None
    d = env.as_dict()
    assert list(d)[:12] == ["hostname", "machine", "machine_fingerprint", "cpu_model", "cpu_cores_logical",
                            "cpu_cores_physical", "memory_total_gb", "python", "libraries", "git", "threads", "gpu"]
    assert list(d)[12:] == ["gpu_end", "cpu_busy_others_percent", "os", "cpu_affinity", "gpu_clock_drop"]
    assert d["machine"] is None and "ray_nodes" not in d and "harness_overhead" not in d
    back = RunEnvironmentRecord.from_dict(json.loads(json.dumps(d)))
    assert back.as_dict() == d and back.extra("os") == "Linux" and back.extra("hostname") is None
