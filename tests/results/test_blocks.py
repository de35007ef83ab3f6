"""Measurement blocks as typed records: version-1 files migrate and are judged the same; the reader checks them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.errors import ResultsError
from harness.gating import GateConfig, compare_runs, parse_gate
from harness.gating.compare import case_blocks, comparison_json
from harness.results import load_results, write_results
from harness.results.schema import SCHEMA_VERSION, Block, migrate, results_from_doc

V1 = Path(__file__).parent / "v1_files"


def _v1(name: str) -> dict:
    return json.loads((V1 / f"{name}.json").read_text())


def test_a_version_1_file_loads_into_typed_blocks():
    run = load_results(V1 / "cur.json")
    assert run.schema_version == SCHEMA_VERSION
    a, b, c = run.cases
    old = _v1("cur")["cases"][0]["details"]
    assert [x.samples for x in a.blocks] == [120] * 5 + [0]
    assert [x.p50_ms for x in a.blocks[:5]] == old["block_p50_ms"]
    assert [x.kind for x in a.blocks] == ["case", "round", "round", "confirm", "confirm", "round"]
    assert sum(x.reactivated for x in a.blocks) == old["block_reactivated"] == 4 and not a.blocks[0].reactivated
    assert a.blocks[-1] == Block(0, None, "round", error="crashed: worker killed by SIGSEGV in phase run")
    assert a.confirm_blocks == 2 and a.blocks_pending == 0
    assert not set(a.details) & {"blocks", "block_p50_ms", "block_reactivated", "block_errors", "confirm_blocks"}
    assert a.details == {"activation_reused": False}  # other details stay
    assert b.blocks == [] and c.blocks == []  # one block (no --repeats); an error case


def test_a_version_1_file_is_judged_the_same():
    """The verdicts the version-1 harness gave on these files (verdicts.json), given again after migration."""
    base, cur = load_results(V1 / "base.json"), load_results(V1 / "cur.json")
    gates = GateConfig(gates=(parse_gate("median:10%"), parse_gate("p99:20%")))
    assert [b.size for b in case_blocks(cur.cases[0])] == [120] * 5
    got = json.loads(comparison_json(compare_runs(base, cur, gates)))
    want = json.loads((V1 / "verdicts.json").read_text())
    # fields added since (a row's `timing` and `unjudged` cause, the unjudged count and line): the same verdicts,
    # compared on what the version-1 harness wrote; the additions say every row was judged
    assert got["unjudged"] == 0 and got["unjudged_line"] is None and all(r["unjudged"] == "" for r in got["records"])
    got = {k: v for k, v in got.items() if k in want}
    got["records"] = [{k: v for k, v in r.items() if k in want["records"][0]} for r in got["records"]]
    assert got == want


def test_a_migrated_file_written_again_is_version_2_and_reads_back(tmp_path):
    run = load_results(V1 / "cur.json")
    back = load_results(write_results(run, tmp_path))
    assert back.cases[0].blocks == run.cases[0].blocks
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["cases"][0]["blocks"][0] == {
        "samples": 120, "p50_ms": run.cases[0].blocks[0].p50_ms, "kind": "case", "reactivated": False,
        "error": None, "contention": None,
        "p50_ci_low_ms": None, "p50_ci_high_ms": None}  # a version-1 block had no interval: none is made up


def test_version_1_blocks_that_do_not_add_up_migrate_to_none():
    """Version 1 read such a case as one block; so does version 2, with no blocks."""
    doc = _v1("cur")
    doc["cases"][0]["details"]["blocks"] = [120, 120, 120, 120, 119]
    assert results_from_doc(doc).cases[0].blocks == []


def test_version_1_pending_blocks_migrate():
    doc = _v1("base")
    d = doc["cases"][0]["details"]
    d.update(blocks=d["blocks"][:1], block_p50_ms=d["block_p50_ms"][:1], blocks_pending=2)
    doc["cases"][0]["samples_ns"] = doc["cases"][0]["samples_ns"][:120]
    migrated = migrate(copy.deepcopy(doc))
    assert migrated["cases"][0]["blocks_pending"] == 2 and len(migrated["cases"][0]["blocks"]) == 1


def _v2_doc() -> dict:
    return json.loads(load_results(V1 / "cur.json").to_json())


@pytest.mark.parametrize("change, message", [
    (lambda c: c["blocks"][1].update(samples=119), "blocks: the blocks hold 599 samples but samples_ns holds 600"),
    (lambda c: c["blocks"][1].update(p50_ms=0.02), "cases[0].blocks[1].p50_ms: 0.02 ms but its samples give 0.0304"),
    (lambda c: c["blocks"][1].update(p50_ms=None), "cases[0].blocks[1].p50_ms: none but its samples give"),
    (lambda c: c["blocks"][5].update(error=None), "cases[0].blocks[5]: a block with no samples must say why"),
    (lambda c: c["blocks"][0].update(error="x"), "cases[0].blocks[0].error: a block with samples did not fail"),
    (lambda c: c["blocks"][0].update(kind="first"), "blocks[0].kind: input should be 'case', 'round' or 'confirm'"),
    (lambda c: c["blocks"][0].update(samples=-1), "cases[0].blocks[0].samples: input should be greater than"),
    (lambda c: c.update(blocks_pending=-1), "cases[0].blocks_pending: input should be greater than"),
])
def test_the_reader_checks_blocks_against_the_samples(change, message):
    doc = _v2_doc()
    change(doc["cases"][0])
    with pytest.raises(ResultsError) as info:
        results_from_doc(doc, "results.json")
    assert message in str(info.value)
