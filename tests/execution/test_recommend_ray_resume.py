"""`harness recommend --ray` stopped by a signal and resumed, without a cluster: the nodes' shards run in this process
(run_shards replaced by one that calls each shard's work here, row by row, as Ray would stream them) on configurations
whose probes are simulated (a known cost model on the fake clock: the same capacities every run), so the stopped,
the resumed and the uninterrupted runs can be compared file for file. The real cluster: test_recommend_ray.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.execution import gate_ray, recommend_ray, recommend_run
from harness.execution.ray_shards import Node, ShardRun
from harness.gating.verdicts import EXIT_CLEAN
from harness.traffic.spec import TrafficSpec
from harness.traffic.synthetic import CostModel, fifo_arrays
from harness.workloads.capacity.recommend import Candidate

FIXED = TrafficSpec(shapes={"seq": ((100, 1.0),)})  # the simulated probes' traffic (M/D/1), whatever the file says
COST = {"fake-2ms": (0.5, 0.005), "fake-node": (0.3, 0.008), "fake-drift": (0.2, 0.002)}  # ms: a + b x 100 tokens
NODES = [Node("a" * 16, "10.0.0.1", {"CPU": 2.0}), Node("b" * 16, "10.0.0.2", {"CPU": 2.0})]


def _simulated(config, spec, traffic, user_model):
    """recommend_run._candidates' stand-in: each configuration of the config's grid with a simulated probe (its cost
    falls with sqrt(threads)); fake-drift over any drift tolerance. Each probe is noted in the stage under way's list (PROBED)."""
    from harness.workloads.capacity.live import ConfigRef, batcher_spelling

    cap, matrix = config.capacity, config.matrix
    out = []
    for rname in matrix.runtimes:
        for threads in cap.thread_counts:
            ref = ConfigRef(spec.name, None, rname, "fp32", "base", threads, batcher_spelling("none"), traffic, "", 0.0)
            a, b = COST[rname]
            cost = CostModel(a, b / threads ** 0.5)

            def probe(rate, n, seed, cost=cost, name=ref.name):
                PROBED["now"].append(name)
                return fifo_arrays(*FIXED.arrays(rate, n, seed), cost)

            out.append(Candidate(ref.name, ref.axes, probe, 0.5 if rname == "fake-drift" else 1e-6, 100.0))
    return out, lambda: None


PROBED: dict[str, list[str]] = {"now": []}  # the stage under way's probes (_Stream.probed: a list per stage)


class _Stream:
    """run_shards in this process: each shard's work called here, its rows taken one by one as ShardRun takes a
    node's stream; `after_row(n)` is called after the n-th row of the whole run (the test's signal)."""

    def __init__(self, tmp: Path, after_row=lambda n: None) -> None:
        self.tmp, self.after_row, self.rows = tmp, after_row, 0
        self.stages: list[str] = []
        self.probed: dict[str, list[str]] = {}  # stage -> the configurations its probes were sent to

    def __call__(self, config, shards, note, work=None, node_defaults=None, before=None, **kw):
        self.stages.append(work.label)
        PROBED["now"] = self.probed[work.label] = []
        runs = []
        for shard in shards:
            sr = ShardRun(config, shard, config.outputs.out_dir)
            if before is not None:
                before(sr)
            runs.append(sr)
            node = config.replace(out_dir=self.tmp / f"node-{len(self.stages)}-{shard.node.label}")
            session = SimpleNamespace(config=node, record=lambda row: row)
            for row in work(session, shard.cases):
                sr._apply("case", row.as_dict(), note)
                self.rows += 1
                self.after_row(self.rows)
            sr.run.complete = True
        return runs


@pytest.fixture
def cluster_here(fakes, monkeypatch, tmp_path):
    """A cluster of two nodes of one hardware class, its shards run in this process on simulated configurations."""
    monkeypatch.setattr(recommend_ray, "probe_address", lambda address: None)
    monkeypatch.setattr(recommend_ray, "connect", lambda address: list(NODES))
    monkeypatch.setattr(recommend_ray, "cluster_nodes", lambda: list(NODES))
    monkeypatch.setattr(gate_ray, "node_classes", lambda nodes: {n.node_id: "k1" for n in nodes})
    monkeypatch.setattr(recommend_run, "_candidates", _simulated)
    t = tmp_path / "t.toml"
    t.write_text("seed = 3\nrequests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n")

    def run(out: Path, *extra: str, after_row=lambda n: None) -> tuple[int, _Stream]:
        stream = _Stream(tmp_path / "nodes", after_row)
        monkeypatch.setattr(recommend_ray, "run_shards", stream)
        code = main(["recommend", "--traffic", str(t), "--model", "fake-linear",
                     "--runtimes", "fake-2ms,fake-node,fake-drift", "--thread-counts", "1,2", "--drift-tolerance",
                     "0.01", "--slo-ms", "10", "--ab-pairs", "5", "--activations", "1", "--no-isolation",
                     "--ray", "127.0.0.1:6379", "--out", str(out), *extra])
        return code, stream
    return run


def _sigterm_after(rows: int):
    def after_row(n: int) -> None:
        if n == rows:  # a real SIGTERM to this process: the command's handler must be the one that takes it
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
            os.kill(os.getpid(), signal.SIGTERM)
    return after_row


def _same(doc: dict) -> dict:
    """recommend.json less what differs between two runs of the same search (its wall time, resumed searches)."""
    return {k: v for k, v in doc.items() if k not in ("wall_s", "resumed_searches")}


def test_a_signal_writes_the_local_interrupted_files_and_resume_searches_only_the_rest(cluster_here, tmp_path, capsys):
    """SIGTERM after 4 of rung 0's 6 rows came back (3 searches and a configuration refused for its drift): exit 143,
    recommend.json unfinished with what came back (each naming its node), the rest said not searched (interrupted),
    recommend.md / .html saying it was interrupted and recommending nothing, as the local command writes them.
    --resume then takes the 3 settled searches (not measured again), searches the rest on the cluster and writes the
    same files as the uninterrupted run."""
    whole_code, whole_stream = cluster_here(tmp_path / "whole")
    whole = json.loads((tmp_path / "whole" / "recommend.json").read_text())
    assert whole_code == EXIT_CLEAN and whole["verdict"] == "recommended", whole
    assert whole_stream.stages == ["rung 0", "final, side by side"] and whole["resumed_searches"] == 0
    rung0 = set(whole_stream.probed["rung 0"])
    capsys.readouterr()

    out = tmp_path / "r"
    code, _ = cluster_here(out, after_row=_sigterm_after(4))
    text = capsys.readouterr().out
    assert code == 128 + signal.SIGTERM, text
    stopped = json.loads((out / "recommend.json").read_text())
    assert stopped["finished"] is False and stopped["interrupted"] == "SIGTERM" and stopped["verdict"] == "not_judged"
    assert stopped["chosen"] is None and stopped["ray"]["hardware_class"] == "k1"
    settled = [c for c in stopped["candidates"] if c["searches"]]
    assert len(settled) == 3 and all(c["node"] and len(c["searches"]) == 1 for c in settled)
    (refused,) = [c for c in stopped["candidates"] if c["refusal"]]
    assert refused["refusal"].startswith("drift ") and refused["node"] and "not_searched" not in refused
    rest = [c for c in stopped["candidates"] if not c["searches"] and not c["refusal"]]
    assert len(rest) == 2 and all(c["not_searched"] == "not searched (rung 0): interrupted by SIGTERM before its "
                                  "search came back" and c["node"] is None for c in rest)
    md = (out / "recommend.md").read_text()
    assert "interrupted by SIGTERM after 3 search(es)" in md and "deploy" not in md and "★" not in md
    assert "| not searched (rung 0): interrupted by SIGTERM" in md and (out / "recommend.html").is_file()
    assert "recommend: interrupted by SIGTERM after 3 search(es)" in text

    code, stream = cluster_here(out, "--resume")
    text = capsys.readouterr().out
    resumed = json.loads((out / "recommend.json").read_text())
    assert code == EXIT_CLEAN, text
    assert resumed["resumed_searches"] == 3 and "resuming: 3 search(es) settled by the stopped run" in text
    assert text.count("(resumed: ") == 3
    # rung 0 measures only what the stopped run left (the drift one is refused again, without a search)
    assert set(stream.probed["rung 0"]) == rung0 - {c["name"] for c in settled} == {c["name"] for c in rest
                                                                                   if "fake-drift" not in c["name"]}
    assert _same(resumed) == _same(whole)  # the same capacities, nodes, choice, A/B, costs and reasons
    for f in ("recommend.md", "recommend.html"):
        assert (out / f).read_text().replace(" (3 searches taken from the stopped run it resumed)", "") == \
            (tmp_path / "whole" / f).read_text(), f
    assert stream.stages == ["rung 0", "final, side by side"]


def test_recommend_json_is_rewritten_as_each_row_comes_back(cluster_here, tmp_path):
    """A driver killed outright (no handler runs) keeps what came back, as the local command keeps every search:
    recommend.json holds each row as it arrives, and --resume goes on from it."""
    seen: list[int] = []
    out = tmp_path / "r"

    def after_row(n: int) -> None:
        doc = json.loads((out / "recommend.json").read_text())
        seen.append(sum(bool(c["node"]) for c in doc["candidates"]))  # the configurations that came back
        assert doc["finished"] is False and "verdict" not in doc

    code, _ = cluster_here(out, after_row=after_row)
    assert code == EXIT_CLEAN
    assert seen[:6] == [1, 2, 3, 4, 5, 6]  # rung 0's rows, one more each time


def test_resume_refuses_a_run_of_another_hardware_class_or_a_local_run(cluster_here, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r"
    cluster_here(out, after_row=_sigterm_after(2))
    monkeypatch.setattr(gate_ray, "node_classes", lambda nodes: {n.node_id: "k2" for n in nodes})
    capsys.readouterr()
    code, _ = cluster_here(out, "--resume")
    err = capsys.readouterr().err
    assert code == 2 and "was measured with another machine" in err and "'hardware_class': 'k1'" in err
