"""`harness gate BASELINE --ray`: the gate's cases sharded over the nodes of the baseline's hardware class of a real
local Ray cluster (head + workers on this machine), both sides of a case on one node, rows naming their node, one
gate.md / gate.json / report; a node of another class left out, said; a node killed mid-run costs only its cases,
which are not judged (exit 3, never a pass). The judging of the merged rows is the local gate's (judge_rows)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from harness.execution.gate_ray import GateShard, class_nodes, crowded_nodes, fetch_blob
from harness.execution.gate_run import GateCase, GateOutcome, judge_rows
from harness.execution.ray_shards import Node, merged_run
from harness.gating.verdicts import EXIT_REGRESSION, EXIT_UNJUDGED
from harness.results import load_results
from harness.results.schema import AbResult, CaseId, CaseResult, RunResults
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

TESTS = Path(__file__).resolve().parents[1]
CASES = ["fake-file-fake-graph-fp32-b1", "fake-file2-fake-graph-fp32-b1", "fake-file-fake-ok-fp32-b1",
         "fake-file2-fake-ok-fp32-b1"]


def test_nodes_of_another_hardware_class_are_left_out_with_the_reason():
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 2}), Node("b" * 16, "10.0.0.2", {"CPU": 2}),
             Node("c" * 16, "10.0.0.3", {"CPU": 2})]
    used, left = class_nodes(nodes, {"a" * 16: "k1", "b" * 16: "k2", "c" * 16: ""}, "k1")
    assert [n.address for n in used] == ["10.0.0.1"]
    assert left[0].startswith("10.0.0.2-bbbbbbbb: not used: hardware class k2, not the baseline's k1")
    assert left[1].startswith("10.0.0.3-cccccccc: not used: it did not say its hardware class")
    used, left = class_nodes(nodes, {"a" * 16: "k1", "b" * 16: "k2", "c" * 16: "k1"}, None)  # no class named
    assert len(used) == 3 and not left


def test_a_node_with_no_cpu_beyond_the_cases_threads_is_said_in_the_plan():
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 1.0}), Node("b" * 16, "10.0.0.2", {"CPU": 2.0}),
             Node("c" * 16, "10.0.0.3", {"CPU": 8.0})]
    lines = crowded_nodes(nodes, threads=1)
    assert len(lines) == 1 and lines[0].startswith("10.0.0.1-aaaaaaaa: 1 CPU(s) for 1-thread cases")
    assert [x.split(":")[0] for x in crowded_nodes(nodes, threads=2)] == ["10.0.0.1-aaaaaaaa", "10.0.0.2-bbbbbbbb"]
    assert crowded_nodes(nodes[2:], threads=4) == []


def test_a_cluster_without_a_node_of_the_baselines_class_is_one_line_exit_2_before_anything_runs(monkeypatch,
                                                                                                 tmp_path):
    pytest.importorskip("ray", reason="Ray is the [ray] extra")
    from harness.config import RunConfig
    from harness.errors import UsageError
    from harness.execution import gate_ray

    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 2})]
    monkeypatch.setattr(gate_ray, "connect", lambda address: nodes)
    monkeypatch.setattr(gate_ray, "node_classes", lambda ns: {"a" * 16: "k2"})
    monkeypatch.setattr(gate_ray, "run_shards", lambda *a, **kw: pytest.fail("nothing may run"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = RunConfig.build(workload="gate", ray="auto", out_dir=tmp_path / "g")
    baseline = RunResults(run_id="b", started_at="", environment=RunEnvironmentRecord.from_dict({"machine_fingerprint": "k1"}))
    with pytest.raises(UsageError, match=r"--ray auto: no node of the cluster is of the baseline's hardware class "
                                         r"k1 \(1 node\(s\): 10.0.0.1-aaaaaaaa: not used: hardware class k2"):
        gate_ray.ray_gate(config, [baseline], None, None, [], note=lambda line: None)
    assert not (tmp_path / "g").exists()


def test_a_blob_that_does_not_hash_to_its_digest_is_never_replayed(tmp_path, monkeypatch):
    import hashlib
    import types

    data = b"cost_us=300\n"
    sha = hashlib.sha256(data).hexdigest()
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get=lambda ref: ref))  # the ref is the bytes
    assert fetch_blob(sha, data, tmp_path) == tmp_path / f"{sha}.onnx" and (tmp_path / f"{sha}.onnx").read_bytes() \
        == data
    assert "no longer matches its digest" in str(fetch_blob("0" * 64, data, tmp_path))
    assert "was not sent" in str(fetch_blob("1" * 64, None, tmp_path))


def _row(case_id: str, verdict: str, status: str = "passed") -> CaseResult:
    model, rest = case_id.split("-fake-", 1)
    case = CaseId(model, "fake-" + rest.rsplit("-fp32", 1)[0], "fp32", 1, None, "cpu")
    ab = AbResult(a="a", b="b", b_case=case, order="ab", blocks=[], block_time_s=0.01, inject=0.0, verdict=verdict,
                  reason="why", ratio=1.3, ci_low=1.2, ci_high=1.4, confidence=0.95, min_effect=0.05, pairs_used=8)
    return CaseResult(case, status, ab=ab, latency=fake_latency(0.3),
                      details={"gate": {"mode": "re-measured", "side_a": {"latency": {"p50_ms": 0.23}},
                                        "notes": ["a note"]}})


def test_the_merged_rows_of_two_nodes_are_judged_as_the_local_rows_and_a_lost_row_is_not_judged():
    """judge_rows on the rows split over two nodes and merged (as `gate --ray` merges them) gives the records of
    the same rows judged in one run, each naming its node; a row its lost node never finished is unjudged."""
    from harness.config import RunConfig

    rows = [_row(CASES[0], "regressed", "failed"), _row(CASES[1], "pass")]
    plans = [GateCase(r.case) for r in rows]
    local = GateOutcome()
    judge_rows(local, plans, RunResults(run_id="g", started_at="", cases=rows), [], None)
    config = RunConfig.build(workload="gate", run_id="g")
    runs = [RunResults(run_id=f"g-{n}", started_at="", cases=[r], environment=RunEnvironmentRecord.from_dict({"ray_node": n}))
            for n, r in zip(("n1", "n2"), rows)]
    remote = GateOutcome()
    judge_rows(remote, plans, merged_run(config, runs), [], None)
    assert [r.as_dict() for r in remote.records] == [r.as_dict() for r in local.records]
    assert remote.nodes == {CASES[0]: "n1", CASES[1]: "n2"} and not local.nodes
    assert remote.exit_code(False) == local.exit_code(False) == EXIT_REGRESSION
    assert "[node n1]" in "\n".join(remote.lines(False)) and "| node |" in remote.markdown(False)
    assert "[node" not in "\n".join(local.lines(False)) and "| node |" not in local.markdown(False)
    lost = CaseResult(rows[1].case, "crashed", phase="shard", reason="ray node n2 lost before this case finished: x")
    gone = GateOutcome()
    judge_rows(gone, plans[1:], RunResults(run_id="g", started_at="", cases=[lost]), [], None)
    (record,) = gone.records
    assert record.verdict.value == "inconclusive" and record.unjudged == "node lost"
    assert gone.exit_code(False) == EXIT_UNJUDGED and "node lost: " + CASES[1] in gone.unjudged_line(False)


def test_the_shard_work_is_picklable_without_ray_objects(tmp_path):
    """GateShard travels to the node with the task (cloudpickle there; plain pickle must do for its fields)."""
    import pickle

    work = GateShard({CASES[0]: GateCase(CaseId("m", "r", "fp32", 1, None, "cpu"))}, None,
                     RunResults(run_id="b", started_at=""), {})
    again = pickle.loads(pickle.dumps(work))
    assert list(again.plans) == [CASES[0]]


# ---------------------------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def cluster(fakes, tmp_path_factory):
    if not os.environ.get("HARNESS_REQUIRE_RAY"):
        pytest.importorskip("ray", reason="Ray is the [ray] extra")
    from ray.cluster_utils import Cluster

    home = tmp_path_factory.mktemp("gate-ray")
    for name, cost in (("model", 300), ("model2", 300)):
        (home / f"{name}.onnx").write_text(f"cost_us={cost}\n")
    (home / "gate_ray_models.py").write_text(
        "import dataclasses\nfrom pathlib import Path\nimport fakes\nfrom harness.model import register_model\n"
        "for name, file in (('fake-file', 'model.onnx'), ('fake-file2', 'model2.onnx')):\n"
        "    register_model(dataclasses.replace(fakes.FAKE_MODEL, name=name, build=None, "
        f"onnx_path=Path({str(home)!r}) / file), replace=True)\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_PLUGINS", "fakes,gate_ray_models")  # the raylets and their workers inherit these
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(home), *sys.path]))
    mp.setenv("HARNESS_CACHE_DIR", str(home / "cache"))
    mp.setenv("HARNESS_BASELINE_DIR", str(home / "baselines"))
    mp.setenv("HARNESS_CONTENTION_LIMIT", "1")
    mp.syspath_prepend(str(home))
    from harness import plugins

    plugins.load_plugins()
    import gate_ray_models  # noqa: F401 - this process registers the two file models too

    from ray_head import RAY_HEAD

    c = Cluster(initialize_head=True, head_node_args=RAY_HEAD)  # a killed node seen dead in ~1.5 s
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    c.home = home
    from harness.cli import main

    assert main(["run", "--models", "fake-file,fake-file2", "--runtimes", "fake-graph,fake-ok", "--batch-sizes", "1",
                 "--threads", "1", "--min-time", "0.05", "--repeats", "1", "--out", str(home / "r")]) == 0
    assert main(["baseline", "save", str(home / "r"), "--name", "main"]) == 0
    yield c
    import ray

    ray.shutdown()
    c.shutdown()
    mp.undo()


GATE = ["gate", "main", "--ab-pairs", "8", "--ab-block-time", "0.01"]


@pytest.mark.slow  # the e2e tier: a cluster of three nodes, the gate run locally and on it (about 75 s here)
def test_the_gate_sharded_over_one_class_merged_as_the_local_gate(cluster, tmp_path, capsys, monkeypatch):
    """A planted 30% slowdown: the local gate and the gate on the cluster both exit 1 with the A/B rows regressed,
    the same rows, metrics and files (the stored-figure rows' verdicts are not compared: they are what a loaded
    machine measured twice; test_the_merged_rows_... holds that the judging is the same); on the cluster every case ran once, both sides on one node, each row naming
    it; a node of another hardware class (its class rewritten here: every node of this machine is of one) is
    left out, said, and runs nothing."""
    from harness.cli import main
    from harness.execution import gate_ray

    other = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    real = gate_ray.node_classes
    monkeypatch.setattr(gate_ray, "node_classes", lambda nodes: {
        **real(nodes), other.node_id: "another-class"})
    local = main([*GATE, "--inject", "30", "--out", str(tmp_path / "local")])
    local_text = capsys.readouterr().out
    code = main([*GATE, "--inject", "30", "--ray", cluster.address, "--out", str(tmp_path / "ray")])
    captured = capsys.readouterr()
    text = captured.out
    cluster.remove_node(other)
    assert local == code == EXIT_REGRESSION, local_text + text + captured.err
    assert f"{other.node_id[:8]}: not used: hardware class another-class, not the baseline's" in text
    assert "both sides of each case on one node" in text
    out = tmp_path / "ray"
    docs = {k: json.loads((tmp_path / k / "gate.json").read_text()) for k in ("local", "ray")}
    for doc in docs.values():
        rows = {(r["case_id"], r["metric"]): r["verdict"] for r in doc["records"]}
        assert {k[0] for k in rows} == set(CASES)
        assert rows[(CASES[0], "latency_median")] == rows[(CASES[1], "latency_median")] == "regressed"
        assert set(doc["fallbacks"]) == set(CASES[2:])
    keys = [sorted((r["metric"], r["case_id"]) for r in d["records"]) for d in docs.values()]
    assert keys[0] == keys[1]
    assert docs["local"]["exit_code"] == docs["ray"]["exit_code"] == EXIT_REGRESSION
    assert set(docs["ray"]["nodes"]) == set(CASES) and "nodes" not in docs["local"]
    merged = load_results(out / "results.json")
    assert sorted(c.case.id for c in merged.cases) == sorted(CASES)  # every case once
    folders = {p.parent.name for p in out.glob("*/results.json")}
    assert len(folders) == 2 and not any(other.node_id[:8] in f for f in folders)
    assert {c.details["ray_node"] for c in merged.cases} == folders
    for c in merged.cases:
        if c.ab is not None:  # both sides measured on the node that holds the row
            node_run = load_results(out / c.details["ray_node"] / "results.json")
            assert c.case.id in {x.case.id for x in node_run.cases}
            assert {b.side for b in c.ab.blocks} == {"a", "b"}
    for f in ("gate.md", "gate.json", "report.html", "results.json"):
        assert (tmp_path / "local" / f).is_file() and (out / f).is_file(), f
    md = (out / "gate.md").read_text()
    assert md.startswith("**gate FAIL: ") and "| node |" in md  # the stored-figure rows' verdicts: the load's
    assert all(f"[node {docs['ray']['nodes'][c]}]" in text for c in CASES)


@pytest.mark.slow  # the e2e tier: a third node started and killed mid-run (about 30 s here)
def test_a_node_killed_mid_run_costs_only_its_cases_unjudged_exit_3(cluster, tmp_path, capsys, monkeypatch):
    from harness.cli import main
    from harness.execution import gate_ray

    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.wait_for_nodes()
    killed = threading.Event()

    def note(line: str) -> None:  # the doomed node dies as soon as its first row has come back
        print(line)
        if line.startswith("[") and "fake-graph" in line and doomed.node_id[:8] in line.split("]")[0] \
                and not killed.is_set():
            killed.set()
            cluster.remove_node(doomed, allow_graceful=False)

    real = gate_ray.ray_gate
    monkeypatch.setattr(gate_ray, "ray_gate", lambda *a, **kw: real(*a, **{**kw, "note": note}))
    out = tmp_path / "g"
    code = main(["gate", "main", "--ab-pairs", "20", "--ab-block-time", "0.02", "--ray", cluster.address,
                 "--placement", "fake-graph=doomed", "--out", str(out)])
    text = capsys.readouterr().out
    assert killed.is_set(), text
    doc = json.loads((out / "gate.json").read_text())
    records = {r["case_id"]: r for r in doc["records"]}
    lost = [c for c, r in records.items() if r.get("unjudged") == "node lost"]
    # the kill is asynchronous: the doomed node's second case may still have finished; its first never is lost
    assert lost and set(lost) <= set(CASES[:2]), text
    for c in lost:
        assert records[c]["verdict"] == "inconclusive" and "its Ray node was lost" in records[c]["reason"]
    assert all(records[c].get("unjudged") != "node lost" for c in CASES[2:])  # the other node's cases: judged
    failing = any(r["verdict"] in ("regressed", "broke") for r in doc["records"])
    assert code == (EXIT_REGRESSION if failing else EXIT_UNJUDGED) and doc["exit_code"] == code
    assert "node lost: " in doc["unjudged_line"] and (out / "report.html").is_file()
    merged = load_results(out / "results.json")
    assert sorted(c.case.id for c in merged.cases) == sorted(CASES) and not merged.complete
    assert "shard lost" in text


def test_gate_ray_where_nothing_listens_is_one_line_exit_2(tmp_path, capsys, fakes, closed_port):
    from harness.cli import main

    port = closed_port  # nothing listens there
    baseline = tmp_path / "b.json"
    baseline.write_text("{}")
    code = main(["gate", str(baseline), "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err  # probed before the baseline is read: nothing is created
    assert code == 2 and err == (f"harness gate: error: --ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} "
                                 f"(Connection refused); start the cluster (`ray start --head --port {port}`) or "
                                 "give its address\n")
    assert not (tmp_path / "g").exists()



# ------------------------------------------------- run --baseline --ray and gate-check --nightly --ray (#55)
@pytest.mark.slow  # the e2e tier: the local gate and run --baseline on the cluster (about 40 s here)
def test_run_baseline_on_the_cluster_goes_through_the_gate(cluster, tmp_path, capsys):
    """`harness run --baseline main --ray`: fake-file's graph made 40% heavier tonight. The case the baseline can
    replay is measured A/B against its stored graph on one node, regressed as the local `harness gate` calls it
    (exit 1 for both); the baseline's other case is judged on the stored figures (its model changed: not judged),
    the matrix's cases the baseline lacks are `new`; every case once in results.json, each row naming its node;
    one gate.md / gate.json / report."""
    from harness.cli import main

    model = cluster.home / "model.onnx"
    model.write_text("cost_us=420\n")
    try:
        local = main(["gate", "main", "--models", "fake-file", "--runtimes", "fake-graph", "--out",
                      str(tmp_path / "local")])
        out = tmp_path / "run"
        code = main(["run", "--models", "fake-file", "--runtimes", "fake-graph,fake-ok", "--batch-sizes", "1,2",
                     "--min-time", "0.05", "--baseline", "main", "--ray", cluster.address, "--out", str(out)])
    finally:
        model.write_text("cost_us=300\n")
    text = capsys.readouterr().out
    assert local == code == EXIT_REGRESSION, text
    ab_case = "fake-file-fake-graph-fp32-b1"
    docs = {k: json.loads((tmp_path / k / "gate.json").read_text()) for k in ("local", "run")}
    verdicts = {k: {(r["case_id"], r["metric"]): r for r in d["records"]} for k, d in docs.items()}
    assert verdicts["local"][(ab_case, "latency_median")]["verdict"] == "regressed"
    assert verdicts["run"][(ab_case, "latency_median")]["verdict"] == "regressed"
    assert "re-measured A/B tonight" in verdicts["run"][(ab_case, "latency_median")]["reason"]
    new = {c for (c, _m), r in verdicts["run"].items() if r["verdict"] == "new"}
    assert new == {"fake-file-fake-graph-fp32-b2", "fake-file-fake-ok-fp32-b2"}
    assert set(docs["run"]["fallbacks"]) == {"fake-file-fake-ok-fp32-b1", *new}
    merged = load_results(out / "results.json")
    ids = sorted(c.case.id for c in merged.cases)
    assert ids == sorted({ab_case, "fake-file-fake-ok-fp32-b1", *new})  # every case of the matrix, once
    assert set(docs["run"]["nodes"]) == set(ids) and all(c.details["ray_node"] for c in merged.cases)
    ab_row = next(c for c in merged.cases if c.case.id == ab_case)
    assert {b.side for b in ab_row.ab.blocks} == {"a", "b"}  # both sides on the node that holds the row
    for f in ("gate.md", "gate.json", "report.html", "results.json"):
        assert (out / f).is_file(), f
    assert (out / "gate.md").read_text().startswith("**gate FAIL: ")
    assert "1 re-measured A/B against the baseline on their node, 3 measured as `harness run` measures them" in text


@pytest.mark.slow  # the e2e tier: gate-check --nightly locally and over two nodes (about 60 s here)
def test_gate_check_nightly_over_the_cluster_tallied_as_the_local_one(cluster, tmp_path, capsys):
    """The same gate-check, locally and with --ray: the same rows (case, how, trial, number of trials) in
    gatecheck-nightly.json and exit 0; a planted 30% slowdown is never passed; on the cluster each round ran on one
    node (the plan says which) and each trial's rows are in OUT/runs/NODE/rR-LEVEL/results.json."""
    from harness.cli import main

    args = ["gate-check", "--nightly", "main", "--models", "fake-file", "--runtimes", "fake-graph", "--rounds", "2",
            "--levels", "30", "--ab-pairs", "8", "--ab-block-time", "0.01"]
    local = main([*args, "--out", str(tmp_path / "local")])
    code = main([*args, "--ray", cluster.address, "--out", str(tmp_path / "ray")])
    text = capsys.readouterr().out
    assert local == code == 0, text
    docs = {k: json.loads((tmp_path / k / "gatecheck-nightly.json").read_text()) for k in ("local", "ray")}
    shape = [[(r["case"], r["how"], r["trial"], r["trials"]) for r in d["rows"]] for d in docs.values()]
    assert shape[0] == shape[1] and sorted(shape[0]) == [
        ("fake-file-fake-graph-fp32-b1", "re-measured A/B", "A/A", 2),
        ("fake-file-fake-graph-fp32-b1", "re-measured A/B", "slowed 30%", 2)]
    for d in docs.values():
        slowed = next(r for r in d["rows"] if r["trial"] == "slowed 30%")
        assert slowed["pass"] == 0 and slowed["regressed"] + slowed["unjudged"] == 2
    assert docs["ray"]["lost"] == [] and "round(s) 1" in docs["ray"]["ray"][0] and "round(s) 2" in docs["ray"]["ray"][0]
    trials = sorted(p.parent.name for p in (tmp_path / "ray" / "runs").glob("*/r*/results.json"))
    assert trials == ["r0-30", "r0-aa", "r1-30", "r1-aa"]
    for p in (tmp_path / "ray" / "runs").glob("*/r*/results.json"):
        assert [c.case.id for c in load_results(p).cases] == ["fake-file-fake-graph-fp32-b1"]


@pytest.mark.slow  # the e2e tier: a third node killed in its round (about 40 s here)
def test_gate_check_nightly_a_node_killed_costs_its_trials_unjudged_exit_3(cluster, tmp_path, capsys, monkeypatch):
    from harness.cli import main
    from harness.execution import gatecheck_ray

    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    killed = threading.Event()

    def note(line: str) -> None:  # the doomed node dies as soon as its first row (its round's A/A) has come back
        print(line)
        if line.startswith("[") and doomed.node_id[:8] in line.split("]")[0] and not killed.is_set():
            killed.set()
            cluster.remove_node(doomed, allow_graceful=False)

    real = gatecheck_ray.ray_gate_check
    monkeypatch.setattr(gatecheck_ray, "ray_gate_check", lambda *a, **kw: real(*a, **{**kw, "note": note}))
    out = tmp_path / "gc"
    code = main(["gate-check", "--nightly", "main", "--models", "fake-file", "--runtimes", "fake-graph", "--rounds",
                 "3", "--levels", "30", "--ab-pairs", "8", "--ab-block-time", "0.01", "--ray", cluster.address,
                 "--out", str(out)])
    text = capsys.readouterr().out
    assert killed.is_set(), text
    assert code == EXIT_UNJUDGED, text
    doc = json.loads((out / "gatecheck-nightly.json").read_text())
    assert doc["lost"] and all(doomed.node_id[:8] in line for line in doc["lost"])
    rows = {r["trial"]: r for r in doc["rows"]}
    assert rows["A/A"]["trials"] == rows["slowed 30%"]["trials"] == 3  # every trial tallied, the lost ones too
    assert rows["slowed 30%"]["unjudged"] >= 1 and rows["slowed 30%"]["pass"] == 0
    assert "Not judged: " in (out / "gatecheck-nightly.md").read_text()
