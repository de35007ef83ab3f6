"""Fleet statistics (harness.gating.fleet) on simulated fleets: seeded trials for power and false flags, classes,
contention, lost and noisy nodes."""

from __future__ import annotations

import numpy as np
import pytest

from fleet_synth import CASES, fleet, node_run
from harness.gating.fleet import (
    DEFAULT_FALSE_FLAG_RATE, FAST, FIGURES, LOST, NOISY, NOT_JUDGED, OK, SLOW, WRONG, NodeRun, _statistic, critical_z,
    place_fleet)


def test_the_critical_z_holds_its_false_flag_rate_on_fresh_identical_fleets():
    for nodes, blocks in ((4, 3), (8, 3), (4, 5)):
        k = critical_z(nodes, blocks, 0.01)
        z = _statistic(np.random.default_rng(7).normal(3.0, 0.02, (40_000, nodes, blocks)))  # scale-free
        assert 0.006 <= float(np.mean(np.abs(z) > k)) <= 0.014, (nodes, blocks)


def test_a_node_ten_percent_slower_is_found_in_95_percent_of_trials():
    rng = np.random.default_rng(54)
    trials = 60
    found = sum(place_fleet(fleet(rng, 4, {2: 1.10}), CASES).nodes["n2"].placement == SLOW for _ in range(trials))
    assert found >= 0.95 * trials


def test_an_identical_fleet_flags_no_node_in_99_percent_of_node_trials():
    rng = np.random.default_rng(55)
    trials, n = 100, 4
    flagged = sum(p.placement != OK for _ in range(trials)
                  for p in place_fleet(fleet(rng, n), CASES).nodes.values())
    assert flagged <= 0.01 * trials * n


def test_the_statistical_basis_is_stated_and_the_band_holds_the_median():
    j = place_fleet(fleet(np.random.default_rng(3), 5, {0: 1.3}), CASES)
    slow = j.nodes["n0"]
    assert slow.placement == SLOW and not slow.qualified
    assert "from the median of 4 peers" in slow.reasons[0] and "critical" in slow.reasons[0]
    row = next(r for r in j.rows if r.figure == "p50_ms")
    assert row.band_low < row.median < row.band_high and row.peers == 4 and row.k > 2
    n0 = next(f for f in row.nodes if f.node == "n0")
    assert n0.deviation_pct == pytest.approx(30, abs=5) and n0.low <= n0.value <= n0.high and n0.blocks == 3
    assert all(j.nodes[f"n{i}"].placement == OK for i in range(1, 5))
    assert j.as_dict()["nodes"]["n0"]["placement"] == "slow" and j.false_flag_rate == DEFAULT_FALSE_FLAG_RATE


def test_a_fast_node_is_suspicious_and_a_contended_slow_one_is_not_judged():
    rng = np.random.default_rng(4)
    nodes = fleet(rng, 4, {0: 0.7})
    nodes.append(node_run("hot", rng, factor=1.4, contended=True))
    j = place_fleet(nodes, CASES)
    assert j.nodes["n0"].placement == FAST and "suspicious" in j.nodes["n0"].reasons[0]
    assert j.nodes["hot"].placement == NOT_JUDGED and "contended" in j.nodes["hot"].reasons[0]


def test_nodes_are_compared_only_within_their_hardware_class():
    rng = np.random.default_rng(5)
    nodes = fleet(rng, 3) + [node_run(f"b{i}", rng, factor=2.0, fingerprint="fp-b") for i in range(3)]
    j = place_fleet(nodes, CASES)
    assert {p.placement for p in j.nodes.values()} == {OK}
    assert {r.hardware_class for r in j.rows} == {"fp-a", "fp-b"}
    lone = place_fleet(fleet(rng, 3) + [node_run("odd", rng, fingerprint="fp-c")], CASES)
    assert lone.nodes["odd"].placement == NOT_JUDGED and "0 peer(s)" in lone.nodes["odd"].reasons[0]


def test_lost_wrong_and_noisy_nodes():
    rng = np.random.default_rng(6)
    nodes = fleet(rng, 4)
    nodes.append(NodeRun("gone", None, lost="ray node gone-1234 died: ActorDiedError"))
    nodes[1].wrong.append("m-rt-fp32-b1: output y[3] = 2.5 differs from golden 2.0 (|diff| 0.5) in 3 of 3 checks")
    nodes.append(node_run("jitter", rng, noisy=6.0))
    j = place_fleet(nodes, CASES)
    assert j.nodes["gone"].placement == LOST and "ActorDiedError" in j.nodes["gone"].reasons[0]
    assert j.nodes["n1"].placement == WRONG and "y[3]" in j.nodes["n1"].reasons[0]
    jitter = j.nodes["jitter"]  # its tail is slow too (p99): the worst placement wins, every reason is kept
    assert jitter.placement in (SLOW, NOISY) and any(r.startswith(f"{CASES[0].id}: noisy") for r in jitter.reasons)
    calm = place_fleet(fleet(rng, 4) + [node_run("jitter", rng, noisy=5.0)], CASES, figures=FIGURES[:1])
    assert calm.nodes["jitter"].placement == NOISY
    assert {j.nodes[f"n{i}"].placement for i in (0, 2, 3)} == {OK}


def test_within_pct_is_the_practical_threshold():
    nodes = fleet(np.random.default_rng(8), 6, {0: 1.06}, block_sd=0.002, sample_sd=0.01, node_sd=0.0)
    assert place_fleet(nodes, CASES).nodes["n0"].placement == SLOW  # 6% > the default 5%
    assert place_fleet(nodes, CASES, within_pct=10).nodes["n0"].placement == OK


def test_the_fleet_certificate_node_verdicts_and_its_rendering(tmp_path):
    from types import SimpleNamespace

    from harness.gating.fleet import FleetCertificate, fleet_settings
    from harness.gating.qualify import SpecError
    from harness.report.fleet_certificate import fleet_text, write_fleet_certificate

    rng = np.random.default_rng(9)
    nodes = fleet(rng, 4, {0: 1.5}) + [NodeRun("gone", None, lost="ray node gone lost: ActorDiedError")]
    spec = SimpleNamespace(name="s", path=tmp_path / "s.toml", sha256="ab" * 32)
    ok = SimpleNamespace(verdict="PASS", requirements=[SimpleNamespace(passed=True, status="PASS")],
                         results_sha256="cd" * 32)
    unjudged = SimpleNamespace(verdict="INCONCLUSIVE", requirements=[SimpleNamespace(passed=False,
                                                                                     status="INCONCLUSIVE")],
                               results_sha256="ef" * 32)
    certs = {"n0": ok, "n1": ok, "n2": ok, "n3": unjudged, "gone": None}
    cert = FleetCertificate(spec, certs, place_fleet(nodes, CASES))
    assert [cert.node_verdict(n) for n in ("n0", "n1", "n3", "gone")] == [
        "NOT QUALIFIED", "QUALIFIED", "NOT JUDGED", "NOT QUALIFIED"]
    assert cert.verdict == "FAIL" and cert.exit_code == 1
    text = fleet_text(cert)
    assert "NOT QUALIFIED n0" in text and "fleet FAIL: 2 not qualified, 2 qualified, 1 not judged of 5" in text
    paths = write_fleet_certificate(cert, tmp_path)
    html = paths["fleet_certificate_html"].read_text()
    assert "ActorDiedError" in html and html.count("<td><code>n0</code>") == 1 + 2 * len(CASES)
    healthy = FleetCertificate(spec, {f"n{i}": ok for i in range(4)}, place_fleet(fleet(rng, 4), CASES))
    assert healthy.verdict == "PASS" and healthy.exit_code == 0
    # a node whose own certificate fails (a burn-in trend) is NOT QUALIFIED with the failed row as a reason
    warm = SimpleNamespace(verdict="FAIL", results_sha256="aa" * 32, requirements=[
        SimpleNamespace(passed=True, status="PASS"),
        SimpleNamespace(passed=False, status="FAIL", case_id="c", requirement="burn_in_stable",
                        reason="latency p50 (ms): +40.0% ...: a trend, worse over the burn-in")])
    trend = {"case_id": "c", "trends": [{"found": True, "text": "latency p50 (ms): +40.0%: a trend, worse"},
                                        {"found": False, "text": "host memory peak (MB): no trend"}]}
    burnt = FleetCertificate(spec, {"n0": warm, **{f"n{i}": ok for i in range(1, 4)}},
                             place_fleet(fleet(rng, 4), CASES), burn_in={"n0": {"rounds": 6, "trends": [trend]}})
    n0 = burnt.as_dict()["nodes"]["n0"]
    assert burnt.node_verdict("n0") == "NOT QUALIFIED" and n0["burn_in"] == {
        "rounds": 6, "trends": ["c: latency p50 (ms): +40.0%: a trend, worse"]}
    assert n0["reasons"][-1] == "spec: c burn_in_stable: latency p50 (ms): +40.0% ...: a trend, worse over the burn-in"
    assert "spec: c burn_in_stable" in fleet_text(burnt)
    (tmp_path / "s.toml").write_text("[fleet]\nwithin_pct = 8\n")
    assert fleet_settings(tmp_path / "s.toml") == {"within_pct": 8.0}
    for bad, msg in (("within_pct = 0", "must be above 0"), ("spread = 1", "unknown key 'spread'"),
                     ("false_flag_rate = 0.7", "between 0 and 0.5"), ("within_pct = 'x'", "is not a number")):
        (tmp_path / "s.toml").write_text(f"[fleet]\n{bad}\n")
        with pytest.raises(SpecError, match=msg):
            fleet_settings(tmp_path / "s.toml")


def test_the_node_selector_names_nodes_by_label_address_or_id():
    from harness.errors import UsageError
    from harness.execution.fleet_run import select_nodes
    from harness.execution.ray_shards import Node

    nodes = [Node("a1" * 8, "10.0.0.1", {"CPU": 2}), Node("b2" * 8, "10.0.0.2", {"CPU": 2}),
             Node("c3" * 8, "10.0.1.9", {"CPU": 2})]
    assert select_nodes(nodes, None) == nodes
    assert [n.address for n in select_nodes(nodes, "10.0.0.*")] == ["10.0.0.1", "10.0.0.2"]
    assert [n.address for n in select_nodes(nodes, "c3c3*, 10.0.0.2-b2b2b2b2")] == ["10.0.0.2", "10.0.1.9"]
    with pytest.raises(UsageError, match="--nodes 10.9.*: no alive node matches"):
        select_nodes(nodes, "10.9.*")
