"""Never silent: a deciding command that did not judge a gated row says how many and which in its last line and
exits 3 (harness.gating.unjudged), unless --allow-unjudged; a regression still exits 1. Synthetic runs, fake
bisect steps, A/B blocks with known ratios."""

from __future__ import annotations

import dataclasses
import json
import re

import math

import numpy as np
import pytest
from gating_synth import CASES, make_run

from harness.cli import main
from harness.execution.bisect_run import bisect, judge
from harness.gating import GateConfig, VerdictRecord, compare_runs
from harness.gating.ab import (
    DETECT_MAX_PAIRS,
    DETECT_PILOT_PAIRS,
    ab_records,
    detect_line,
    detectable_slowdown,
    judge_ab,
    log_ratio_spread,
    min_pairs,
    next_pairs,
    pair_log_ratios,
    pairs_for_detect,
)
from harness.gating.baseline import save_baseline
from harness.gating.unjudged import decide_exit, gate_headline, unjudged_line, verdict_rows
from harness.gating.verdicts import EXIT_CLEAN, EXIT_REGRESSION, EXIT_UNJUDGED, Verdict
from harness.report.render import render_markdown
from harness.report.verdicts import verdict_dicts
from harness.results import write_results
from harness.results.schema import AbBlock, AbResult, CaseResult
from harness.results.stored import CaseContentionRecord
from harness.results.stored import BlockContention

CAUSE = "2 thread(s), 1.0 core(s) free: the worker's threads waited 45% of their runnable time for a CPU"


def contended(run, runtimes=("torch-cpu", "ort-cpu")):
    for c in run.cases:
        if c.case.runtime in runtimes:
            c.contention = CaseContentionRecord(contended=True, cause=CAUSE, blocks=1, contended_blocks=1)
    return run


# ------------------------------------------------------------------ the shared line and exit status
def test_the_line_counts_names_and_groups_by_cause():
    case = CASES[0]
    rows = [VerdictRecord(case, "latency_median", Verdict.PASS, timing=True),
            VerdictRecord(CASES[1], "latency_median", Verdict.INCONCLUSIVE, timing=True, unjudged="contended"),
            VerdictRecord(CASES[2], "latency_p99", Verdict.INCONCLUSIVE, timing=True, unjudged="too few samples"),
            VerdictRecord(CASES[3], "case", Verdict.NOT_COMPARABLE, unjudged="model changed"),
            VerdictRecord(CASES[4], "drift", Verdict.PASS)]  # not a gated timing row: not counted
    line = unjudged_line(rows)
    assert line == (f"could not judge 3 of 4 gated timing rows (contended: {CASES[1].id} latency_median; too few "
                    f"samples: {CASES[2].id} latency_p99; model changed: {CASES[3].id}): exit 3, not a pass "
                    "(--allow-unjudged accepts it)")
    assert "\n" not in line
    assert decide_exit(rows) == EXIT_UNJUDGED and decide_exit(rows, allow_unjudged=True) == EXIT_CLEAN
    assert "accepted (--allow-unjudged): exit 0" in unjudged_line(rows, allow_unjudged=True)
    regressed = [*rows, VerdictRecord(CASES[5], "latency_median", Verdict.REGRESSED, timing=True)]
    assert decide_exit(regressed) == decide_exit(regressed, True) == EXIT_REGRESSION
    assert unjudged_line(regressed).endswith("the regression decides the exit status (1)")
    judged = [rows[0], rows[4]]
    assert unjudged_line(judged) is None and decide_exit(judged) == EXIT_CLEAN
    # an inconclusive row that named no cause is still not judged
    bare = [VerdictRecord(case, "latency_median", Verdict.INCONCLUSIVE, timing=True)]
    assert decide_exit(bare) == EXIT_UNJUDGED and "(inconclusive: " in unjudged_line(bare)


def test_many_rows_of_one_cause_are_counted_not_all_named():
    rows = [VerdictRecord(c, m, Verdict.INCONCLUSIVE, timing=True, unjudged="contended")
            for c in CASES for m in ("latency_median", "latency_p99")]
    line = unjudged_line(rows)
    assert line.startswith("could not judge 16 of 16 gated timing rows (contended: ") and "and 10 more)" in line


# ------------------------------------------------------------------ harness compare
def test_an_all_inconclusive_compare_exits_3_and_says_so_last(tmp_path, capsys):
    """The loaded-machine case of issue 39: every timing row contended -> `gate OK` and exit 0 before; now the
    last line names the rows and the exit status is 3; --allow-unjudged exits 0 and still says it. Both runs
    contended: nothing one-sided can be said."""
    a = write_results(contended(make_run(1)), tmp_path / "a")
    loaded = write_results(contended(make_run(2, scale={"ort-cpu": 1.4})), tmp_path / "loaded")
    md = tmp_path / "v.md"
    assert main(["compare", str(a), str(loaded), "--markdown", str(md)]) == EXIT_UNJUDGED
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("gate COULD NOT JUDGE: 8 not judged (contended: 8) of 8 gated timing rows; "
                                "other rows: 8 drift pass"), lines[-2]
    assert lines[-1].startswith("could not judge 8 of 8 gated timing rows (contended: mlp-torch-cpu-fp32-b1 "
                                "latency_median, ") and lines[-1].endswith("exit 3, not a pass (--allow-unjudged "
                                                                           "accepts it)")
    assert "gate OK" not in "\n".join(lines)
    text = md.read_text()
    assert text.startswith("### gate COULD NOT JUDGE: ") and "**could not judge 8 of 8" in text
    assert main(["compare", str(a), str(loaded), "--allow-unjudged"]) == EXIT_CLEAN
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("could not judge 8 of 8") and "accepted (--allow-unjudged)" in last


def test_a_regression_beside_inconclusive_rows_exits_1(tmp_path, capsys):
    a = write_results(contended(make_run(1), runtimes=("torch-cpu",)), tmp_path / "a")
    both = write_results(contended(make_run(2, scale={"ort-cpu": 1.4}), runtimes=("torch-cpu",)), tmp_path / "b")
    assert main(["compare", str(a), str(both)]) == EXIT_REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("gate FAIL: ") and out[-1].startswith("could not judge 4 of 8 gated timing rows")
    assert out[-1].endswith("the regression decides the exit status (1)")
    assert main(["compare", str(a), str(both), "--allow-unjudged"]) == EXIT_REGRESSION
    capsys.readouterr()


def test_a_changed_model_is_not_judged_by_stored_figures(tmp_path, capsys):
    """Issue 39: a model that does 40% more work under the same path gave `not_comparable ... model fingerprint`
    and `gate OK`, exit 0. It is counted as unjudged: exit 3, named in the line."""
    base = make_run(1)
    cur = make_run(2, scale={"ort-cpu": 1.4})
    for c in cur.cases:
        if c.case.model == "mlp":
            c.model_fingerprint = "fp-mlp-v2"
    cmp = compare_runs(base, cur)
    changed = [r for r in cmp.records if r.unjudged == "model changed"]
    assert len(changed) == 4 and all(r.verdict is Verdict.NOT_COMPARABLE for r in changed)
    assert all("model fingerprint fp-mlp vs fp-mlp-v2" in r.reason for r in changed)
    # not judged, but both models' figures and their ratio are shown (ort-cpu did 1.4x the work)
    assert all(r.metric == "latency_median" and r.baseline and r.current and r.ci_low for r in changed)
    assert {round(r.ratio, 1) for r in changed if r.case.runtime == "ort-cpu"} == {1.4}
    assert cmp.exit_code == EXIT_REGRESSION  # resnet18 ort-cpu regressed: that still wins
    quiet = compare_runs(base, make_run(2, cases=CASES), allow_unjudged=False)
    assert quiet.exit_code == EXIT_CLEAN
    only_model = make_run(2)
    for c in only_model.cases:
        c.model_fingerprint = "fp-changed"
    a, b = write_results(base, tmp_path / "a"), write_results(only_model, tmp_path / "b")
    assert main(["compare", str(a), str(b)]) == EXIT_UNJUDGED
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("could not judge 8 of 8 gated timing rows (model changed: mlp-torch-cpu-fp32-b1 "
                           "latency_median, ")


def test_the_ci_summary_says_it_in_its_first_line():
    base, loaded = make_run(1), contended(make_run(2), runtimes=("ort-cpu",))
    cmp = compare_runs(base, loaded)
    md = render_markdown(loaded, verdict_dicts(cmp))
    first = md.splitlines()[0]
    # only tonight contended: its passes stand (the quiet figure can only be better)
    assert first == ("**gate OK: 8 pass of 8 gated timing rows; other rows: 8 drift pass**"), first
    both = compare_runs(contended(make_run(1), runtimes=("ort-cpu",)), loaded)
    assert render_markdown(loaded, verdict_dicts(both)).splitlines()[0] == (
        "**gate COULD NOT JUDGE: 4 pass, 4 not judged (contended: 4) of 8 gated timing rows; other rows: 8 drift "
        "pass**")
    clean = compare_runs(base, make_run(2))
    assert render_markdown(make_run(2), verdict_dicts(clean)).splitlines()[0] == (
        "**gate OK: 8 pass of 8 gated timing rows; other rows: 8 drift pass**")
    slow = compare_runs(base, make_run(2, scale={"ort-cpu": 1.4}))
    assert render_markdown(make_run(2), verdict_dicts(slow)).splitlines()[0].startswith(
        "**gate FAIL: 4 regressed, 4 pass of 8 gated timing rows")
    assert gate_headline(verdict_rows(cmp.as_dict()["records"])) == gate_headline(cmp.records)
    assert render_markdown(make_run(2)).startswith("## Inference harness")  # no gate: no gate line


def test_baseline_save_warns_about_contended_and_noisy_figures(tmp_path):
    run = contended(make_run(1), runtimes=("ort-cpu",))
    run.cases[0].latency = dataclasses.replace(run.cases[0].latency, noisy=True)  # mlp torch-cpu b1
    path = write_results(run, tmp_path / "r")
    warned = []
    stored = save_baseline(str(path), "main", tmp_path / "b", warn=warned.append).path
    assert stored.exists() and len(warned) == 1  # one line per run, and the figures are stored all the same
    assert warned[0].startswith(f"warning: {path}: stored figures of 4 contended (mlp-ort-cpu-fp32-b1, ")
    assert "and 1 noisy (mlp-torch-cpu-fp32-b1) of 8 measured case(s)" in warned[0]
    quiet = write_results(make_run(2), tmp_path / "q")
    warned.clear()
    save_baseline(str(quiet), "main", tmp_path / "b", warn=warned.append)
    assert warned == []


def test_baseline_save_prints_the_warning_on_stderr(tmp_path, capsys):
    path = write_results(contended(make_run(1)), tmp_path / "r")
    assert main(["baseline", "save", str(path), "--name", "x", "--dir", str(tmp_path / "b")]) == 0
    captured = capsys.readouterr()
    assert "saved baseline 'x'" in captured.out
    assert len(captured.err.splitlines()) == 1 and "stored figures of 8 contended" in captured.err


def test_baseline_ls_warns_per_stored_run_with_contended_figures(tmp_path, capsys):
    """The README promised it; `ls` printed nothing. One indented line per stored run that holds contended or
    noisy figures, after the baseline's line; a quiet run none."""
    hot = write_results(contended(make_run(1)), tmp_path / "r")
    quiet = write_results(make_run(2), tmp_path / "q")
    assert main(["baseline", "save", str(hot), str(quiet), "--name", "x", "--dir", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["baseline", "ls", "--dir", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("x ") and len(out) == 2
    assert out[1].startswith("  warning: x: run synthetic-1: stored figures of 8 contended")
    assert main(["baseline", "ls", "--json", "--dir", str(tmp_path / "b")]) == 0
    import json

    [info] = json.loads(capsys.readouterr().out)
    assert len(info["warnings"]) == 1


# ------------------------------------------------------------------ bisect
def _step(ms, contention=None):
    from gating_synth import case_result, samples

    return case_result(CASES[0], samples(ms, 200, int(ms * 1000)), contention=contention)


def test_an_unjudged_step_is_could_not_judge_never_same():
    """Issue 39: bisect measured 15.22 -> 19.61 ms (+29%) while contended, called it `same` and ended `no change`.
    A contended end is `could not judge`, and the bisect ends `could not judge between A and B`."""
    gates = GateConfig()
    changed, why = judge(_step(15.22), _step(19.61, CaseContentionRecord(contended=True, cause=CAUSE)), gates)
    # the step's label says "could not judge"; the reason, the cause and the estimate the figures give
    assert changed is None and re.fullmatch(r"latency_median contended \(x1\.\d{3} \[1\.\d{3}, 1\.\d{3}\]\)", why), why
    assert judge(_step(15.22), _step(15.25), gates)[0] is False
    assert judge(_step(15.22), _step(19.61), gates)[0] is True

    versions = ["1.28.0", "1.29.0", "1.30.0", "1.31.0", "1.31.1"]
    figures = {"1.28.0": _step(15.22), "1.31.1": _step(19.61, CaseContentionRecord(contended=True, cause=CAUSE))}
    found = bisect(versions, figures.__getitem__, lambda a, b: judge(a, b, gates), "ort-cpu")
    assert found.first_changed is None and found.last_same is None
    assert found.unjudged == ("1.28.0", "1.31.1")
    lines = found.lines()
    assert "could not judge: latency_median contended" in lines[-2] and "judge: could not" not in lines[-2]
    assert lines[-1].startswith("result: could not judge between 1.28.0 and 1.31.1")
    assert not any("no change" in line.split("(")[0] for line in lines)


def test_a_middle_step_that_cannot_be_judged_stops_the_search_where_it_stands():
    gates = GateConfig()
    versions = [f"1.{i}.0" for i in range(9)]
    log = []

    def measure(v):
        log.append(v)
        i = versions.index(v)
        if i == 4:  # slower, but contended: contention could have made it so
            return _step(19.6, CaseContentionRecord(contended=True, cause=CAUSE))
        return _step(15.22 if i < 6 else 19.61)

    found = bisect(versions, measure, lambda a, b: judge(a, b, gates))
    assert log == ["1.0.0", "1.8.0", "1.4.0"] and found.unjudged == ("1.0.0", "1.8.0")
    assert found.lines()[-1].startswith("result: could not judge between 1.0.0 and 1.8.0")
    assert found.steps[-1].label == "could not judge"
    # a contended step that still reads like the reference is like it (its quiet figure can only be better)
    ok = judge(_step(15.22), _step(15.3, CaseContentionRecord(contended=True, cause=CAUSE)), gates)
    assert ok[0] is False, ok


# ------------------------------------------------------------------ harness ab's records
def _blocks(ratio, pairs=10, noise=0.01, seed=0, contended_pairs=()):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(pairs):
        drift = 1 + 0.3 * np.sin(i)
        for side, r in (("a", 1.0), ("b", ratio)):
            samples = (1_000_000 * drift * r * (1 + noise * rng.standard_normal(40))).astype(int).tolist()
            c = BlockContention(contended=True, cause=CAUSE) if i in contended_pairs else None
            out.append(AbBlock(side, i, samples, c))
    return out


def _ab_case(blocks, status="passed"):
    v = judge_ab(blocks)
    ab = AbResult("a.onnx", "b.onnx", CASES[1], blocks=blocks, verdict=v.verdict.value, reason=v.reason,
                  confidence=0.99, min_effect=0.02, pairs_used=v.pairs_used)
    return CaseResult(CASES[0], status, samples_ns=[1], ab=ab)


def test_ab_inconclusive_is_unjudged_and_a_crashed_case_broke():
    overwhelming = ab_records([_ab_case(_blocks(1.4, pairs=10, contended_pairs=range(10)))])
    assert overwhelming[0].verdict is Verdict.REGRESSED and "judged under load" in overwhelming[0].reason
    loaded = _ab_case(_blocks(1.03, pairs=10, contended_pairs=range(10)))
    rec = ab_records([loaded])
    assert rec[0].verdict is Verdict.INCONCLUSIVE and rec[0].unjudged == "contended"
    assert decide_exit(rec) == EXIT_UNJUDGED and decide_exit(rec, True) == EXIT_CLEAN
    assert unjudged_line(rec, what="A/B cases").startswith(f"could not judge 1 of 1 A/B cases (contended: "
                                                           f"{CASES[0].id})")
    few = _ab_case(_blocks(1.0, pairs=3))
    assert ab_records([few])[0].unjudged == "too few clean pairs"
    crashed = CaseResult(CASES[2], "crashed", reason="worker died")
    rows = ab_records([_ab_case(_blocks(1.05)), crashed])
    # a case that could not be measured broke (as in `harness run`): a failure, exit 1 on its own
    assert [r.verdict for r in rows] == [Verdict.REGRESSED, Verdict.BROKE] and not rows[1].unjudged
    assert decide_exit(rows) == EXIT_REGRESSION and decide_exit(ab_records([crashed])) == EXIT_REGRESSION
    assert decide_exit(ab_records([_ab_case(_blocks(1.0))])) == EXIT_CLEAN


# ------------------------------------------------------------------ the smallest detectable slowdown
def test_detectable_slowdown_arithmetic():
    # no spread: only the minimum effect is left to detect
    assert detectable_slowdown(0.0, 40, 0.99, 0.02) == pytest.approx(0.02)
    # the normal approximation by hand: sd 2%, 40 pairs, 99% interval, 95% power
    se = 0.02 / math.sqrt(40 * 3 / math.pi)
    want = math.expm1(max(2.5758293 * se, math.log1p(0.02)) + 1.6448536 * se)
    assert detectable_slowdown(0.02, 40, 0.99, 0.02) == pytest.approx(want, rel=1e-6)
    # more pairs detect less; a wider spread detects less well; four times the pairs halve the se term
    assert detectable_slowdown(0.02, 160, 0.99, 0.0) == pytest.approx(detectable_slowdown(0.02, 40, 0.99, 0.0) / 2,
                                                                       rel=0.02)
    assert detectable_slowdown(0.05, 40) > detectable_slowdown(0.02, 40) > detectable_slowdown(0.02, 80)
    with pytest.raises(ValueError):
        detectable_slowdown(0.02, 0)


@pytest.mark.parametrize("spread,target", [(0.01, 0.05), (0.03, 0.05), (0.05, 0.05), (0.02, 0.03), (0.08, 0.10)])
def test_pairs_for_a_target_are_the_fewest_that_reach_it(spread, target):
    n, ok = pairs_for_detect(spread, target, 0.99, 0.02, max_pairs=10_000)
    assert ok and detectable_slowdown(spread, n, 0.99, 0.02) <= target
    assert n == min_pairs(0.99) or detectable_slowdown(spread, n - 1, 0.99, 0.02) > target


def test_a_target_out_of_reach_is_said_and_bounded():
    assert pairs_for_detect(0.2, 0.05, max_pairs=DETECT_MAX_PAIRS) == (DETECT_MAX_PAIRS, False)
    assert pairs_for_detect(0.01, 0.02, min_effect=0.02) == (DETECT_MAX_PAIRS, False)  # at the minimum effect
    assert min_pairs(0.99) == 8 and min_pairs(0.95) == 6


def test_next_pairs_from_a_pilot():
    rng = np.random.default_rng(3)
    pilot = list(rng.normal(0.0, 0.03, DETECT_PILOT_PAIRS))
    need = next_pairs(pilot, 0.05, 0.99, 0.02)
    spread = log_ratio_spread(pilot)
    assert need == max(DETECT_PILOT_PAIRS, pairs_for_detect(spread, 0.05, 0.99, 0.02)[0])
    assert next_pairs([0.0] * 40, 0.05) == 40  # never fewer than measured
    assert next_pairs([0.01], 0.05) == DETECT_PILOT_PAIRS  # too few to say: finish the pilot
    assert next_pairs(list(rng.normal(0, 0.5, 10)), 0.05) == DETECT_MAX_PAIRS  # out of reach: the maximum


def test_the_detectable_slowdown_is_detected_with_its_power_by_the_real_test():
    """The arithmetic against judge_ab itself: pairs whose log ratios have a 3% spread, B slowed by the slowdown
    the formula says 40 pairs can detect: judged regressed in about 95% of 200 trials (and a slowdown half that
    size far less often)."""
    spread, pairs = 0.03, 40
    d = detectable_slowdown(spread, pairs, 0.99, 0.02)
    rng = np.random.default_rng(7)

    def power(effect):
        hits = 0
        for _ in range(200):
            blocks = []
            for i, e in enumerate(rng.normal(math.log1p(effect), spread, pairs)):
                base = 1_000_000 * (1 + 0.3 * math.sin(i))
                blocks += [AbBlock("a", i, [int(base)] * 5), AbBlock("b", i, [int(base * math.exp(e))] * 5)]
            hits += judge_ab(blocks, 0.02, 0.99).verdict is Verdict.REGRESSED
        return hits / 200

    assert 0.88 <= power(d) <= 1.0
    assert power(d / 2) < 0.6


def test_detect_line_from_the_pairs():
    blocks = _blocks(1.0, pairs=40, noise=0.02, seed=4)
    ratios = pair_log_ratios(blocks)
    assert len(ratios) == 40
    line = detect_line(ratios, 0.99, 0.02)
    spread = log_ratio_spread(ratios)
    assert line.startswith(f"can detect a slowdown of {detectable_slowdown(spread, 40):.1%} with 40 pairs")
    assert "--detect 50.0%: reached" in detect_line(ratios, 0.99, 0.02, target=0.5)
    wide = list(np.random.default_rng(1).normal(0, 0.05, 10))
    assert "--detect 3.0%: needs " in detect_line(wide, 0.99, 0.02, target=0.03)
    assert "must exceed the minimum effect" in detect_line(wide, 0.99, 0.02, target=0.01)
    assert detect_line([0.01, 0.02], 0.99, 0.02).startswith("2 clean pair(s): too few")
    assert pair_log_ratios(_blocks(1.0, pairs=10, contended_pairs=(0, 1))) == pair_log_ratios(
        _blocks(1.0, pairs=10, contended_pairs=(0, 1)))[:8]


# ------------------------------------------------------------------ harness ab end to end
def _cli(args, env):
    import subprocess

    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


def _onnx(path, depth):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")
    nodes, x = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("MatMul", [x, "w"], [f"h{i}"]))
        x = f"h{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_harness_ab_that_could_not_judge_exits_3_and_prints_what_it_can_detect(tmp_path, fake_env, capsys):
    """Three pairs are too few for any verdict: `inconclusive`, which exited 0 before; now the last line names
    the case and the exit status is 3 (0 with --allow-unjudged). Each case prints what its pairs can detect.
    (--ab-budget 0: with a budget the A/B measures more pairs until it can judge, tested below.)"""
    import sys

    a, b = _onnx(tmp_path / "a.onnx", 4), _onnx(tmp_path / "b.onnx", 4)
    argv = [sys.executable, "-m", "harness.cli", "ab", a, b, "--runtimes", "ort-cpu", "--batch-sizes", "8",
            "--threads", "1", "--ab-block-time", "0.01", "--ab-budget", "0"]
    p = _cli([*argv, "--ab-pairs", "3", "--out", str(tmp_path / "few")], fake_env)
    assert p.returncode == EXIT_UNJUDGED, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1].startswith("could not judge 1 of 1 A/B cases (too few clean pairs: a-ort-cpu-fp32-b8)"), lines
    assert "a-ort-cpu-fp32-b8: 3 clean pair(s): too few to estimate the smallest detectable slowdown" in p.stdout
    p = _cli([*argv, "--ab-pairs", "3", "--allow-unjudged", "--out", str(tmp_path / "ok")], fake_env)
    assert p.returncode == EXIT_CLEAN and "accepted (--allow-unjudged)" in p.stdout.splitlines()[-1]
    p = _cli([*argv, "--ab-pairs", "12", "--detect", "50%", "--out", str(tmp_path / "d")], fake_env)
    assert p.returncode in (EXIT_CLEAN, EXIT_UNJUDGED), p.stdout + p.stderr
    # --detect chooses the pairs: a pilot of 10 reaches a 50% target, so no more are measured than the pilot
    assert "pairs for --detect 50.0% (a pilot of 10" in p.stdout
    # (from the pairs, or from the activations when a loaded machine made them differ; a contended pair of the
    # pilot is made up for, so a loaded machine may measure 11 or 12)
    assert re.search(r"a-ort-cpu-fp32-b8: can detect a slowdown of [\d.]+% with (\d+ pairs|\d+ activations)",
                     p.stdout), p.stdout
    # whether this machine's pilot reached 50% depends on its load (the reached/needs arithmetic is tested on
    # fixed ratios above): the line says one of the three, never nothing
    # (pairs judged: "reached (N pairs suffice)" / "needs N pairs" / "not reachable within"; activations that
    # differ, judged on their estimates: "reached" / "not reached (more activations")
    assert re.search(r"--detect 50\.0%: (reached( \(\d+ pairs suffice\))?|needs \d+ pairs|not reachable within|"
                     r"not reached \(more activations)", p.stdout), p.stdout
    # a usage error ends before anything runs: in this process (a subprocess only paid the CLI's start again)
    assert main([*argv[3:], "--detect", "150%", "--out", str(tmp_path / "x")]) == 2
    assert "--ab-detect: '150%'" in capsys.readouterr().err
    # with a budget (the default 30 s) the same three pairs are not the end: more pairs in new activations until
    # the case is judged
    argv[argv.index("--ab-budget") + 1] = "30"
    p = _cli([*argv, "--ab-pairs", "3", "--out", str(tmp_path / "budget")], fake_env)
    ab = json.loads((tmp_path / "budget" / "results.json").read_text())["cases"][0]["ab"]
    assert ab["extra_pairs"] > 0 and len(ab["order"]) == 3 + ab["extra_pairs"], ab
    # judged within the budget on a quiet machine; a machine loaded past the under-load rule may spend the budget
    # on contended pairs: then not judged, exit 3, never a pass (the budget's arithmetic is tested on fakes)
    if ab["verdict"] == "inconclusive":
        assert p.returncode == EXIT_UNJUDGED and "contended" in ab["reason"], p.stdout + p.stderr
    else:
        assert p.returncode in (EXIT_CLEAN, EXIT_REGRESSION), p.stdout + p.stderr


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_run_workload_ab_that_could_not_judge_exits_3(tmp_path, fake_env):
    """`harness run --workload ab` (through pytest) ends as `harness ab` does: an inconclusive A/B case is
    named in the last line and the run exits 3; --allow-unjudged 0."""
    import sys

    argv = [sys.executable, "-m", "harness.cli", "run", "--workload", "ab", "--models", "fake-linear", "--runtimes",
            "fake-ok", "--batch-sizes", "1", "--ab-pairs", "3", "--ab-block-time", "0.01", "--ab-budget", "0"]
    p = _cli([*argv, "--out", str(tmp_path / "a")], fake_env)
    assert p.returncode == EXIT_UNJUDGED, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("could not judge 1 of 1 gated timing rows (too few clean pairs: "
                                                "fake-linear-fake-ok-fp32-b1)")
    p = _cli([*argv, "--allow-unjudged", "--out", str(tmp_path / "b")], fake_env)
    assert p.returncode == EXIT_CLEAN, p.stdout + p.stderr


def test_more_pairs_tells_the_ab_loop_how_far_to_go():
    """--detect in the A/B workload's loop: a pilot of 10 pairs with a 3% spread needs more for 3%, none for 50%;
    pairs lost to contention are made up for; never past the maximum."""
    from harness.gating.ab import more_pairs

    pilot = _blocks(1.0, pairs=DETECT_PILOT_PAIRS, noise=0.1, seed=2)  # block medians: ~3% spread
    spread = log_ratio_spread(pair_log_ratios(pilot))
    need = pairs_for_detect(spread, 0.03, 0.99, 0.02)[0]
    assert more_pairs(pilot, 0.03) == max(0, need - DETECT_PILOT_PAIRS) > 0
    assert more_pairs(pilot, 0.5) == 0
    lossy = _blocks(1.0, pairs=DETECT_PILOT_PAIRS, noise=0.1, seed=2, contended_pairs=(0, 1, 2))
    assert more_pairs(lossy, 0.5) == min_pairs(0.99) - 7  # 7 clean pairs: one more for the signed-rank floor
    assert more_pairs(pilot, 0.03, max_pairs=12) == 2


def test_harness_bisect_that_could_not_judge_exits_3(tmp_path, monkeypatch, capsys):
    """The command's exit status from the search's outcome (the search itself: the tests above)."""
    from harness.execution import bisect_run

    def fake_run(config, runtime, versions, gates):
        found = bisect_run.Bisection(runtime, CASES[0], list(versions))
        found.steps = [bisect_run.BisectStep(versions[0], _step(15.22), False, "the reference release"),
                       bisect_run.BisectStep(versions[-1], _step(19.61), None, "latency_median contended")]
        found.unjudged = (versions[0], versions[-1])
        return found

    monkeypatch.setattr(bisect_run, "run_bisect", fake_run)
    argv = ["bisect", "ort-cpu", "--versions", "1.28.0,1.31.1", "--models", "mlp"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == EXIT_UNJUDGED
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split()[:2] == ["1.31.1", "p50"] and "could not judge: latency_median contended" in out[-2]
    assert "could not judge: could not judge" not in "\n".join(out)
    assert out[-1].startswith("result: could not judge between 1.28.0 and 1.31.1")
    assert (tmp_path / "a" / "bisect.txt").read_text().splitlines()[-1] == out[-1]
    assert main([*argv, "--allow-unjudged", "--out", str(tmp_path / "b")]) == EXIT_CLEAN
