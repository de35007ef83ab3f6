"""The newer stored records (profile, A/B, contention, a runtime's own environment) are read through declared
schemas (harness.results.stored): `harness report` and `harness compare` refuse a tampered value with one line
naming the file and the field, or show it, and never end in a traceback. The records are made by the harness's
own builders; the tampering is generated over every leaf of each record, not listed by hand."""

from __future__ import annotations

import copy
import json
from typing import Any, ClassVar

import numpy as np
import pytest
from gating.gating_synth import make_run

from harness.cli import main
from harness.results.schema import AbBlock, AbResult, CaseId, load_results
from harness.results.stored import CostRecord, EnvironmentRecord, ProfileRecord, RooflineRecord

TAMPER = [1e308, -1.0, "12", None, [], {}, True, 0, -1e-300, "x" * 10]


def _profile(p50_ms: float) -> ProfileRecord:
    from dataclasses import replace

    from harness.profile.layers import OpProfile, OpTime, profile_record
    from harness.profile.roofline import roofline_point

    class Node:
        def __init__(self, name, flops, bytes_moved, op_type="Gemm"):
            self.name, self.flops, self.bytes_moved, self.op_type = name, flops, bytes_moved, op_type

    class Cost:
        nodes: ClassVar[list[Node]] = [Node("fc1", 262656, 529408), Node("relu", 512, 4096, "Relu"), Node("fc2", 5130, 21000)]
        flops, bytes_moved = sum(n.flops for n in nodes), sum(n.bytes_moved for n in nodes)

    ops = (OpTime("fused fc1", "FusedGemm", 7.0, ("fc1", "relu"), "FusedGemm"), OpTime("fc2", "Gemm", 2.0, ("fc2",), ""),
           OpTime("reorder", "ReorderInput", 0.5, (), ""))
    point = roofline_point(Cost.flops, Cost.bytes_moved, p50_ms / 1e3, 47.2, 20.5)
    record = profile_record(OpProfile(ops, 200, 12.0, "fake profiler", None, ("a note",)), Cost(), p50_ms,
                            RooflineRecord(**point.to_dict(), precision="fp32", threads=1, peak_method="m",
                                           bandwidth_method="b", ceilings_warning=None))
    return replace(record, cost=CostRecord(dims={"batch": 1}, nodes=3, flops=Cost.flops, bytes_moved=Cost.bytes_moved,
                                           graph="model.onnx"), adjacent_p50_ms=p50_ms, adjacent_gap_percent=1.0)


def _ab(case: CaseId) -> AbResult:
    from dataclasses import replace

    from harness.gating.ab import judge_ab
    from harness.measure.contention import Snapshot, figures

    rng = np.random.default_rng(0)
    blocks = []
    for pair in range(10):
        for side, scale in (("a", 1.0), ("b", 1.10)):
            ns = [int(v) for v in 1e6 * scale * rng.lognormal(0, 0.01, 20)]
            before = Snapshot(0, 0, 0, 0, 0.0, 0, 0, 0.0)
            after = Snapshot(10**8, 2 * 10**8, 10**6, 50, 0.1, 3, 1000, 0.12)
            block = replace(figures(before, after, 2), contended=False)
            blocks.append(AbBlock(side, pair, ns, contention=block))
    v = judge_ab(blocks)
    return AbResult(a="base", b="opt=basic", b_case=replace(case, variant="opt=basic"), order=["ab"] * 10,
                    blocks=blocks, block_time_s=0.05, verdict=v.verdict.value, reason=v.reason,
                    ratio=v.ratio.ratio, ci_low=v.ratio.low, ci_high=v.ratio.high, confidence=0.99,
                    min_effect=0.02, pairs_used=v.pairs_used)


def good_doc() -> dict[str, Any]:
    from harness.measure.contention import case_contention

    run = make_run(1, cases=[CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu"),
                             CaseId("mlp", "torch-cpu", "fp32", 1, None, "cpu")])
    c = run.cases[0]
    c.profile = _profile(c.latency.p50_ms)
    c.ab = _ab(c.case)
    c.contention = case_contention([b.contention for b in c.ab.blocks])
    c.environment = EnvironmentRecord.from_dict({"key": "abcd1234", "requirements": ["onnxruntime==1.24.4"], "python": "3.11",
                     "packages": {"onnxruntime": "1.24.4", "numpy": "2.4.6"}})
    assert c.ab.verdict == "regressed"
    return json.loads(run.to_json())


def _leaves(v: Any, path: tuple = ()) -> list[tuple]:
    """Every scalar leaf of a record, as a path (lists: their first item only)."""
    if isinstance(v, dict):
        return [p for k, x in v.items() for p in _leaves(x, (*path, k))]
    if isinstance(v, list):
        return _leaves(v[0], (*path, 0)) if v and isinstance(v[0], (dict, list)) else [path]
    return [path]


def _set(doc: dict[str, Any], path: tuple, value: Any) -> None:
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


RECORDS = {"profile": ("cases", 0, "profile"), "ab": ("cases", 0, "ab"), "contention": ("cases", 0, "contention"),
           "environment": ("cases", 0, "environment")}


def _tampered() -> list[tuple[str, tuple, Any]]:
    doc = good_doc()
    out = []
    for name, at in RECORDS.items():
        record = doc
        for k in at:
            record = record[k]
        leaves = _leaves(record)
        if name == "ab":  # its blocks: the first block's fields
            leaves = [p for p in leaves if p[:1] != ("b_vs_a",)]
        for leaf in leaves:
            for value in TAMPER:
                out.append((name, (*at, *leaf), value))
    return out


TAMPERED = _tampered()


def _where(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def test_the_records_as_written_read_back_and_render(tmp_path, capsys):
    doc = good_doc()
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    run = load_results(p)
    assert run.cases[0].profile.nodes[0].node == "fc1" and run.cases[0].ab.verdict == "regressed"
    assert main(["report", str(p), "-o", str(tmp_path / "r")]) == 0
    assert main(["compare", str(p), str(p)]) in (0, 3)


def test_every_tampered_leaf_is_refused_naming_the_file_and_field_or_read(tmp_path):
    """Each generated tampering: a ResultsError naming the file and a field on the tampered path (never another
    exception), or a document that reads (its value within the record's declared range)."""
    from harness.errors import ResultsError

    assert len(TAMPERED) > 400
    base = good_doc()
    refused, read = 0, []
    for i, (name, path, value) in enumerate(TAMPERED):
        doc = copy.deepcopy(base)
        _set(doc, path, value)
        p = tmp_path / f"t{i}.json"
        p.write_text(json.dumps(doc))
        try:
            load_results(p)
        except ResultsError as exc:
            text = str(exc)
            assert text.startswith(f"{p}: ") and "\n" not in text, text
            record = _where(RECORDS[name])
            assert record in text, (name, path, value, text)
            refused += 1
        else:
            read.append((name, path, value))
    assert refused > 300
    # what reads is what the schema allows: no text where a number goes, no number beyond MAX_FIGURE, no NaN
    for name, path, value in read:
        assert not (isinstance(value, float) and abs(value) > 1e18), (path, value)


@pytest.mark.parametrize("name, path, value, field", [
    ("a zero peak", ("profile", "roofline", "peak_gflops"), 0.0, "roofline.peak_gflops"),
    ("a zero bandwidth", ("profile", "roofline", "bandwidth_gbs"), 0, "roofline.bandwidth_gbs"),
    ("1e308 FLOPs", ("profile", "cost", "flops"), 1e308, "cost.flops"),
    ("a string for a time", ("profile", "nodes", 0, "time_ms"), "12", "nodes[0].time_ms"),
    ("a negative time", ("profile", "total_ms"), -3.0, "profile"),
    ("a list for a text", ("profile", "method"), ["x"], "profile.method"),
    ("an impossible interval", ("ab", "ci_low"), 9.0, "cases[0].ab"),
    ("a ratio outside its interval", ("ab", "ratio"), 0.5, "cases[0].ab"),
    ("a verdict its interval contradicts", ("ab", "verdict"), "improved", "cases[0].ab"),
    ("an unknown verdict", ("ab", "verdict"), "great", "cases[0].ab"),
    ("more contended blocks than blocks", ("contention", "contended_blocks"), 99, "cases[0].contention"),
    ("contended with no contended block", ("contention", "contended"), True, "cases[0].contention"),
    ("a wait fraction over 1", ("ab", "blocks", 0, "contention", "wait_fraction"), 3.0, "wait_fraction"),
    ("a number for a package version", ("environment", "packages", "numpy"), 2, "environment.packages.numpy"),
])
def test_the_reported_classes_are_refused_by_report_and_compare(name, path, value, field, tmp_path, capsys):
    doc = good_doc()
    _set(doc["cases"][0], path, value)
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    for argv in (["report", str(p), "-o", str(tmp_path / "r")], ["compare", str(p), str(p)]):
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{p}: " in err and field in err and "Traceback" not in err, (name, err)


EDGES = (0, 1e-300, 1e18, 1e-9)


@pytest.mark.parametrize("record", ["profile", "ab", "contention"])
def test_edge_values_a_record_may_hold_render(record, tmp_path, capsys):
    """Each figure of a record at an edge its schema allows (0, tiny, MAX_FIGURE; a different edge per leaf, in
    turn) reads and renders, or is refused on read: `harness report` exits 0, never a traceback."""
    from harness.errors import ResultsError

    base = good_doc()
    leaves = sorted({p for n, p, v in TAMPERED if n == record}, key=str)
    rendered = 0
    for i, leaf in enumerate(leaves):
        if record == "ab" and "blocks" in leaf and "contention" not in leaf:
            continue
        doc = copy.deepcopy(base)
        _set(doc, leaf, EDGES[i % len(EDGES)])
        p = tmp_path / f"e{i}" / "results.json"
        p.parent.mkdir()
        p.write_text(json.dumps(doc))
        try:
            load_results(p)
        except ResultsError:
            continue
        assert main(["report", str(p), "-o", str(p.parent / "r")]) == 0, (leaf, capsys.readouterr().err)
        rendered += 1
    assert rendered >= 2


@pytest.mark.parametrize("key, value", [("libraries", "torch 2.13"), ("gpu", "none"), ("git", 3), ("threads", []),
                                        ("machine", 7), ("cpu_cores_logical", "2"), ("cpu_busy_others_percent", -5),
                                        ("harness_overhead", "fast"), ("libraries", {"torch": 2.13})])
def test_a_run_environment_of_the_wrong_types_is_refused_naming_the_key(key, value, tmp_path, capsys):
    doc = good_doc()
    doc["environment"][key] = value
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    for argv in (["report", str(p), "-o", str(tmp_path / "r")], ["compare", str(p), str(p)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"environment.{key}" in err, err
