"""`harness gate --ray`, `harness run --baseline --ray` and `harness gate-check --nightly --ray` stopped by SIGTERM, as
the local commands stop: what arrived kept, no verdict (nothing tallied), exit 143. Without a cluster: the gate's
nodes and run_shards replaced by a stream in this process that delivers one row and then the signal (the real
signal path, through the command's own handler). The cluster's own stop (its tasks cancelled): test_conform_ray.py."""

from __future__ import annotations

import os
import signal
import sys
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.execution import gate_ray, gatecheck_ray, ray_shards
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


def _one_row_then_sigterm(config, shards, note, work=None, node_defaults=None, before=None, **kw):
    """run_shards' stand-in: the first shard's first case comes back (a plain row), then SIGTERM reaches this
    process while the driver waits, as a user's kill does."""
    for shard in shards:
        sr = ShardRun(config, shard, config.outputs.out_dir)
        if before is not None:
            before(sr)
        sr._apply("case", CaseResult(shard.cases[0], "passed", samples_ns=[1000] * 5).as_dict(), note)
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)  # the command's handler
    os.kill(os.getpid(), signal.SIGTERM)
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
    assert len(load_results(node).cases) == 1  # the node's trial rows so far, kept
