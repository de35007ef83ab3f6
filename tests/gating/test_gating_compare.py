"""Verdicts from synthetic samples: every verdict kind, effect without evidence, not_comparable reasons."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from gating_synth import CASES, ENV, case_result, make_run, samples

from harness.gating import Gate, GateConfig, Verdict, compare_runs, compare_samples, parse_gate
from harness.gating.compare import comparison_json
from harness.report.verdicts import verdicts_markdown
from harness.results.schema import Block, RunResults
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord

MEDIAN10 = parse_gate("median:10%")


def run_of(*results, env=None):
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict(dict(env or ENV)), config={}, cases=list(results),
                      complete=True)


def verdicts(cmp, metric=None):
    return {(r.case_id, r.metric): r.verdict for r in cmp.records if metric is None or r.metric == metric}


def test_same_distribution_gives_no_regression():
    cmp = compare_runs(make_run(1), make_run(2), GateConfig())
    assert cmp.exit_code == 0 and cmp
    assert not [r for r in cmp.records if r.verdict in (Verdict.REGRESSED, Verdict.BROKE)]
    assert set(verdicts(cmp, "latency_median").values()) <= {Verdict.PASS}


def test_ort_cpu_slowed_25_percent_regresses_exactly_those_cases():
    cmp = compare_runs(make_run(1), make_run(2, scale={"ort-cpu": 1.25}), GateConfig())
    regressed = {r.case_id for r in cmp.records if r.verdict is Verdict.REGRESSED}
    assert regressed == {c.id for c in CASES if c.runtime == "ort-cpu"}
    assert cmp.exit_code == 1 and not cmp
    rec = next(r for r in cmp.records if r.verdict is Verdict.REGRESSED)
    assert 1.15 < rec.ratio < 1.35 and rec.ci_low > 1.05 and rec.p_value < 0.01 and rec.unit == "ms"


def test_faster_is_improved():
    cmp = compare_runs(make_run(1), make_run(2, scale={"torch-cpu": 0.7}), GateConfig())
    improved = {r.case_id for r in cmp.records if r.verdict is Verdict.IMPROVED}
    assert improved == {c.id for c in CASES if c.runtime == "torch-cpu"}
    assert cmp.exit_code == 0


def test_effect_without_evidence_is_noise():
    # 8 very spread samples, current 30% slower: over the threshold, but the interval cannot exclude 1.05
    base = samples(1.0, 8, 1, sigma=0.6)
    cur = [int(v * 1.3) for v in samples(1.0, 8, 2, sigma=0.6)]
    s = compare_samples(base, cur, MEDIAN10, seed=0)
    if s.ratio > 1.1:
        assert s.verdict is Verdict.NOISE and s.ci_low <= 1.05
    # and a forced case: identical spread-out samples shifted by 15% in the point estimate only
    base = [1_000_000, 1_000_000, 2_000_000, 3_000_000, 3_000_000]
    cur = [1_000_000, 1_000_000, 2_400_000, 3_000_000, 3_000_000]
    s = compare_samples(base, cur, MEDIAN10)
    assert s.ratio == pytest.approx(1.2)
    assert s.verdict is Verdict.NOISE, s


def test_small_real_change_under_threshold_passes():
    base = samples(1.0, 2000, 1, sigma=0.01)
    cur = [int(v * 1.04) for v in samples(1.0, 2000, 2, sigma=0.01)]
    s = compare_samples(base, cur, MEDIAN10)
    assert s.verdict is Verdict.PASS and s.ci_low > 1.0  # real, but under the 10% effect


def test_p99_gate_and_per_model_override():
    gates = GateConfig(gates=(MEDIAN10, parse_gate("p99:20%")), model_gates={"mlp": (parse_gate("median:50%"),)})
    cmp = compare_runs(make_run(1, n=2000), make_run(2, n=2000, scale={"ort-cpu": 1.3}), gates)
    v = verdicts(cmp)
    assert v[("resnet18-ort-cpu-fp32-b1", "latency_p99")] is Verdict.REGRESSED
    assert v[("resnet18-ort-cpu-fp32-b1", "latency_median")] is Verdict.REGRESSED
    assert v[("mlp-ort-cpu-fp32-b1", "latency_median")] is Verdict.PASS  # 30% < 50% for mlp
    assert ("mlp-ort-cpu-fp32-b1", "latency_p99") not in v
    typo = compare_runs(make_run(1), make_run(2), GateConfig(model_gates={"reznet18": (MEDIAN10,)}))
    assert any("reznet18" in n for n in typo.notes)


def test_verdicts_are_deterministic():
    a, b = make_run(1, n=30), make_run(2, n=30, scale={"ort-cpu": 1.12})
    x, y = compare_runs(a, b).as_dict(), compare_runs(a, b).as_dict()
    assert x == y


def test_status_verdicts_new_broke_fixed():
    c1, c2, c3, c4, c5 = CASES[:5]
    base = run_of(case_result(c1, samples(1, 50, 1)), case_result(c2, status="error"),
                  case_result(c3, samples(1, 50, 3)), case_result(c4, status="skipped", reason="no GPU"),
                  case_result(c5, samples(1, 50, 5)))
    cur = run_of(case_result(c1, status="crashed"), case_result(c2, samples(1, 50, 2)),
                 case_result(CASES[6], samples(1, 50, 6)), case_result(c4, status="skipped", reason="no GPU"),
                 case_result(c5, status="timeout"))
    cmp = compare_runs(base, cur)
    v = verdicts(cmp, "case")
    assert v[(c1.id, "case")] is Verdict.BROKE
    assert v[(c2.id, "case")] is Verdict.FIXED
    assert v[(c3.id, "case")] is Verdict.NOT_COMPARABLE  # gone from the current run
    assert v[(c4.id, "case")] is Verdict.NOT_COMPARABLE
    assert v[(c5.id, "case")] is Verdict.BROKE
    assert v[(CASES[6].id, "case")] is Verdict.NEW
    assert cmp.exit_code == 1
    assert "crashed" in next(r.reason for r in cmp.records if r.case_id == c1.id)


def test_drift_verdicts():
    c = CASES[0]
    ns = samples(1, 100, 1)
    passed, failed = case_result(c, ns), case_result(c, ns, status="failed", rel_l2=0.5, reason="over tol")
    assert verdicts(compare_runs(run_of(passed), run_of(failed)))[(c.id, "drift")] is Verdict.REGRESSED
    assert verdicts(compare_runs(run_of(failed), run_of(passed)))[(c.id, "drift")] is Verdict.IMPROVED
    assert verdicts(compare_runs(run_of(failed), run_of(failed)))[(c.id, "drift")] is Verdict.PASS
    assert compare_runs(run_of(passed), run_of(failed)).exit_code == 1
    no_drift = compare_runs(run_of(passed), run_of(failed), GateConfig(drift=False))
    assert no_drift.exit_code == 0


@pytest.mark.parametrize("change, reason", [
    ({"model_fingerprint": "other"}, "model fingerprint"),
    ({"timing_scope": "device"}, "timing scope"),
])
def test_case_not_comparable(change, reason):
    c = CASES[0]
    b = case_result(c, samples(1, 50, 1))
    cur = dataclasses.replace(case_result(c, samples(1, 50, 2)), **change)
    rec = compare_runs(run_of(b), run_of(cur)).records
    assert [r.verdict for r in rec] == [Verdict.NOT_COMPARABLE] and reason in rec[0].reason


def test_precision_recipe_not_comparable():
    c = CASES[0]
    b, cur = case_result(c, samples(1, 50, 1)), case_result(c, samples(1, 50, 2))
    cur.precision_recipe = "int8-static-minmax"  # the CaseResult field another branch adds; read by getattr
    rec = compare_runs(run_of(b), run_of(cur)).records
    assert rec[0].verdict is Verdict.NOT_COMPARABLE and "precision recipe" in rec[0].reason


@pytest.mark.parametrize("key, value", [("cpu_model", "Other CPU"), ("cpu_cores_logical", 64),
                                        ("threads", {"harness_threads": 8}),
                                        ("gpus", [{"name": "NVIDIA H100 80GB HBM3"}])])
def test_machine_not_comparable(key, value):
    env = copy.deepcopy(ENV)
    env[key] = value
    cmp = compare_runs(make_run(1), make_run(2, env=env, scale={"ort-cpu": 2.0}))
    assert {r.verdict for r in cmp.records} == {Verdict.NOT_COMPARABLE}
    assert all("different machine" in r.reason and key.rstrip("s").split("_")[0] in r.reason for r in cmp.records)
    # figures from another machine judged nothing here: not a pass (exit 3), unless the user accepts it
    assert cmp.exit_code == 3 and {r.unjudged for r in cmp.records} == {"different machine"}
    assert cmp.unjudged_line().startswith(f"could not judge {len(cmp.records)} of {len(cmp.records)} gated timing")
    assert compare_runs(make_run(1), make_run(2, env=env), allow_unjudged=True).exit_code == 0


def test_library_versions_noted_or_strict():
    env = copy.deepcopy(ENV)
    env["libraries"]["onnxruntime"] = "1.32.0"
    cmp = compare_runs(make_run(1), make_run(2, env=env))
    assert any("onnxruntime 1.31.1 -> 1.32.0" in n for n in cmp.notes)
    assert Verdict.NOT_COMPARABLE not in {r.verdict for r in cmp.records}
    strict = compare_runs(make_run(1), make_run(2, env=env), GateConfig(strict_libraries=True))
    assert {r.verdict for r in strict.records} == {Verdict.NOT_COMPARABLE}


def test_markdown_and_json():
    cmp = compare_runs(make_run(1), make_run(2, scale={"ort-cpu": 1.25}))
    md = verdicts_markdown(cmp)
    assert md.startswith("### gate FAIL: 4 regressed, 4 pass of 8 gated timing rows; other rows: 8 drift pass")
    assert "| ❌ regressed | `mlp-ort-cpu-fp32-b1` | latency_median |" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert lines[2].startswith("| ❌ regressed")  # failing rows first
    compact = verdicts_markdown(cmp, only_changes=True)
    assert " pass |" in md and " pass |" not in compact
    doc = cmp.as_dict()
    assert doc["exit_code"] == 1 and doc["counts"]["regressed"] == 4
    assert set(doc["records"][0]) >= {"case_id", "metric", "verdict", "baseline", "current", "ratio", "ci_low",
                                      "ci_high", "p_value", "reason"}
    assert '"verdict": "regressed"' in comparison_json(cmp)


def test_markdown_escapes_pipes():
    c = dataclasses.replace(CASES[0], model="a|b<x>")
    cmp = compare_runs(run_of(case_result(c, samples(1, 20, 1))), run_of(case_result(c, status="error",
                                                                                      reason="x|y")))
    md = verdicts_markdown(cmp)
    assert "a\\|b&lt;x>" in md and "x\\|y" in md


def test_gate_type():
    assert isinstance(MEDIAN10, Gate) and MEDIAN10.quantile == 0.5


def test_every_gate_metric_is_declared_with_its_unit_and_direction():
    """Verdict records take their metric's unit from harness.metrics; the gate judges times (lower is better)."""
    from harness.gating.gates import STATISTICS
    from harness.metrics import METRICS

    for stat in STATISTICS:
        m = METRICS[parse_gate(f"{stat}:10%").metric]
        assert m.unit == "ms" and m.lower_is_better
    c = CASES[0]
    recs = compare_runs(run_of(case_result(c, samples(1, 100, 1))), run_of(case_result(c, samples(1, 100, 2))),
                        GateConfig(gates=(parse_gate("p99:20%"),))).records
    assert {(r.metric, r.unit) for r in recs} == {("latency_p99", "ms"), ("drift", METRICS["drift"].unit)}


def test_run_sigma_widens_the_bounds_for_between_run_shifts():
    """A whole run 20% slower with a tight spread: within-run evidence says regressed; a machine whose runs
    move by ~10% between themselves (run_sigma 0.1) cannot call it."""
    base = samples(10.0, 30, 1, sigma=0.02)
    cur = [int(v * 1.2) for v in samples(10.0, 30, 2, sigma=0.02)]
    strict = compare_samples(base, cur, MEDIAN10)
    assert strict.verdict is Verdict.REGRESSED
    wide = compare_samples(base, cur, MEDIAN10, run_sigma=0.1)
    assert wide.verdict is Verdict.NOISE and wide.ci_low < strict.ci_low and wide.ci_high > strict.ci_high
    big = [int(v * 2.0) for v in samples(10.0, 30, 2, sigma=0.02)]
    assert compare_samples(base, big, MEDIAN10, run_sigma=0.1).verdict is Verdict.REGRESSED
    cmp = compare_runs(make_run(1), make_run(2, scale={"ort-cpu": 1.25}), GateConfig(run_sigma=0.02))
    assert {r.case_id for r in cmp.records if r.verdict is Verdict.REGRESSED} == {
        c.id for c in CASES if c.runtime == "ort-cpu"}
    assert "run_sigma 0.02" in cmp.gates.describe()


def test_zero_samples_stay_finite():
    s = compare_samples([0, 0, 0, 1], [0, 0, 0, 1], MEDIAN10)
    assert s.verdict is Verdict.PASS and s.ratio == 1.0


def _blocked(case, medians_us, per_block=400, seed=0):
    """A case measured in blocks (--repeats) whose block medians differ, as fresh sessions do on a shared VM."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ns = [int(v) for m in medians_us for v in rng.normal(m * 1000, m * 20, per_block)]
    return case_result(case, ns, blocks=[Block.measured(ns[i:i + per_block], "round" if i else "case")
                                         for i in range(0, len(ns), per_block)])


def test_the_least_disturbed_block_decides_so_a_slow_episode_is_not_a_regression():
    """Interference adds time in episodes: two of the current run's blocks fell into one (+50%), one did not.
    The best block says the code is as fast as before; pooling every sample would have called it regressed."""
    from harness.gating.compare import block_sigma, case_blocks
    from harness.results.schema import CaseId

    case = CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu")
    gates = GateConfig(gates=(MEDIAN10,))
    base, cur = _blocked(case, [30, 40, 33]), _blocked(case, [45, 30.5, 46], seed=1)
    assert [b.size for b in case_blocks(base)] == [400, 400, 400] and block_sigma(base) > 0.1
    rec = next(r for r in compare_runs(run_of(base), run_of(cur), gates).records if r.metric == "latency_median")
    assert rec.verdict is Verdict.PASS and "best of 3/3 blocks" in rec.reason
    assert "blocks disagree (sd of log block medians): baseline 0.15, current 0.23" in rec.reason
    assert rec.baseline == pytest.approx(0.030, rel=0.01) and rec.current == pytest.approx(0.0305, rel=0.01)
    # the same samples without block information (one block each): the pooled median moved by 40%+
    flat = [dataclasses.replace(r, blocks=[]) for r in (base, cur)]
    assert verdicts(compare_runs(run_of(flat[0]), run_of(flat[1]), gates), "latency_median") == {
        (case.id, "latency_median"): Verdict.REGRESSED}
    # a real 25% slowdown shows in every block, the best one included: regressed
    b2, c2 = _blocked(case, [100, 130, 101]), _blocked(case, [125, 160, 126], seed=2)
    assert verdicts(compare_runs(run_of(b2), run_of(c2), gates), "latency_median") == {
        (case.id, "latency_median"): Verdict.REGRESSED}


def test_blocks_that_do_not_add_up_are_read_as_one_block():
    from harness.gating.compare import case_blocks
    from harness.results.schema import CaseId

    r = _blocked(CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu"), [30, 40])
    assert len(case_blocks(r)) == 2
    r.blocks[1] = dataclasses.replace(r.blocks[1], samples=399)
    assert len(case_blocks(r)) == 1 and case_blocks(r)[0].size == 800


def test_compare_samples_takes_flat_samples_or_blocks():
    flat = samples(10.0, 300, 1)
    one = compare_samples(flat, flat, MEDIAN10)
    assert one.verdict is Verdict.PASS and one.ratio == 1.0 and "blocks" not in one.reason
    blocks = [flat[:100], flat[100:200], flat[200:]]
    s = compare_samples(blocks, blocks, MEDIAN10)
    assert s.ratio == 1.0 and "best of 3/3 blocks" in s.reason
    with pytest.raises(ValueError):
        compare_samples([], flat, MEDIAN10)


def _drifting_runs(n_runs, drift, seed=0, case=None, scale=1.0):
    """Runs of one case whose level moves between runs (lognormal, sd `drift`), three tight blocks each."""
    import numpy as np

    from harness.results.schema import CaseId

    case = case or CaseId("resnet18", "ort-cpu", "fp32", 1, None, "cpu")
    rng = np.random.default_rng(seed)
    runs = []
    for k in range(n_runs):
        level = 20.0 * scale * float(np.exp(rng.normal(0.0, drift)))
        runs.append(run_of(_blocked(case, [level, level * 1.01, level * 1.02], seed=seed * 100 + k)))
    return runs


def test_a_multi_run_baseline_measures_the_spread_between_its_runs():
    """Runs that drift by ~5% between themselves: against one baseline run a 12% drift looks like a
    regression (here: the fastest of them); against the median of five the gate measures the drift and calls
    it noise, while a real
    30% slowdown is still regressed."""
    from harness.gating.compare import compare_samples

    history = _drifting_runs(5, 0.05, seed=4)
    levels = sorted(r.cases[0].latency.p50_ms for r in history)
    current = _drifting_runs(1, 0.0, seed=9, scale=1.12 * levels[2] * 1000 / 20.0)[0]
    gates = GateConfig(gates=(MEDIAN10,))
    fastest = min(history, key=lambda r: r.cases[0].latency.p50_ms)
    single = compare_runs(fastest, current, gates)
    assert [r.verdict for r in single.records if r.metric == "latency_median"] == [Verdict.REGRESSED]
    multi = compare_runs(history, current, gates)
    [rec] = [r for r in multi.records if r.metric == "latency_median"]
    assert rec.verdict is Verdict.NOISE and "median of 5 baseline runs" in rec.reason
    assert any("baseline of 5 runs" in n for n in multi.notes)
    slow = _drifting_runs(1, 0.0, seed=9, scale=1.3 * levels[2] * 1000 / 20.0)[0]
    assert [r.verdict for r in compare_runs(history, slow, gates).records
            if r.metric == "latency_median"] == [Verdict.REGRESSED]
    # the measured spread never lowers the configured one
    from harness.gating.compare import case_blocks

    b = [case_blocks(r.cases[0]) for r in history]
    s = compare_samples(b[-1], case_blocks(current.cases[0]), MEDIAN10, run_sigma=0.5, history=b[:-1])
    assert s.sigma == 0.5 and s.verdict is Verdict.NOISE


def test_multi_run_baseline_drops_runs_of_another_machine_and_mismatched_cases():
    history = _drifting_runs(3, 0.01, seed=5)
    history[0].environment.cpu_model = "Other CPU"
    history[1].cases[0].model_fingerprint = "fp-old"
    current = _drifting_runs(1, 0.0, seed=6)[0]
    cmp = compare_runs(history, current, GateConfig(gates=(MEDIAN10,)))
    assert any("left out: a different machine" in n for n in cmp.notes)
    [rec] = [r for r in cmp.records if r.metric == "latency_median"]
    assert "baseline runs" not in rec.reason  # only the newest run was comparable: a one-run comparison


def test_a_contended_measurement_is_inconclusive_never_regressed_or_pass():
    """A planted load doubled the current run's figures: the samples alone say `regressed`; the case's
    contention makes it `inconclusive (contended)` with the cause, and the gate does not fail on it. A quiet
    pair of the same case is judged as before."""
    base = make_run(1)
    slow = make_run(2, scale={"ort-cpu": 2.0})
    cause = "2 thread(s), 1.0 core(s) free: the worker's threads waited 61% of their runnable time for a CPU"
    for c in slow.cases:
        if c.case.runtime == "ort-cpu":
            c.contention = CaseContentionRecord(contended=True, cause=cause, blocks=1, contended_blocks=1)
    cmp = compare_runs(base, slow, GateConfig())
    timing = [r for r in cmp.records if r.timing]
    ort = [r for r in timing if "ort-cpu" in r.case_id]
    assert ort and all(r.verdict is Verdict.INCONCLUSIVE for r in ort)
    assert all(r.reason.startswith(f"inconclusive (contended): current: {cause}") for r in ort)
    assert all(r.verdict is Verdict.PASS for r in timing if "ort-cpu" not in r.case_id)
    # not judged is not a pass: exit 3 and one line naming the rows (0 only when the user accepts it)
    assert cmp.exit_code == 3 and all(r.unjudged == "contended" for r in ort)
    line = cmp.unjudged_line()
    assert line.startswith(f"could not judge {len(ort)} of {len(timing)} gated timing rows (contended: ")
    assert all(r.case_id in line for r in ort) and "exit 3" in line
    assert "inconclusive" in verdicts_markdown(cmp) and "COULD NOT JUDGE" in verdicts_markdown(cmp)
    assert compare_runs(base, slow, GateConfig(), allow_unjudged=True).exit_code == 0


# ------------------------------------------------------------------ a percentile from too few samples
def test_a_p99_gate_on_fewer_than_100_samples_is_inconclusive_not_judged():
    """Five times slower in every sample, but 60 samples per run: the report calls the p99 n/a, so the gate does
    not judge it (neither regressed nor pass), with the reason; the median gate on the same samples judges."""
    p99 = parse_gate("p99:20%")
    base, cur = samples(1.0, 60, 1), [v * 5 for v in samples(1.0, 60, 2)]
    s = compare_samples(base, cur, p99)
    assert s.verdict is Verdict.INCONCLUSIVE
    assert "too few samples" in s.reason and "needs 100 samples" in s.reason and "baseline 60, current 60" in s.reason
    assert compare_samples(base, cur, MEDIAN10).verdict is Verdict.REGRESSED
    many_b, many_c = samples(1.0, 150, 1), [v * 5 for v in samples(1.0, 150, 2)]
    assert compare_samples(many_b, many_c, p99).verdict is Verdict.REGRESSED


def test_the_gated_block_decides_the_sample_count():
    """Three blocks of 50 hold 150 samples, but the gate reads one block: p99 from 50 is not judged."""
    p99 = parse_gate("p99:20%")
    base = [samples(1.0, 50, s) for s in (1, 2, 3)]
    cur = [[v * 5 for v in samples(1.0, 50, s)] for s in (4, 5, 6)]
    assert compare_samples(base, cur, p99).verdict is Verdict.INCONCLUSIVE


def test_compare_runs_records_the_inconclusive_p99_and_exits_unjudged():
    cases = CASES[:1]
    a = run_of(case_result(cases[0], samples(1.0, 40, 1)))
    b = run_of(case_result(cases[0], [v * 3 for v in samples(1.0, 40, 2)]))
    cmp = compare_runs(a, b, GateConfig(gates=(parse_gate("p99:20%"),)))
    rec = next(r for r in cmp.records if r.metric == "latency_p99")
    assert rec.verdict is Verdict.INCONCLUSIVE and "not judged" in rec.reason
    assert cmp.exit_code == 3 and cmp.counts()["inconclusive"] == 1 and rec.unjudged == "too few samples"
