"""`harness gate --ray`, `harness run --baseline --ray`, `harness gate-check --nightly --ray`, `harness run --ray` and
`harness qualify --ray` stopped by SIGTERM (or SIGINT), as the local commands stop: what arrived kept and marked
interrupted, no verdict (nothing tallied, no certificate), exit 143 (130). Without a cluster: the gate's
nodes and run_shards replaced by a stream in this process that delivers one row and then the signal (the real
signal path, through the command's own handler). The cluster's own stop (its tasks cancelled): test_conform_ray.py."""

from __future__ import annotations

import os
import signal
import sys
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.execution import fleet_run, gate_ray, gatecheck_ray, ray_shards
from harness.execution.ray_shards import Node, ShardRun
from harness.results import load_results
from harness.results.schema import CaseResult

NODES = [Node("a" * 16, "10.0.0.1", {"CPU": 4.0})]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, fakes):
    out = tmp_path_factory.mktemp("baseline") / "b"
    assert main(["run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1,2", "--min-time",
                 "0.01", "--min-iters", "3", "--no-isolation", "--out", str(out)]) == 0
    return out / "results.json"


def _one_row_then_sigterm(config, shards, note, work=None, node_defaults=None, before=None, signum=signal.SIGTERM,
                          **kw):
    """run_shards' stand-in: each shard's first case comes back (a plain row), then SIGTERM (`signum`) reaches this
    process while the driver waits, as a user's kill does."""
    for shard in shards:
        sr = ShardRun(config, shard, config.outputs.out_dir)
        if before is not None:
            before(sr)
        sr._apply("case", CaseResult(shard.cases[0], "passed", samples_ns=[1000] * 5).as_dict(), note)
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)  # the command's handler
    os.kill(os.getpid(), signum)
    raise AssertionError("the signal did not stop the wait")


@pytest.fixture
def cluster_here(monkeypatch):
    monkeypatch.setattr(ray_shards, "probe_address", lambda address, timeout=None: None)
    monkeypatch.setattr(gate_ray, "gate_nodes", lambda config, runs, note: (list(NODES), [], "k1"))
    monkeypatch.setattr(gatecheck_ray, "gate_nodes", lambda config, runs, note: (list(NODES), [], "k1"))
    monkeypatch.setattr(gate_ray, "run_shards", _one_row_then_sigterm)
    monkeypatch.setattr(gatecheck_ray, "run_shards", _one_row_then_sigterm)
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(put=lambda blob: blob))  # the baseline's blobs


@pytest.mark.parametrize("argv, line", [
    (["gate", "{baseline}"], "gate: interrupted: no verdict"),
    (["run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1,2", "--baseline", "{baseline}"],
     "run --baseline --ray: interrupted: no verdict"),
])
def test_a_gate_on_the_cluster_stopped_by_sigterm_keeps_what_arrived_judges_nothing_exit_143(
        baseline, cluster_here, tmp_path, capsys, argv, line):
    out = tmp_path / "g"
    code = main([*(a.format(baseline=baseline) for a in argv), "--ray", "127.0.0.1:6379", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 143, text
    assert line in text and "ray: interrupted: writing the 1 row(s) that arrived" in text
    run = load_results(out / "results.json")
    assert run.interrupted and not run.complete
    assert [c.details["ray_node"] for c in run.cases] == ["10.0.0.1-aaaaaaaa"]  # what arrived, naming its node
    assert not (out / "gate.md").exists() and not (out / "gate.json").exists()  # no verdict, as the local gate


def test_gate_check_nightly_on_the_cluster_stopped_by_sigterm_tallies_nothing_exit_143(baseline, cluster_here,
                                                                                       tmp_path, capsys):
    out = tmp_path / "gc"
    code = main(["gate-check", "--nightly", str(baseline), "--rounds", "2", "--levels", "30", "--ray",
                 "127.0.0.1:6379", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 143, text
    assert "gate-check --nightly: interrupted" in text
    assert not (out / "gatecheck-nightly.md").exists() and not (out / "gatecheck-nightly.json").exists()
    node = out / "runs" / "10.0.0.1-aaaaaaaa" / "results.json"
    assert len(load_results(node).cases) == 1 and load_results(node).interrupted  # its trial rows so far, kept


TWO = [Node("a" * 16, "10.0.0.1", {"CPU": 4.0}), Node("b" * 16, "10.0.0.2", {"CPU": 4.0})]
LABELS = ["10.0.0.1-aaaaaaaa", "10.0.0.2-bbbbbbbb"]


@pytest.fixture
def sigterm_kept():
    old = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, old)


def _connect_as_ray_init(address):
    """connect()'s stand-in: two nodes, and SIGTERM's handler reset as ray.init resets it (Ray's own ends the
    process at once): the command's handler must come after it, as the wait starts."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return list(TWO)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_on_the_cluster_stopped_by_a_signal_writes_what_arrived_interrupted_exit_128_plus_it(
        fakes, monkeypatch, tmp_path, capsys, sigterm_kept, signum):
    monkeypatch.setattr(ray_shards, "probe_address", lambda address, timeout=None: None)
    monkeypatch.setattr(ray_shards, "connect", _connect_as_ray_init)
    monkeypatch.setattr(ray_shards, "run_shards", lambda *a, **kw: _one_row_then_sigterm(*a, **kw, signum=signum))
    out = tmp_path / "r"
    code = main(["run", "--models", "fake-linear", "--runtimes", "fake-ok,fake-ok-b", "--batch-sizes", "1,2", "--ray",
                 "127.0.0.1:6379", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 128 + signum, text
    assert "ray: interrupted: writing the 2 row(s) that arrived" in text and "run --ray: interrupted" in text
    run = load_results(out / "results.json")
    assert run.interrupted and not run.complete
    assert sorted(c.details["ray_node"] for c in run.cases) == LABELS  # what arrived (one row a node), its node named
    assert (out / "report.html").is_file()
    for label in LABELS:  # each node's own file: its row, marked interrupted
        node = load_results(out / label / "results.json")
        assert len(node.cases) == 1 and node.interrupted and not node.complete


SPEC = """name = "sig-fake"
[measure]
min_time = 0.01
min_iters = 3
[defaults.require]
p50_ms_max = 200
[[case]]
model = "fake-linear"
runtime = "fake-ok"
batch = 1
[[case]]
model = "fake-linear"
runtime = "fake-ok"
batch = 2
"""


def test_qualify_on_the_cluster_stopped_by_sigterm_writes_what_arrived_certifies_nothing_exit_143(
        fakes, monkeypatch, tmp_path, capsys, sigterm_kept):
    monkeypatch.setattr(fleet_run, "connect", _connect_as_ray_init)
    monkeypatch.setattr(fleet_run, "run_shards", _one_row_then_sigterm)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "q"
    code = main(["qualify", str(spec), "--ray", "127.0.0.1:6379", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 143, captured.out
    assert "no certificate of part of the spec" in captured.out and "harness qualify: terminated" in captured.err
    assert (out / "report.html").is_file()  # every node side by side (the nodes ran the same cases: no merged file)
    assert not list(out.rglob("*certificate*"))  # as the local qualify: no certificate of a partial run
    for label in LABELS:  # each node's own file: its first case, marked interrupted
        node = load_results(out / label / "results.json")
        assert [c.case.batch for c in node.cases] == [1] and node.interrupted and not node.complete


def _every_row_back(config, shards, note, before=None, **kw):
    """run_shards' stand-in: each node's whole shard back (every case passed, its run complete), no signal."""
    runs = []
    for shard in shards:
        sr = ShardRun(config, shard, config.outputs.out_dir)
        if before is not None:
            before(sr)
        for case in shard.cases:
            sr._apply("case", CaseResult(case, "passed", samples_ns=[1000] * 5).as_dict(), note)
        sr.run.complete = True
        sr.writer.save(sr.run)
        runs.append(sr)
    return runs


@pytest.mark.parametrize("where", ["between two burn-in rounds", "while the certificates are written"])
def test_qualify_on_the_cluster_signalled_outside_a_wait_on_the_nodes_exits_143_never_rays_15(
        fakes, monkeypatch, tmp_path, capsys, sigterm_kept, where):
    """SIGTERM reaching `qualify --ray` outside its waits on the nodes, where no round's rule is installed: between
    two rounds of --burn-in (the first round's files kept whole, no certificate) or once every node's run is back
    (the certificates written whole first); exit 143 both times. The real connect() on a stand-in of Ray's module
    whose init installs Ray's own SIGTERM handler at every call, as ray.init does (sys.exit(15): no line, no
    files), connected or not: before #55's fix that handler took both signals (a round's connect() put it back)."""
    from harness.report import certificate

    inits: list[str] = []
    listed: list[int] = []

    def init(address, **kw):  # ray.init: Ray's handler first (worker.py), then the connection
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        inits.append(address)

    def nodes():  # ray.nodes(), once per connect(): its third call is round 2's, round 1's wait over
        listed.append(1)
        if len(listed) == 3 and where.startswith("between"):
            os.kill(os.getpid(), signal.SIGTERM)
        return [{"NodeID": n.node_id, "NodeManagerAddress": n.address, "Resources": n.resources, "Alive": True}
                for n in TWO]

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(init=init, nodes=nodes, is_initialized=lambda: bool(
        inits)))
    monkeypatch.setattr(ray_shards, "probe_address", lambda address, timeout=None: None)
    written = certificate.write_certificate

    def write_then_sigterm(*a, **kw):  # the signal as the first node's certificate is written
        paths = written(*a, **kw)
        if where.startswith("while"):
            os.kill(os.getpid(), signal.SIGTERM)
        return paths

    monkeypatch.setattr(fleet_run, "run_shards", _every_row_back)
    monkeypatch.setattr(certificate, "write_certificate", write_then_sigterm)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "q"
    burn = ["--burn-in", "1s"] if where.startswith("between") else []
    code = main(["qualify", str(spec), "--ray", "127.0.0.1:6379", *burn, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 143, captured.out + captured.err
    assert "harness qualify: terminated" in captured.err and len(inits) == 1  # one ray.init a driver
    if where.startswith("between"):
        assert "burn-in round 2" in captured.out and not (out / "round-02").exists()
        for label in LABELS:  # round 1 as it came back: whole
            node = load_results(out / "round-01" / label / "results.json")
            assert len(node.cases) == 2 and node.complete and not node.interrupted
        assert not list(out.rglob("*certificate*"))  # no certificate of a burn-in cut short
    else:  # every node's run was back: the verdict is made, its files written whole before the exit
        assert "stopping" not in captured.out  # the signal recorded, not acted on: the files first
        assert (out / "fleet-certificate.json").is_file()
        assert all((out / label / "certificate.json").is_file() for label in LABELS)
