"""The rules of `harness run --baseline --ray` and `harness gate-check --nightly --ray` that need no cluster: the
matrix's plans, nodes lacking a --model file, rounds dealt to nodes, and a lost node's trials counted unjudged,
never as a pass or a detection (the real cluster: tests/execution/test_gate_ray.py, in the e2e tier)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from fakes import fake_latency

from harness.execution.gate_ray import NOT_IN_BASELINE, GateShard, file_nodes, matrix_plans, model_files
from harness.execution.gate_run import STORED, GateCase, GateOutcome, judge_rows
from harness.execution.gatecheck_ray import TrialShard, assign_rounds, trial_rows, trials_of
from harness.execution.ray_shards import Node
from harness.gating.gatecheck import NightlyTally
from harness.report.gatecheck import nightly_markdown
from harness.results.schema import AbResult, CaseId, CaseResult, RunResults
from harness.results.stored import RunEnvironmentRecord


def _case(model: str, batch: int = 1) -> CaseId:
    return CaseId(model, "fake-graph", "fp32", batch, None, "cpu")


def test_the_matrix_decides_what_run_baseline_ray_gates_and_a_case_the_baseline_lacks_is_said():
    gated = [GateCase(_case("a")), GateCase(_case("b"), fallback="its stored artifact is missing"),
             GateCase(_case("outside"))]
    plans = matrix_plans(gated, [_case("b"), _case("a"), _case("a", 2)])
    assert [p.case.id for p in plans] == [_case("b").id, _case("a").id, _case("a", 2).id]  # the matrix's order
    assert plans[0] is gated[1] and plans[1] is gated[0]  # the gate's own plans: A/B, or why not
    assert plans[2].fallback == NOT_IN_BASELINE and not plans[1].fallback
    assert "outside" not in {p.case.model for p in plans}  # the baseline's cases outside the matrix: not gated


def test_a_node_lacking_a_model_file_is_left_out_naming_the_file():
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 1}), Node("b" * 16, "10.0.0.2", {"CPU": 1}),
             Node("c" * 16, "10.0.0.3", {"CPU": 1})]
    used, left = file_nodes(nodes, {"a" * 16: [], "b" * 16: ["/data/m.onnx"], "c" * 16: None})
    assert [n.address for n in used] == ["10.0.0.1"]
    assert left[0] == ("10.0.0.2-bbbbbbbb: not used: it lacks the --model file /data/m.onnx (a --model file must "
                       "be at the same path on every node)")
    assert left[1].startswith("10.0.0.3-cccccccc: not used: it did not say within")


def test_model_files_are_the_onnx_files_by_absolute_path_not_factories():
    from harness.config import RunConfig

    config = RunConfig.build(user_models=("m.onnx", "pkg.models:build"))
    assert model_files(config) == [str(Path("m.onnx").absolute())]


def test_the_plan_leaves_out_a_node_of_the_class_lacking_a_model_file_and_refuses_when_none_holds_it(
        monkeypatch, tmp_path):
    pytest.importorskip("ray", reason="Ray is the [ray] extra")
    from harness.config import RunConfig
    from harness.errors import UsageError
    from harness.execution import gate_ray

    model = tmp_path / "net.onnx"
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 1}), Node("b" * 16, "10.0.0.2", {"CPU": 1}),
             Node("c" * 16, "10.0.0.3", {"CPU": 1})]
    monkeypatch.setattr(gate_ray, "connect", lambda address: nodes)
    monkeypatch.setattr(gate_ray, "node_classes", lambda ns: {"a" * 16: "k1", "b" * 16: "k1", "c" * 16: "k2"})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = RunConfig.build(workload="gate", ray="auto", user_models=(str(model),))
    baseline = RunResults(run_id="b", started_at="", environment=RunEnvironmentRecord.from_dict({"machine_fingerprint": "k1"}))
    asked = []

    def missing(ns, paths):
        asked.append(([n.address for n in ns], paths))
        return {"a" * 16: [], "b" * 16: [str(model)]}

    monkeypatch.setattr(gate_ray, "node_missing", missing)
    lines = []
    used, left, wanted = gate_ray.gate_nodes(config, [baseline], lines.append)
    assert [n.address for n in used] == ["10.0.0.1"] and wanted == "k1"
    assert asked == [(["10.0.0.1", "10.0.0.2"], [str(model)])]  # only the nodes of the class are asked
    assert any(f"10.0.0.2-bbbbbbbb: not used: it lacks the --model file {model}" in line for line in lines)
    monkeypatch.setattr(gate_ray, "node_missing", lambda ns, paths: {n.node_id: [str(model)] for n in ns})
    with pytest.raises(UsageError, match=r"no node of the cluster is of the baseline's hardware class k1; 2 of it, "
                                         r"none holding every --model file"):
        gate_ray.gate_nodes(config, [baseline], lines.append)


def test_whole_rounds_are_dealt_to_the_nodes_in_turn():
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 1}), Node("b" * 16, "10.0.0.2", {"CPU": 1})]
    got = assign_rounds(nodes, 3, (0.1, 0.3))
    assert got["a" * 16] == [(0, "aa", 0.0), (0, "10%", 0.1), (0, "30%", 0.3),
                             (2, "aa", 0.0), (2, "10%", 0.1), (2, "30%", 0.3)]
    assert got["b" * 16] == [(1, "aa", 0.0), (1, "10%", 0.1), (1, "30%", 0.3)]
    assert trials_of(()) == [("aa", 0.0)]


def _ab_row(case: CaseId, verdict: str, trial: dict) -> CaseResult:
    ab = AbResult(a="a", b="b", b_case=case, order="ab", blocks=[], block_time_s=0.01, inject=0.0, verdict=verdict,
                  reason="why", ratio=1.3, ci_low=1.2, ci_high=1.4, confidence=0.95, min_effect=0.05, pairs_used=8)
    return CaseResult(case, "failed" if verdict == "regressed" else "passed", ab=ab, latency=fake_latency(0.3),
                      details={"gate": {"mode": "re-measured", "side_a": {"latency": {"p50_ms": 0.23}}},
                               "gate_check": trial})


def test_a_trial_its_node_did_not_finish_is_counted_unjudged_never_a_pass_or_a_detection():
    """The node streamed round 0's A/A row, then died in its slowed trial: the A/A is tallied as judged, the
    slowed trial's row is `inconclusive (not judged: node lost)` and counted unjudged; the lost trial is said."""
    cases = [_case("a"), _case("b")]
    plans = [GateCase(c) for c in cases]
    node = Node("d" * 16, "10.0.0.4", {"CPU": 1})
    sr = types.SimpleNamespace(
        streamed=[_ab_row(c, "pass", {"round": 0, "trial": "aa"}) for c in cases]
        + [_ab_row(cases[0], "regressed", {"round": 0, "trial": "30%"})],
        error="NodeDiedError: the node died", shard=types.SimpleNamespace(node=node))
    tally = NightlyTally(levels=("30%",))
    lost = []
    for trial in [(0, "aa", 0.0), (0, "30%", 0.3)]:
        rows, why = trial_rows(sr, trial, plans)
        assert [r.case for r in rows] == cases  # every plan once, in the plan's order
        if why:
            lost.append(f"round 1 {trial[1]} on {node.label}: {why}")
        outcome = GateOutcome()
        judge_rows(outcome, plans, RunResults(run_id="r", started_at="", cases=rows), [], None)
        tally.add(trial[1], outcome.records, list(outcome.fallbacks), STORED)
    rows = {(r["case"], r["trial"]): r for r in tally.rows()}
    assert rows[(cases[0].id, "A/A")]["pass"] == 1 and rows[(cases[1].id, "A/A")]["pass"] == 1
    assert rows[(cases[0].id, "slowed 30%")]["regressed"] == 1  # it finished before the node died
    lost_row = rows[(cases[1].id, "slowed 30%")]
    assert lost_row["unjudged"] == lost_row["trials"] == 1 and lost_row["pass"] == lost_row["regressed"] == 0
    assert lost == ["round 1 30% on 10.0.0.4-dddddddd: NodeDiedError: the node died"]
    assert "power at 30%: 1 of 2" in tally.summary(STORED)  # the lost row is in the trials, never a detection
    md = nightly_markdown(tally.summary(STORED), tally.rows(), lost)
    assert "Not judged: 1 trial(s) whose Ray node was lost" in md and lost[0] in md
    assert "Not judged" not in nightly_markdown(tally.summary(STORED), tally.rows())


def test_the_trial_work_is_picklable_without_ray_objects():
    import pickle

    gate = GateShard({_case("a").id: GateCase(_case("a"))}, None, RunResults(run_id="b", started_at=""), {})
    work = TrialShard({"a" * 16: [(0, "aa", 0.0)]}, gate)
    again = pickle.loads(pickle.dumps(work))
    assert again.trials == work.trials and list(again.gate.plans) == [_case("a").id]


def test_gate_check_ray_without_nightly_is_one_line_exit_2(capsys, fakes):
    from harness.cli import main

    code = main(["gate-check", "--ray", "auto"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("harness gate-check: error: --ray with gate-check spreads whole gates over "
                                        "the nodes of a baseline's hardware class: give --nightly BASELINE")


def test_gate_check_nightly_ray_where_nothing_listens_is_one_line_exit_2(tmp_path, capsys, fakes, closed_port):
    from harness.cli import main

    port = closed_port  # nothing listens there
    code = main(["gate-check", "--nightly", str(tmp_path / "none.json"), "--ray", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err  # probed before the baseline is read
    assert code == 2 and f"--ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in err


@pytest.fixture(scope="module")
def one_run(tmp_path_factory, fakes):
    from harness.cli import main

    out = tmp_path_factory.mktemp("baseline") / "b"
    assert main(["run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1", "--min-time",
                 "0.01", "--min-iters", "3", "--no-isolation", "--out", str(out)]) == 0
    return out / "results.json"


@pytest.mark.parametrize("extra, message", [
    (["--confirm", "1"], "--confirm with --ray: a case the baseline can replay is measured A/B"),
    (["--history", "sqlite:///{tmp}/h.db"], "--history with --baseline --ray"),
])
def test_run_baseline_ray_refuses_what_it_cannot_honour(one_run, tmp_path, capsys, extra, message):
    from harness.cli import main

    extra = [x.format(tmp=tmp_path) for x in extra]
    capsys.readouterr()
    code = main(["run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1", "--baseline",
                 str(one_run), "--ray", "auto", "--out", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "r").exists()  # refused before anything is created


@pytest.mark.parametrize("status, expected", [("lost", 3), ("failed", 1), ("passed", 0)])
def test_run_baseline_ray_exit_a_lost_nodes_case_is_unjudged_never_a_failure(one_run, tmp_path, capsys,
                                                                             monkeypatch, status, expected):
    """The command's side of `run --baseline --ray` (the cluster's: test_gate_ray.py): the matrix's cases handed
    to the gate's Ray driver, every case at the gate's thread count; a row its lost node never finished exits 3
    (not judged), a failed row (drift over tolerance) 1, else the gate's exit."""
    from harness.cli import main
    from harness.execution import gate_ray

    seen = {}

    def fake_ray_gate(config, runs, replay, gates, plans, note=print, forward=None):
        seen.update(plans=[p.case.id for p in plans], threads=(config.measure.threads, forward.measure.threads),
                    workload=forward.workload, out=config.outputs.out_dir)
        (case,) = [p.case for p in plans]
        if status == "lost":
            row = CaseResult(case, "crashed", phase="shard", reason="ray node n lost before this case finished: x")
        else:  # its A/B passed; "failed": its drift check failed (a row of its own status)
            row = _ab_row(case, "pass", {})
            row.status = status
        run = RunResults(run_id="r", started_at="", cases=[row], environment=RunEnvironmentRecord.from_dict(runs[-1].environment))
        out = GateOutcome(run=run, workers_started=None)
        judge_rows(out, plans, run, runs, gates)
        return out

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(gate_ray, "ray_gate", fake_ray_gate)
    out = tmp_path / "r"
    code = main(["run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1", "--baseline",
                 str(one_run), "--ray", "auto", "--threads", "1", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == expected, text
    assert seen == {"plans": ["fake-linear-fake-ok-fp32-b1"], "threads": (1, 1), "workload": "forward", "out": out}
    assert (out / "gate.md").is_file() and (out / "gate.json").is_file()
    if status == "lost":
        assert "not judged: node lost" in text or "node lost" in (out / "gate.md").read_text()


def test_a_stored_figure_part_of_only_cases_the_baseline_lacks_is_new_not_an_error():
    """`run --baseline --ray` whose baseline cases were all re-measured A/B: the other rows (cases the baseline
    lacks) share no case with the baseline, which compare refuses as nothing to gate; here they are `new`."""
    from harness.gating import load_gate_config

    base_case, new_case = _case("a"), _case("a", 2)
    baseline = RunResults(run_id="b", started_at="", cases=[CaseResult(base_case, "passed", samples_ns=[1000] * 5)])
    plans = matrix_plans([GateCase(base_case)], [base_case, new_case])
    rows = [_ab_row(base_case, "pass", {}), CaseResult(new_case, "passed", samples_ns=[900] * 5, details={
        "gate": {"mode": STORED, "why": NOT_IN_BASELINE}})]  # as the gate's driver labels such a row
    out = GateOutcome()
    judge_rows(out, plans, RunResults(run_id="r", started_at="", cases=rows), [baseline], load_gate_config(None, []))
    verdicts = {(r.case_id, r.metric): r for r in out.records}
    assert verdicts[(base_case.id, "latency_median")].verdict.value == "pass"
    record = verdicts[(new_case.id, "case")]
    assert record.verdict.value == "new" and NOT_IN_BASELINE in record.reason and not record.unjudged
    assert out.exit_code(False) == 0
