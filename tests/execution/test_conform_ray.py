"""`harness conform --ray`: the conformance cases sharded over the nodes of a real local Ray cluster (head + workers on
this machine) with a fake conformance runtime, merged into the one run folder the local command writes (every case
once, each row naming its node, the same rows and exit status); a node killed mid-run costs only its unfinished cases
(crashed, with the reason). The plan and the merge also as unit tests without Ray."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.execution.conform_ray import merge_conform, node_lines, plan_lines
from harness.execution.ray_shards import Node, ShardRun, plan_shards
from harness.gating.conformance import conformance_status
from harness.results import load_results
from harness.results.schema import CaseResult

TESTS = Path(__file__).resolve().parents[1]
OPS = "Abs,Neg,Sigmoid,Tanh"  # failed, crashed (SIGABRT), unsupported, passed on the fake runtime (no hang: fast)
WANT = {"abs": "failed", "neg": "crashed", "sigmoid": "unsupported", "tanh": "passed"}
ARGS = ["conform", "--ops", OPS, "--no-light", "--no-expanded", "--case-timeout", "20"]


def _want(row: CaseResult) -> str:
    return WANT[row.case.model.removeprefix("test_").split("_")[0]]


@pytest.fixture(scope="module")
def conform_cases():
    import conform_fakes  # noqa: F401 - registers fake-conform and fake-conform-slow in this process

    from harness.config import ConformanceConfig
    from harness.workloads.conform.cases import collect

    return collect(ConformanceConfig(ops=tuple(OPS.split(",")), light=False, expanded=False))


def test_the_plan_says_every_node_and_the_merge_is_the_local_run(conform_cases, tmp_path):
    """Cases spread over every node (one per activation: conformance cases are their own), a line per node; the
    merged run has every case once in the local order, each naming its node, and a lost node's crashed row
    carries its conformance facts like the supervisor's own crashed rows."""
    config = RunConfig.build("conform", runtimes=("fake-conform",), ops=tuple(OPS.split(",")), light=False,
                             expanded=False, run_id="c", out_dir=tmp_path)
    from harness.workloads import get_workload

    cases = get_workload("conform").cases(config)
    assert len(cases) == len(conform_cases) >= 4
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 1}), Node("b" * 16, "10.0.0.2", {"CPU": 1}),
             Node("c" * 16, "10.0.0.3", {"GPU": 1})]
    shards, unplaced = plan_shards(cases, nodes, ())
    assert not unplaced and len(shards) == 2 and abs(len(shards[0].cases) - len(shards[1].cases)) <= 1
    lines = plan_lines(cases, nodes, shards, unplaced)
    assert lines[0].startswith(f"ray: {len(cases)} case(s) over 2 of 3 node(s), every node, whatever its hardware")
    assert lines[1] == f"ray: 10.0.0.1-aaaaaaaa: {len(shards[0].cases)} case(s) (fake-conform)"
    assert lines[3].startswith("ray: 10.0.0.3-cccccccc: no case:") and "GPU 1" in lines[3]
    runs = []
    for k, s in enumerate(shards):
        sr = ShardRun(config, s, tmp_path)
        sr.run.environment.add(machine_fingerprint=f"class{k}", ray_node=s.node.node_id)
        if k == 0:  # the lost node's complete run (its config) never arrived
            sr.run.config.update(onnx="1.x", runtimes={"fake-conform": {}})
        sr.run.cases = [CaseResult(c, "passed") for c in s.cases]
        runs.append(sr)
    runs[1].run.cases = runs[1].run.cases[:1]
    runs[1].lose("ActorDiedError: the node died", lambda line: None)
    merged = merge_conform(config, cases, [r.run for r in runs])
    assert [c.case for c in merged.cases] == list(cases)  # every case once, in the local order
    assert {c.details["ray_node"] for c in merged.cases} == {"10.0.0.1-aaaaaaaa", "10.0.0.2-bbbbbbbb"}
    lost = [c for c in merged.cases if c.status == "crashed"]
    assert len(lost) == len(shards[1].cases) - 1 and not merged.complete
    assert all(conformance_status(c) == "crashed" and c.details["conformance"]["op"] in OPS.split(",")
               and "lost before this case finished: ActorDiedError" in c.reason for c in lost)
    assert merged.config["kind"] == "conformance" and set(merged.config["ray_nodes"]) == {"10.0.0.1-aaaaaaaa"}
    text = "\n".join(node_lines(merged))
    assert "10.0.0.1-aaaaaaaa: " in text and "hardware class class0" in text and "2 hardware classes" in text


# ---------------------------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def cluster():  # no conform_cases here: a test skipped for want of Ray collects no cases (5 s)
    if not os.environ.get("HARNESS_REQUIRE_RAY"):
        pytest.importorskip("ray", reason="Ray is the [ray] extra")
    from ray.cluster_utils import Cluster

    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_PLUGINS", "conform_fakes")  # the raylets and their workers inherit these
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), *sys.path]))
    from ray_head import RAY_HEAD

    c = Cluster(initialize_head=True, head_node_args=RAY_HEAD)  # a killed node seen dead in ~1.5 s
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    import ray

    ray.shutdown()
    c.shutdown()
    mp.undo()


@pytest.mark.slow  # the e2e tier: a two-node cluster, the conformance run locally and on it
def test_conform_sharded_and_merged_as_the_local_conform(cluster, conform_cases, tmp_path, capsys):
    from harness.cli import main

    local = main([*ARGS, "--runtimes", "fake-conform", "--out", str(tmp_path / "local")])
    local_text = capsys.readouterr().out
    code = main([*ARGS, "--runtimes", "fake-conform", "--ray", cluster.address, "--out", str(tmp_path / "ray")])
    captured = capsys.readouterr()
    text = captured.out
    assert local == code == 0, local_text + text + captured.err
    out = tmp_path / "ray"
    runs = {k: load_results(tmp_path / k / "results.json") for k in ("local", "ray")}
    rows = {k: {c.case.id: (c.status, conformance_status(c)) for c in r.cases} for k, r in runs.items()}
    assert rows["local"] == rows["ray"] and len(rows["ray"]) == len(conform_cases)  # the same rows
    assert [c.case.id for c in runs["ray"].cases] == [c.case.id for c in runs["local"].cases]  # every case once
    assert all(conformance_status(c) == _want(c) for c in runs["ray"].cases)
    assert runs["ray"].complete and runs["ray"].config["kind"] == "conformance"
    folders = {p.parent.name for p in out.glob("*/results.json")}
    assert len(folders) == 2 and {c.details["ray_node"] for c in runs["ray"].cases} == folders
    for name in folders:  # each node's own run holds the rows that name it
        node = load_results(out / name / "results.json")
        assert {c.case.id for c in node.cases} == {c.case.id for c in runs["ray"].cases
                                                   if c.details["ray_node"] == name}
    for f in ("results.json", "conformance.html"):
        assert (tmp_path / "local" / f).is_file() and (out / f).is_file(), f
    summary = [line for line in local_text.splitlines() if line.startswith("fake-conform fp32:")]
    assert summary and summary[0].rsplit(", ", 1)[0] in text  # the same summary line (the cases' time apart)
    assert "every node, whatever its hardware class" in text and text.count(" row(s), hardware class ") == 2
    assert "test_neg" in text  # a case that broke still gets its line; the others do not
    assert "passed  test_tanh" not in text


@pytest.mark.slow  # the e2e tier: `harness conform --ray` in a process of its own, SIGTERM once rows have come back
def test_a_signal_writes_what_arrived_marks_the_run_incomplete_and_exits_128_plus_it(cluster, conform_cases,
                                                                                    tmp_path):
    """The first SIGTERM (SIGINT alike: the same handler) once the first rows have streamed: the driver stops waiting,
    cancels the nodes' tasks and writes OUT/results.json with every row that arrived (each in its node's run and
    naming it, none for the cancelled rest: no row "lost before this case finished"), `interrupted`, not complete,
    and conformance.html; exit 143 (130 for SIGINT)."""
    import signal
    import subprocess

    sig = "SIGTERM"  # SIGINT goes through the same handler (the session's rule), exit 130
    cluster.wait_for_nodes()  # a node an earlier test killed is seen dead first (else its shard is lost at once)
    out = tmp_path / "c"
    env = dict(os.environ, HARNESS_FAKE_CONFORM_SLOW_S="2")  # each case 2 s: the signal comes mid-run
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *ARGS, "--runtimes", "fake-conform-slow", "--ray",
                             cluster.address, "--out", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:  # a node's results.json holds its first row
            if any(_cases(p) for p in out.glob("*/results.json")):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + getattr(signal, sig), (proc.returncode, stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    merged = load_results(out / "results.json")
    assert merged.interrupted and not merged.complete
    # each node's run as it stood (a node whose first row had not come back holds none: the strict reader refuses
    # a run of no case)
    arrived = {(p.parent.name, c.case.id) for p in out.glob("*/results.json") for c in _cases(p)}
    assert {(c.details["ray_node"], c.case.id) for c in merged.cases} == arrived  # the folder: what arrived, once
    assert 0 < len(merged.cases) < len(conform_cases), stdout
    got = [(c.case.id, c.status, conformance_status(c), c.reason) for c in merged.cases]
    assert all(conformance_status(c) == _want(c) for c in merged.cases), got  # none crashed for the cancelled rest
    assert f"ray: interrupted: writing the {len(merged.cases)} row(s) that arrived" in stdout
    assert (out / "conformance.html").is_file()


@pytest.mark.slow  # the e2e tier: a third node started and killed mid-run
def test_a_node_killed_mid_run_costs_only_its_unfinished_cases(cluster, conform_cases, tmp_path, capsys):
    """The slow fake runtime's cases are placed on a node of their own (--placement), which is killed as soon as
    its first row has come back: its unfinished cases are crashed rows naming the lost node, its finished rows
    are kept, the other nodes' rows are as they would be; exit 0 as the local command's for crashed rows."""
    from harness.cli import main

    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.wait_for_nodes()
    out = tmp_path / "c"
    killed, stop = threading.Event(), threading.Event()

    def watch() -> None:  # the node's results.json is rewritten as each of its rows arrives
        while not stop.is_set():
            for path in out.glob(f"*-{doomed.node_id[:8]}/results.json"):
                try:
                    run = load_results(path)
                except Exception:  # noqa: BLE001 - not written yet
                    continue
                if any(c.case.runtime == "fake-conform-slow" for c in run.cases):
                    killed.set()
                    cluster.remove_node(doomed, allow_graceful=False)
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        code = main([*ARGS, "--runtimes", "fake-conform-slow,fake-conform", "--placement",
                     "fake-conform-slow=doomed", "--ray", cluster.address, "--out", str(out)])
    finally:
        stop.set()
        watcher.join(10)
    text = capsys.readouterr().out
    assert killed.is_set(), text
    assert code == 0, text  # crashed rows are findings of the run, as in a local run
    merged = load_results(out / "results.json")
    n = len(conform_cases)
    assert len(merged.cases) == len({c.case.id for c in merged.cases}) == 2 * n and not merged.complete
    slow = [c for c in merged.cases if c.case.runtime == "fake-conform-slow"]
    assert {c.details["ray_node"][-8:] for c in slow} == {doomed.node_id[:8]}
    lost = [c for c in slow if c.status == "crashed" and "lost before this case finished" in c.reason]
    kept = [c for c in slow if c not in lost]
    # the kill is asynchronous: a case or two more may finish first; the rest are lost, never the run
    assert kept and lost, text
    assert all(conformance_status(c) == _want(c) for c in kept)
    assert all(conformance_status(c) == "crashed" and c.details["conformance"]["test"] == c.case.model
               for c in lost)
    others = [c for c in merged.cases if c.case.runtime == "fake-conform"]
    assert len(others) == n and all(conformance_status(c) == _want(c) for c in others)
    assert doomed.node_id[:8] not in {c.details["ray_node"][-8:] for c in others}
    assert "shard lost" in text and (out / "conformance.html").is_file()
    assert "lost before this case finished" in (out / "conformance.html").read_text()


def test_conform_ray_where_nothing_listens_is_one_line_exit_2(tmp_path, capsys, closed_port):
    from harness.cli import main

    port = closed_port  # nothing listens there
    code = main([*ARGS, "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err  # probed before the cases are collected: nothing is created
    assert code == 2 and err == (f"harness conform: error: --ray 127.0.0.1:{port}: nothing answers at "
                                 f"127.0.0.1:{port} (Connection refused); start the cluster (`ray start --head "
                                 f"--port {port}`) or give its address\n")
    assert not (tmp_path / "c").exists()


def _cases(path: Path) -> list[CaseResult]:
    try:
        return load_results(path).cases
    except Exception:  # noqa: BLE001 - not written yet, being replaced, or no row yet
        return []
