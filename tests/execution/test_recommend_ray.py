"""`harness recommend --ray`: each configuration's capacity search whole on one node of one hardware class of a real
local Ray cluster (head + workers on this machine), spread through run --ray's shards; the last rung and the A/B on
one node; every row naming its node; a node of another class left out, said; a node killed mid-run costs only its
configurations ("not searched (node lost ...)"), judged on what finished or not at all (exit 3)."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import sys
import threading
from pathlib import Path

import pytest

from harness.execution.recommend_ray import RecommendShard, majority_class, merge, place
from harness.execution.ray_shards import Node
from harness.gating.verdicts import EXIT_CLEAN, EXIT_UNJUDGED
from harness.report.recommend import render_html, render_markdown
from harness.results.schema import CaseId
from harness.results.stored import EnvironmentRecord
from harness.workloads.capacity.recommend import (AbConfirmation, Candidate, Constraints, Evaluated, Search,
                                                  SearchSettings, decided, picked)
from harness.workloads.capacity.search import Capacity

TESTS = Path(__file__).resolve().parents[1]


def _nodes(*cpus: float) -> list[Node]:
    return [Node(c * 16, f"10.0.0.{i + 1}", {"CPU": n}) for i, (c, n) in enumerate(zip("abcd", cpus, strict=False))]


def test_the_class_of_most_nodes_is_searched_and_the_others_left_out_with_the_reason():
    nodes = _nodes(2, 2, 8, 2)
    classes = {"a" * 16: "k1", "b" * 16: "k1", "c" * 16: "k2", "d" * 16: ""}
    wanted, used, left = majority_class(nodes, classes)
    assert wanted == "k1" and [n.address for n in used] == ["10.0.0.1", "10.0.0.2"]
    assert left[0] == ("10.0.0.3-cccccccc: not used: hardware class k2, not k1, the class of 2 of the 4 node(s) "
                       "(capacities are compared only within one hardware class)")
    assert left[1].startswith("10.0.0.4-dddddddd: not used: it did not say its hardware class")
    # a tie: the class with more CPUs in all, then the first fingerprint in order
    wanted, used, _ = majority_class(nodes[:3] + [Node("d" * 16, "10.0.0.4", {"CPU": 1})],
                                     {**classes, "d" * 16: "k2"})
    assert wanted == "k2" and [n.address for n in used] == ["10.0.0.3", "10.0.0.4"]
    assert majority_class(nodes[:2], {"a" * 16: "z", "b" * 16: "y"})[0] == "y"


def test_configurations_spread_over_the_nodes_each_whole_on_one_and_an_unplaceable_one_said():
    cases = [(CaseId("m", "fake-ok", "fp32", 1, None, "cpu", variant=f"base threads={t} batcher=none"), "fake-ok")
             for t in (1, 2, 3, 4)]
    gpu = CaseId("m", "fake-gpu", "fp32", 1, None, "cpu", variant="base threads=1 batcher=none")
    shards, unplaced = place([*cases, (gpu, "fake-gpu")], _nodes(1, 1), [("fake-gpu", "GPU")])
    assert [len(s.cases) for s in shards] == [2, 2]
    assert sorted(c for s in shards for c in s.cases) == sorted(c for c, _ in cases)  # every configuration once
    assert unplaced == {gpu: "no node of the hardware class has the resource 'GPU' that runtime fake-gpu needs "
                              "(--placement)"}


def _evaluated(name: str, estimate: float, rung: int = 1, low: float | None = None,
               high: float | None = None) -> Evaluated:
    cap = Capacity(estimate, low if low is not None else estimate * 0.95, high if high is not None else estimate * 1.05,
                   estimate * 1.2, None, 1.0, "found", "found")
    settings = SearchSettings(10.0)
    return Evaluated(Candidate(name, {"runtime": name}, lambda *a: None), None, cap, rung, [Search(rung, 0, settings, cap)])


AB = AbConfirmation(95.0, 5, (1.0,) * 5, (2.0,) * 5, 2.0, 0.03, True, "confirmed")


def test_a_configuration_lost_with_its_node_that_could_have_won_leaves_the_run_not_judged():
    a, b = _evaluated("a", 100.0), _evaluated("b", 50.0)
    never = Evaluated(Candidate("c", {}, lambda *a: None))  # lost before its first search came back
    chosen, runner = picked([a, b, never])
    assert (chosen, runner) == (a, b)
    rec = decided([a, b, never], Constraints(10.0), False, chosen, runner, AB, {"c": "not searched (rung 0): node "
                                                                               "lost: x"})
    assert rec.verdict == "not_judged" and "c: not searched (rung 0): node lost: x (no capacity measured" in \
        rec.not_judged and "could have held the highest capacity" in rec.not_judged
    assert rec.to_json()["not_searched"] == {"c": "not searched (rung 0): node lost: x"}
    assert not any(r.startswith("deploy ") for r in rec.reasons) and rec.reasons[0].startswith("not judged: ")
    data = {**rec.to_json(), "model": "m"}
    data["candidates"][2]["not_searched"] = "not searched (rung 0): node lost: x"  # as the driver writes it
    md = render_markdown(data)
    assert "could not judge" in md and "not searched (rung 0): node lost: x" in md and "★" not in md


def test_a_lost_configuration_the_evidence_rules_out_is_said_and_the_run_judged_on_what_finished():
    a, b = _evaluated("a", 100.0), _evaluated("b", 50.0)
    slow = _evaluated("c", 20.0, rung=0, low=15.0, high=30.0)  # its rung-0 interval ends below a's low end (95)
    chosen, runner = picked([a, b, slow])
    rec = decided([a, b, slow], Constraints(10.0), False, chosen, runner, AB,
                  {"c": "not searched (rung 1): node lost: x"})
    assert rec.verdict == "recommended" and rec.chosen == "a"
    assert any(r.startswith("c: not searched (rung 1): node lost: x; its last capacity 20") and
               r.endswith("judged on what finished") for r in rec.reasons)
    close = _evaluated("c", 90.0, rung=0, low=60.0, high=97.0)  # reaches a's low end: it could have won
    assert decided([a, b, close], Constraints(10.0), False, a, b, AB, {"c": "lost"}).verdict == "not_judged"
    # the recommendation's own A/B lost with its node: never a recommendation
    assert decided([a, b], Constraints(10.0), False, a, b, None, {"a": "its A/B not run"}).verdict == "not_judged"


def test_a_nodes_record_merges_into_the_drivers_and_the_report_names_each_node():
    a = _evaluated("a", 100.0)
    e = Evaluated(Candidate("a", {"runtime": "a"}, lambda *x: None))
    merge(e, a.to_json())
    assert e.capacity == a.capacity and e.rung == 1 and len(e.history) == 1 and e.refusal is None
    assert e.candidate.environment is None
    # a configuration measured in a runtime environment of its own: the node's record of it read back as a record
    env = EnvironmentRecord(key="k", requirements=["x==1"], python="3.11", packages={"x": "1"}, providers={})
    a.candidate = dataclasses.replace(a.candidate, environment=env)
    merge(e, json.loads(json.dumps(a.to_json())))
    assert e.candidate.environment == env and e.to_json()["environment"] == env.as_dict()
    data = {**decided([e], Constraints(10.0), False, e, None, None).to_json(), "model": "m", "traffic": "t",
            "ray": {"hardware_class": "k1", "nodes": ["10.0.0.1-aaaaaaaa"], "left_out": ["10.0.0.3-cccccccc: not used"],
                    "final_node": "10.0.0.1-aaaaaaaa"}}
    data["candidates"][0]["node"] = "10.0.0.1-aaaaaaaa"
    md = render_markdown(data)
    assert "| node |" in md and "| 10.0.0.1-aaaaaaaa |" in md and "- ray: 10.0.0.3-cccccccc: not used" in md
    assert "<th>node</th>" in render_html(data) and "| node |" not in render_markdown({**data, "ray": None,
                                                                                        "candidates": []})


def test_the_shard_work_is_picklable(tmp_path):
    from harness.traffic.spec import load_traffic

    t = tmp_path / "t.toml"
    t.write_text("seed = 3\nrequests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n")
    work = RecommendShard("fake-linear", str(t), load_traffic(str(t)), {"x": "y"}, "search", SearchSettings(5.0), 0, 0,
                          "rung 0", Constraints(5.0))
    assert pickle.loads(pickle.dumps(work)).names == {"x": "y"}


def test_recommend_ray_where_nothing_listens_is_one_line_exit_2(tmp_path, capsys, fakes, closed_port):
    from harness.cli import main

    port = closed_port  # nothing listens there
    t = tmp_path / "t.toml"
    t.write_text("requests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n")
    code = main(["recommend", "--traffic", str(t), "--model", "fake-linear", "--runtimes", "fake-ok", "--slo-ms", "5",
                 "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and f"--ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def cluster(fakes, tmp_path_factory):
    if not os.environ.get("HARNESS_REQUIRE_RAY"):
        pytest.importorskip("ray", reason="Ray is the [ray] extra")
    from ray.cluster_utils import Cluster

    home = tmp_path_factory.mktemp("recommend-ray")
    (home / "t.toml").write_text("seed = 3\nrequests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_PLUGINS", "fakes")  # the raylets, their workers and the local workers inherit these
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), *sys.path]))
    mp.setenv("HARNESS_CACHE_DIR", str(home / "cache"))
    mp.setenv("HARNESS_CONTENTION_LIMIT", "1")
    # the nodes as docs/fleet.md says to start them: Ray's workers at niceness 0, not 15. At 15 a node's first worker
    # (the hardware-class probe's) took over PROBE_S (120 s) to start beside two busy loops, and that node was left
    # out as one that "did not say its hardware class" (#55)
    mp.setenv("RAY_worker_niceness", "0")
    from harness.execution.supervisor import stop_forkserver

    stop_forkserver()  # the local run's workers come from a forkserver that knows the fakes
    from ray_head import RAY_HEAD

    c = Cluster(initialize_head=True, head_node_args=RAY_HEAD)  # a killed node seen dead in ~1.5 s
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    c.home = home
    yield c
    import ray

    ray.shutdown()
    c.shutdown()
    mp.undo()


# fake-ok (no work a call) against fake-node (4 ms, a sleep): a clear winner on a loaded machine too. Not fake-2ms:
# a loaded core delays the wake-up after every call (a 2 ms sleep's overshoot p99 6 ms at load ~6 here, 0.1 ms at
# p50), on both sides of the A/B, amplified by queueing; 2 ms against 4 ms is a gap of that size, and where a loaded
# probe had put fake-node's capacity low the A/B (at 95% of it) found the two alike (1.18x, p = 0.42: exit 3, #55).
# fake-ok is near idle at any rate the A/B can use while fake-node's calls alone take 4 ms (docs/measurements.md).
# fake-drift is left out by its drift on whichever node measures it; three configurations: rung 0 spread, then the
# last rung
def _argv(cluster, out: Path, *extra: str) -> list[str]:
    return ["recommend", "--traffic", str(cluster.home / "t.toml"), "--model", "fake-linear",
            "--runtimes", "fake-ok,fake-node,fake-drift", "--drift-tolerance", "0.01", "--slo-ms", "50",
            "--requests", "200", "--max-requests", "400", "--probes", "5", "--search-tolerance", "0.3",
            "--ab-pairs", "8", "--activations", "2", "--out", str(out), *extra]


@pytest.mark.e2e  # a cluster of three nodes, recommend run locally and on it (about a minute here)
def test_recommend_sharded_over_one_class_merged_as_the_local_recommend(cluster, tmp_path, capsys, monkeypatch):
    """The same configurations recommended locally and on the cluster: the same recommendation, runner-up, verdict,
    exit code and files; on the cluster every configuration searched once per rung, each naming its node; a node of
    another hardware class (its class rewritten here: every node of this machine is of one) left out, said."""
    from harness.cli import main
    from harness.execution import gate_ray

    other = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    real = gate_ray.node_classes
    monkeypatch.setattr(gate_ray, "node_classes", lambda nodes: {**real(nodes), other.node_id: "another-class"})
    local = main(_argv(cluster, tmp_path / "local"))
    local_text = capsys.readouterr().out
    code = main(_argv(cluster, tmp_path / "ray", "--ray", cluster.address))
    captured = capsys.readouterr()
    text = captured.out
    cluster.remove_node(other)
    assert local == code == EXIT_CLEAN, local_text + text + captured.err
    assert f"{other.node_id[:8]}: not used: hardware class another-class, not " in text
    docs = {k: json.loads((tmp_path / k / "recommend.json").read_text()) for k in ("local", "ray")}
    for key in ("chosen", "runner_up", "verdict", "method"):  # the Pareto set holds memory: noise
        assert docs["local"][key] == docs["ray"][key], key
    assert docs["ray"]["chosen"].startswith("fake-ok ") and docs["ray"]["runner_up"].startswith("fake-node ")
    assert docs["ray"]["ab"]["confirmed"] and docs["ray"]["ab"]["pairs"] == 8
    rows = {c["name"]: c for c in docs["ray"]["candidates"]}
    assert set(rows) == {c["name"] for c in docs["local"]["candidates"]} and len(rows) == 3
    assert rows[docs["ray"]["chosen"]]["rung"] == 2 and rows[docs["ray"]["runner_up"]]["rung"] == 2
    assert [s["rung"] for s in rows[docs["ray"]["chosen"]]["searches"]] == [0, 2]  # each rung once
    assert all(r["node"] and other.node_id[:8] not in r["node"] for r in rows.values())  # every row names its node
    ray_doc = docs["ray"]["ray"]
    assert len(ray_doc["nodes"]) == 2 and ray_doc["final_node"] == ray_doc["ab_node"]
    assert rows[docs["ray"]["chosen"]]["node"] == rows[docs["ray"]["runner_up"]]["node"] == ray_doc["final_node"]
    drift = next(r for n, r in rows.items() if n.startswith("fake-drift "))
    assert drift["refusal"].startswith("drift ") and drift["node"]
    for f in ("recommend.json", "recommend.md", "recommend.html"):
        assert (tmp_path / "local" / f).is_file() and (tmp_path / "ray" / f).is_file(), f
    md = (tmp_path / "ray" / "recommend.md").read_text()
    assert "## Deployment recommendation: fake-linear" in md and "| node |" in md and "★" in md
    assert (tmp_path / "ray" / "rung-0").is_dir() and len(list((tmp_path / "ray" / "final").glob("*/results.json"))) == 1
    assert text.rstrip().splitlines()[-1].startswith("recommend: fake-ok ")
    assert all(f"] rung 0: {name}: " in text for name in rows)  # each row on the terminal, naming its node
    assert "shard lost" not in text


@pytest.mark.e2e  # a third node started and killed mid-search (about 40 s here)
def test_a_node_killed_mid_run_costs_only_its_configurations_not_judged_exit_3(cluster, tmp_path, capsys,
                                                                             monkeypatch):
    from harness.cli import main
    from harness.execution import recommend_ray

    doomed = cluster.add_node(num_cpus=0, resources={"doomed": 1})  # only fake-node's search goes there
    cluster.wait_for_nodes()
    killed = threading.Event()

    def note(line: str) -> None:  # the doomed node dies while its search runs
        print(line)
        if line.startswith("ray: rung 0:") and not killed.is_set():
            killed.set()
            threading.Timer(1.5, lambda: cluster.remove_node(doomed, allow_graceful=False)).start()

    real = recommend_ray.ray_recommend
    monkeypatch.setattr(recommend_ray, "ray_recommend", lambda config, note_=None: real(config, note=note))
    out = tmp_path / "r"
    code = main(_argv(cluster, out, "--ray", cluster.address, "--placement", "fake-node=doomed"))
    text = capsys.readouterr().out
    assert killed.is_set(), text
    data = json.loads((out / "recommend.json").read_text())
    rows = {c["name"]: c for c in data["candidates"]}
    (lost,) = [n for n in rows if n.startswith("fake-node ")]
    assert data["not_searched"][lost].startswith("not searched (rung 0): node lost: ray node ")
    assert rows[lost]["not_searched"] == data["not_searched"][lost] and rows[lost]["capacity"] is None
    (fast,) = [n for n in rows if n.startswith("fake-ok ")]
    assert rows[fast]["capacity"]["estimate"] > 0 and rows[fast]["node"] and doomed.node_id[:8] not in rows[fast]["node"]
    assert code == EXIT_UNJUDGED and data["verdict"] == "not_judged" and "could have held the highest" in \
        data["not_judged"]
    md = (out / "recommend.md").read_text()
    assert "could not judge" in md and "not searched (rung 0): node lost" in md and "★" not in md
    assert f"{lost}: not searched (rung 0): node lost" in text and "shard lost" in text
    assert text.rstrip().splitlines()[-1].startswith("recommend: could not judge: configurations lost with their node")


# ------------------------------------------------------------------------- a node's contention, no Ray needed

def _one_node_in_process(monkeypatch) -> None:
    """`--ray` with its cluster replaced by one node in this process: each shard through the node's own code
    (shard_events: the session, RecommendShard, its probes) and the driver's (ShardRun, merge), no Ray between."""
    from harness.execution import gate_ray, ray_shards, recommend_ray

    node = Node("a" * 16, "10.0.0.1", {"CPU": 2})

    def run_shards(config, shards, note, work=None, node_defaults=None, **kw):
        runs = []
        for shard in shards:
            sr = ray_shards.ShardRun(config, shard, config.outputs.out_dir)
            sr.consume(ray_shards.shard_events(sr.config, shard.cases, node_defaults or [], None, work,
                                               os.getpriority(os.PRIO_PROCESS, 0)), lambda e: e, note)
            runs.append(sr)
        return runs

    monkeypatch.setattr(recommend_ray, "probe_address", lambda address: None)
    monkeypatch.setattr(recommend_ray, "connect", lambda address: [node])
    monkeypatch.setattr(recommend_ray, "cluster_nodes", lambda: [node])
    monkeypatch.setattr(recommend_ray, "run_shards", run_shards)
    monkeypatch.setattr(gate_ray, "node_classes", lambda nodes: {n.node_id: "k1" for n in nodes})


@pytest.mark.parametrize("wait_share,threads,verdict", [(0.4, "1,2", "not_judged"), (0.01, "1", "recommended")])
def test_a_nodes_contended_probes_leave_the_drivers_judgement_as_the_local_commands(
        wait_share, threads, verdict, tmp_path, fakes, monkeypatch, capsys):
    """The node's probes measured on a loaded machine (a fake /proc read by the node's own probes): the driver's
    recommendation is not judged, exit 3, the best estimate provisional, the same unjudged figures as the local
    command under the same load; a quiet node's is judged as the local one's (one configuration: no A/B to tell
    two alike fakes apart) (#55)."""
    from harness.cli import main
    from harness.workloads.capacity.live import LiveConfig

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", "0.10")  # the shipped limit (the suite turns it off)
    _one_node_in_process(monkeypatch)
    t = tmp_path / "t.toml"
    t.write_text("seed = 3\nrequests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n")
    docs, codes, last = {}, {}, {}
    for where in ("local", "ray"):
        monkeypatch.setattr(LiveConfig, "read_proc", staticmethod(fakes.loaded_proc(wait_share)))
        codes[where] = main(["recommend", "--traffic", str(t), "--model", "fake-linear", "--runtimes", "fake-ok",
                             "--thread-counts", threads, "--slo-ms", "50", "--requests", "200", "--max-requests", "400",
                             "--probes", "4", "--search-tolerance", "0.3", "--ab-pairs", "5", "--no-isolation",
                             "--out", str(tmp_path / where), *(["--ray", "127.0.0.1:1"] if where == "ray" else [])])
        docs[where] = json.loads((tmp_path / where / "recommend.json").read_text())
        last[where] = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert docs["ray"]["verdict"] == docs["local"]["verdict"] == verdict, docs["ray"]["reasons"]
    assert codes["ray"] == codes["local"] == (EXIT_UNJUDGED if verdict == "not_judged" else EXIT_CLEAN)
    assert len(docs["ray"]["unjudged"]) == len(docs["local"]["unjudged"])
    for a, b in zip(docs["ray"]["unjudged"], docs["local"]["unjudged"], strict=True):
        assert a.split(" e.g. ")[0] == b.split(" e.g. ")[0] and ("waited 40%" in a) == ("waited 40%" in b)
    rows = {c["name"]: c for c in docs["ray"]["candidates"]}
    assert all(r["node"] == "10.0.0.1-aaaaaaaa" for r in rows.values())
    if verdict == "not_judged":
        assert "waited 40%" in docs["ray"]["unjudged"][0]
        probes = [p for c in rows.values() for s in c["searches"] for p in s["capacity"]["probes"]]
        assert probes and all(p["contended"] for p in probes)  # every probe of the node, as measured there
        assert docs["ray"]["ab"] is not None and docs["ray"]["ab"]["contended"] == docs["local"]["ab"]["contended"] > 0
        assert last["ray"].startswith("recommend: could not judge, the machine was loaded (3)") and \
            last["local"].startswith("recommend: could not judge, the machine was loaded (3)")
        assert "best estimate (provisional): " in last["ray"]
        md = (tmp_path / "ray" / "recommend.md").read_text()
        assert "★" not in md and "deploy " not in md.lower() and "not judged, the machine was loaded" in md
    else:
        assert docs["ray"]["unjudged"] == [] and docs["ray"]["chosen"]


@pytest.mark.e2e  # recommend --ray in a process of its own, SIGTERM once a row came back, then --resume here
def test_a_signal_keeps_what_came_back_and_resume_searches_only_the_rest(cluster, tmp_path, capsys):
    """SIGTERM to `harness recommend --ray` once its first configuration's rung-0 search has come back (recommend.json
    is rewritten as each row arrives): exit 143 and the local command's "interrupted" files (recommend.json
    unfinished with what came back, each naming its node, the rest not searched: interrupted; nothing recommended);
    `--resume` then takes that search instead of measuring it again, searches the rest on the cluster and recommends
    as the uninterrupted run does (test above), exit 0."""
    import signal
    import subprocess
    import time

    from harness.cli import main

    out = tmp_path / "r"
    argv = _argv(cluster, out, "--ray", cluster.address, "--activations", "1", "--ab-pairs", "5")  # kept short
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                doc = json.loads((out / "recommend.json").read_text())
            except (OSError, ValueError):
                doc = {}
            if any(c.get("searches") for c in doc.get("candidates") or ()):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, (proc.returncode, stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    stopped = json.loads((out / "recommend.json").read_text())
    assert stopped["finished"] is False and stopped["interrupted"] == "SIGTERM" and stopped["verdict"] == "not_judged"
    settled = {c["name"] for c in stopped["candidates"] if c["searches"]}
    assert settled and all(c["node"] for c in stopped["candidates"] if c["searches"])
    assert all(c.get("not_searched", "").startswith("not searched (rung 0): interrupted by SIGTERM")
               for c in stopped["candidates"] if not c["node"])
    md = (out / "recommend.md").read_text()
    assert "interrupted by SIGTERM" in md and "★" not in md and "deploy" not in md
    assert "recommend: interrupted by SIGTERM" in stdout

    code = main([*argv, "--resume"])
    text = capsys.readouterr().out
    data = json.loads((out / "recommend.json").read_text())
    # a finished search as the uninterrupted one's; its A/B of 5 pairs may not confirm on a loaded machine (exit 3,
    # said): what is asserted is what the resume did, not what the machine measured
    assert data["finished"] is True and "interrupted" not in data and "not_searched" not in data, text
    assert (code, data["verdict"]) in ((EXIT_CLEAN, "recommended"), (EXIT_UNJUDGED, "not_judged")), text
    assert f"resuming: {len(settled)} search(es) settled by the stopped run" in text
    assert data["resumed_searches"] == len(settled)  # each taken on its node ("resumed:" in the node's log)
    assert data["chosen"].startswith("fake-ok ") and data["runner_up"].startswith("fake-node ")
    rows = {c["name"]: c for c in data["candidates"]}
    assert all(rows[n]["searches"][0] == next(c for c in stopped["candidates"] if c["name"] == n)["searches"][0]
               for n in settled)  # the settled search taken as it was recorded
    assert all(r["node"] for r in rows.values()) and [s["rung"] for s in rows[data["chosen"]]["searches"]] == [0, 2]
