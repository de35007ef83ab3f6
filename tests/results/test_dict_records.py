"""Memory, end-to-end, generation and localisation as typed records: read by attribute, and written back as the dict
they were made from (keys, order, values), so results.json does not change by a byte; keys a record does not
declare are kept, written after the ones it does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ResultsError
from harness.results.records import (
    EndToEndRecord,
    GenerationRecord,
    GenerationStats,
    LocalizationFinding,
    LocalizationRecord,
    MemoryRecord,
    TokenAgreement,
)
from harness.results.schema import CaseId, CaseResult, RunResults, load_results, results_from_doc
from harness.results.stats import latency_stats, summary_ms
from harness.results.stored import RunEnvironmentRecord

SAMPLES = [1_000_000 + 7_000 * i for i in range(12)]
SAMPLE_RUN = Path(__file__).resolve().parents[2] / "docs" / "samples" / "gpu-h200-2026-11-27" / "results.json"

# as harness.measure.memory.MemorySampler builds it on a GPU with torch's allocator (every optional key), with
# a key this harness does not declare (a newer harness may add some) after the ones it does
MEMORY = {"covers": "activation, first inference, warm-up and timed loop", "host_rss_before_mb": 100.5,
          "host_rss_peak_mb": 612.25, "host_delta_mb": 511.75, "host_peak_source": "vmhwm",
          "gpu_process_peak_mb": 300.0, "gpu_device_used_peak_mb": 1300, "gpu_device_used_before_mb": 1000.0,
          "gpu_problem": "partial", "torch_max_allocated_mb": 20.0,
          "torch_max_reserved_mb": 22.0, "gpu_source": "nvml_process",
          "sampler": {"thread": True, "period_ms": 10.0, "samples": 31, "mean_sample_us": 12.5,
                      "busy_fraction": 0.00125}, "a_newer_key": {"kept": [1, 2]}}
# as harness.measure.end_to_end.measure_end_to_end returns it (a step with no interval: None)
END_TO_END = {"steps": "decode -> model -> sum", "samples_ns": SAMPLES, "warmup_iters": 3,
              "latency": latency_stats(SAMPLES).as_dict(), "throughput_sps": 1890.5, "pre_p50_ms": 0.25,
              "pre_p50_ci_low_ms": 0.2, "pre_p50_ci_high_ms": None, "model_p50_ms": 0.75, "model_p50_ci_low_ms": 0.7,
              "model_p50_ci_high_ms": 0.8, "post_p50_ms": 0.05, "post_p50_ci_low_ms": 0.04, "post_p50_ci_high_ms": 0.06}
# as harness.accuracy.localize returns it (a tensor that held NaN: its figures written "nan"), cut short
LOCALIZATION = {"trigger": "failure", "tolerance": {"max_rel_l2": 0.02, "min_cosine": 0.999}, "checked": 12,
                "skipped": 3, "first_bad": [
                    {"node": "/fc/Gemm", "op_type": "Gemm", "tensor": "fc_out", "max_abs": 2.0, "p99_abs": 1.5,
                     "rel_l2": 0.3, "cosine": 0.9, "nonfinite": 0},
                    {"node": "/sm", "op_type": "Softmax", "tensor": "p", "max_abs": "nan", "p99_abs": "nan",
                     "rel_l2": "nan", "cosine": "nan", "nonfinite": 4}],
                "truncated": "time budget of 30 s reached after 12 of 40 tensors"}
TTFT, STEPS = [400_000 + 1_000 * i for i in range(12)], [[100_000 + i, 150_000 - 2 * i] for i in range(12)]
E2E = [t + sum(st) for t, st in zip(TTFT, STEPS)]  # a generation's end to end: its TTFT and steps, its sample


def generation() -> dict[str, Any]:
    """As harness.workloads.generate.workload stores it: the summary, its conformance, the KV cache size."""
    steps = [s for st in STEPS for s in st]
    return {"batch": 2, "prompt_len": 6, "new_tokens": 3, "generations": 12, "ttft_ns": TTFT, "decode_ns": STEPS,
            "e2e_ns": E2E, "ttft": summary_ms(TTFT, (50, 90, 99)), "tpot": summary_ms(steps, (50, 90, 99)),
            "e2e": summary_ms(E2E, (50, 90, 99)), "itl": {"edges_ms": [0.1, 0.15], "counts": [24]},
            "tokens_per_s": 5000.0, "decode_tokens_per_s": 8000.5, "context_p50_ms": [[7, 0.1], [8, 0.15]],
            "conformance": {"reference": "torch fp32", "first_step_logits": {"rel_l2": 1e-6, "passed": True},
                            "exact_match_rate": 1.0, "first_divergence": None,
                            "first_divergence_per_sequence": [None, None], "sequences_identical": 2, "sequences": 2,
                            "tokens": [[1, 2, 3], [4, 5, 6]], "reference_tokens": [[1, 2, 3], [4, 5, 6]]},
            "kv_cache_mb": 0.5}


def case_doc(**parts: Any) -> dict[str, Any]:
    samples = E2E if "generation" in parts else SAMPLES
    case = CaseResult(CaseId("m", "ort-cpu", "fp32", 2, 6, "cpu", gen=3 if "generation" in parts else None),
                      "passed", samples_ns=samples, latency=latency_stats(samples))
    return {**case.as_dict(), **parts}


def run_doc(*cases: dict[str, Any]) -> dict[str, Any]:
    return {**RunResults("r", "2026-11-27T12:00:00Z", RunEnvironmentRecord.from_dict({"hostname": "h"}), {"workload": "forward"}).as_dict(),
            "cases": list(cases)}


@pytest.mark.parametrize("name, value, record", [("memory", MEMORY, MemoryRecord),
                                                 ("end_to_end", END_TO_END, EndToEndRecord),
                                                 ("generation", generation(), GenerationRecord),
                                                 ("localization", LOCALIZATION, LocalizationRecord)])
def test_a_stored_part_is_read_typed_and_written_back_key_for_key(name, value, record):
    doc = run_doc(case_doc(**{name: value}))
    run = results_from_doc(json.loads(json.dumps(doc)), "results.json")
    part = getattr(run.cases[0], name)
    assert isinstance(part, record)
    assert part.as_dict() == value and list(part.as_dict()) == list(value)  # same keys, same order
    # and the file the writer makes of it is the file the old writer made of the dict, byte for byte
    assert run.to_json() == json.dumps(doc, indent=1)
    # a record built from the dict in the harness (not read from a file) writes the same
    assert CaseResult.from_dict(doc["cases"][0]).as_dict()[name] == value


def test_the_typed_fields_say_what_the_dicts_said():
    case = results_from_doc(run_doc(case_doc(memory=MEMORY, end_to_end=END_TO_END)), "r").cases[0]
    assert case.memory.host_rss_peak_mb == 612.25 and case.memory.gpu_source == "nvml_process"
    assert case.memory.gpu_device_used_peak_mb == 1300 and isinstance(case.memory.gpu_device_used_peak_mb, int)
    assert case.end_to_end.pre_p50_ci_high_ms is None and case.end_to_end.model_p50_ms == 0.75
    assert case.end_to_end.latency.iterations == len(SAMPLES)
    g = results_from_doc(run_doc(case_doc(generation=generation())), "r").cases[0].generation
    assert isinstance(g.tpot, GenerationStats) and g.tpot.n == 24 and g.stat("ttft").p50_ms == pytest.approx(0.4055)
    assert isinstance(g.conformance, TokenAgreement) and g.conformance.first_divergence_per_sequence == [None, None]
    assert g.stat("e2e").figure("p99_ms") == summary_ms(E2E, (50, 90, 99))["p99_ms"]
    assert GenerationRecord().stat("tpot") == GenerationStats()  # not measured: an empty summary, no error
    loc = results_from_doc(run_doc(case_doc(localization=LOCALIZATION)), "r").cases[0].localization
    assert all(isinstance(f, LocalizationFinding) for f in loc.first_bad) and loc.first_bad[1].rel_l2 == "nan"
    assert loc.checked == 12 and loc.error is None and loc.truncated.startswith("time budget")


def test_a_record_writes_its_fields_in_declared_order_and_those_declared_when_set_only_where_set():
    case = CaseResult(CaseId("m", "ort-cpu", "fp32", 1, None, "cpu"), "passed",
                      memory=MemoryRecord(gpu_source=None, covers="x", host_rss_peak_mb=1.0))
    assert case.as_dict()["memory"] == {"covers": "x", "host_rss_peak_mb": 1.0}  # a CPU case: no GPU keys
    assert list(case.as_dict()["memory"]) == ["covers", "host_rss_peak_mb"]  # declared order
    case.memory.gpu_problem = "NVML not available"  # the GPU was sampled: its keys are written, None as null
    assert case.as_dict()["memory"] == {"covers": "x", "host_rss_peak_mb": 1.0, "gpu_process_peak_mb": None,
                                        "gpu_device_used_peak_mb": None, "gpu_device_used_before_mb": None,
                                        "gpu_problem": "NVML not available", "gpu_source": None}
    assert list(case.as_dict()["memory"])[2] == "gpu_process_peak_mb"  # declared order
    # the other fields are written always, None as null (an unbounded interval, a step not measured)
    case.end_to_end = EndToEndRecord(steps="pre -> model")
    e2e = case.as_dict()["end_to_end"]
    assert list(e2e)[:4] == ["steps", "samples_ns", "warmup_iters", "latency"] and e2e["pre_p50_ci_high_ms"] is None
    positional = LocalizationRecord("request", None, 3).as_dict()  # no skipped, truncated or error: not written
    assert positional == {"trigger": "request", "tolerance": None, "checked": 3, "first_bad": []}
    # what the producers build passes the worker's dict transport as is
    assert CaseResult.from_dict(json.loads(json.dumps(case.as_dict()))).as_dict() == case.as_dict()


def test_a_key_the_record_does_not_declare_is_kept_and_written_after_its_fields():
    """One stored between two declared keys (a newer harness's) is kept; written again, it comes after them."""
    keys = [k for k in MEMORY if k != "a_newer_key"]
    stored = {k: MEMORY[k] for k in keys[:3]} | {"a_newer_key": [1]} | {k: MEMORY[k] for k in keys[3:]}
    record = MemoryRecord.from_dict(stored)
    assert record.as_dict() == stored and list(record.as_dict()) == keys + ["a_newer_key"]


@pytest.mark.parametrize("name, value, where", [
    ("memory", {**MEMORY, "host_rss_peak_mb": "612"}, "memory.host_rss_peak_mb"),
    ("memory", {**MEMORY, "gpu_source": 3}, "memory.gpu_source"),
    ("end_to_end", {**END_TO_END, "throughput_sps": float("inf")}, "end_to_end.throughput_sps"),
    ("generation", {**generation(), "tokens_per_s": -1.0}, "generation.tokens_per_s"),
    ("generation", {**generation(), "tpot": {"p50_ms": "fast"}}, "generation.tpot.p50_ms"),
    ("generation", {**generation(), "conformance": {"exact_match_rate": 1.5}},
     "generation.conformance.exact_match_rate"),
    ("localization", {**LOCALIZATION, "checked": 12.5}, "localization.checked"),
    ("localization", {**LOCALIZATION, "first_bad": [{"node": "n", "rel_l2": "big"}]}, "localization.first_bad.0.rel_l2")])
def test_the_strict_reader_names_a_bad_figure(name, value, where):
    at = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in where.split("."))
    with pytest.raises(ResultsError, match="results.json: cases" + re.escape(f"[0]{at}: ")):
        results_from_doc(run_doc(case_doc(**{name: value})), "results.json")


def test_stored_runs_and_old_schema_versions_keep_their_parts_key_for_key():
    """The stored sample run (memory and end-to-end in every case) and a schema-1 file: each part read back is
    the stored dict, keys in their order (the byte comparison of whole files is in the branch's note)."""
    v1 = Path(__file__).parent / "v1_files" / "base.json"
    for path in (SAMPLE_RUN, v1):
        stored = json.loads(path.read_text())["cases"]
        cases = load_results(path).cases
        assert len(cases) == len(stored)
        for doc, case in zip(stored, cases):
            for k in ("memory", "end_to_end", "generation", "localization"):
                part = getattr(case, k)
                assert (None if part is None else part.as_dict()) == doc.get(k)
                assert list(case.as_dict()[k] or ()) == list(doc.get(k) or ())
    measured = [c for c in load_results(SAMPLE_RUN).cases if c.measured]
    assert measured and all(c.memory is not None for c in measured)
    assert any(c.end_to_end is not None for c in measured)
