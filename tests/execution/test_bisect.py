"""`harness bisect` under load: the two releases of each comparison measured side by side (SideBySide, the gate's
interleaved pairs) and judged by the paired test's rule for large effects under load. Fake releases: an executor
whose release costs what the test says per call, every block contended by a neighbour that stays through a pair
and moves each block by a jitter of its own; each release's own run (measured apart) contended too, so its
figures alone judge nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.config import RunConfig
from harness.execution.bisect_run import SideBySide, bisect, judge
from harness.execution.session import HarnessSession
from harness.gating.gates import GateConfig, load_gate_config
from harness.results.schema import CaseId, CaseResult
from harness.results.stats import latency_stats
from harness.results.stored import BlockContention, CaseContentionRecord

CAUSE = "1 thread(s), 0.2 core(s) free: the worker's threads waited 60% of their runnable time for a CPU"
LOADED = CaseContentionRecord(contended=True, cause=CAUSE, blocks=1, contended_blocks=1)
LOADED_BLOCK = BlockContention(contended=True, cause=CAUSE)


def _case(version: str) -> CaseId:
    return CaseId("mlp", f"fakert-cpu@{version}", "fp32", 1, None, "cpu")


class FakeReleases:
    """An executor (run: a side's activation; measure_block: one block) whose release `v` costs `costs_us[v]` a
    call. Every block is contended: a neighbour slows both blocks of a pair alike by a factor drawn per pair (1x
    to 3x), and each block moves by a jitter of its own (lognormal, sigma `jitter`)."""

    def __init__(self, costs_us: dict[str, float], jitter: float, seed: int = 0) -> None:
        self.costs_us, self.jitter = costs_us, jitter
        self.rng = np.random.default_rng(seed)
        self.blocks = 0
        self.activations: list[str] = []
        self._load = 1.0

    def _cost_ns(self, case: CaseId) -> float:
        return self.costs_us[case.runtime.split("@")[1]] * 1000

    def run(self, case: CaseId, config: RunConfig, payload=None) -> CaseResult:
        self.activations.append(case.runtime)
        ns = [int(self._cost_ns(case))] * 5
        return CaseResult(case, "passed", samples_ns=ns, latency=latency_stats(ns),
                          timing_scope="host_to_host", feed_sha256="f" * 64, model_fingerprint="fp-mlp")

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool = True) -> dict:
        if self.blocks % 2 == 0:  # a pair's first block: the neighbour of this pair
            self._load = float(self.rng.uniform(1.0, 3.0))
        self.blocks += 1
        block = self._cost_ns(case) * self._load * float(self.rng.lognormal(0.0, self.jitter))
        return {"samples_ns": [int(block * (1 + 0.001 * i)) for i in range(9)], "contention": LOADED_BLOCK}

    def close(self) -> None:
        pass


def _side_by_side(tmp_path, costs_us: dict[str, float], jitter: float, lines: list[str]) -> SideBySide:
    config = RunConfig.build(workload="gate", isolation=False, threads=1, ab_pairs=40, ab_block_time_s=0.002,
                             ab_budget_s=0.0, cache_dir=tmp_path / "cache", out_dir=tmp_path / "side-by-side",
                             repeats=1)
    session = HarnessSession(config)
    session.start()
    session.executor = FakeReleases(costs_us, jitter)
    both = SideBySide(session, lines.append)
    both.wait = lambda threads, timeout_s, window_s: {"waited_s": 0.0, "quiet": False}  # the pairs' quiet waits
    return both


def _measured_apart(costs_us: dict[str, float], log: list[str]):
    """Each release's own run: its figures contended (a neighbour came and went between the runs: 1x to 3x)."""
    rng = np.random.default_rng(1)

    def measure(version: str) -> CaseResult:
        log.append(version)
        ns = [int(costs_us[version] * 1000 * rng.uniform(1.0, 3.0) * (1 + 0.001 * i)) for i in range(200)]
        return CaseResult(_case(version), "passed", samples_ns=ns, latency=latency_stats(ns),
                          timing_scope="host_to_host", feed_sha256="f" * 64, model_fingerprint="fp-mlp",
                          accuracy={"passed": True, "rel_l2": 1e-7, "max_abs": 1e-7, "failures": []},
                          contention=LOADED)
    return measure


VERSIONS = [f"1.{i}.0" for i in range(9)]


def test_a_contended_1_8x_step_is_found_and_named_with_the_under_load_note(tmp_path):
    """Every block and every release's run contended (its figures alone could not judge: before, `could not
    judge between 1.0.0 and 1.8.0`): side by side, the 1.8x step at 1.5.0 is found, the change judged under
    load; a release before it (A/A against the oldest: not judged) is judged against the changed end instead."""
    costs = {v: 30.0 * (1.8 if i >= 5 else 1.0) for i, v in enumerate(VERSIONS)}
    gates = GateConfig()
    apart = judge(_measured_apart(costs, [])("1.0.0"), _measured_apart(costs, [])("1.8.0"), gates)
    assert apart[0] is None and apart[1].startswith("latency_median contended (x"), apart
    lines: list[str] = []
    both = _side_by_side(tmp_path, costs, jitter=0.15, lines=lines)
    log: list[str] = []
    found = bisect(VERSIONS, _measured_apart(costs, log), lambda a, b: judge(a, b, gates, both), "fakert-cpu")
    both.session.finish(interrupted=False)
    assert (found.first_changed, found.last_same, found.unjudged) == ("1.5.0", "1.4.0", None), found.lines()
    assert len(log) <= 2 + math.ceil(math.log2(len(VERSIONS) - 1))
    end = found.steps[1]
    assert end.version == "1.8.0" and end.changed is True
    assert "latency_median regressed" in end.why and "side by side with fakert-cpu@1.0.0: judged under load" in \
        end.why and "widened by 3.0% for contention" in end.why and "entirely above 1 + 10%" in end.why, end.why
    before = next(s for s in found.steps if s.version == "1.4.0")
    assert before.changed is False and "could not judge against 1.0.0" in before.why
    assert "differs from 1.5.0 (changed)" in before.why or "differs from 1.8.0 (changed)" in before.why
    assert found.lines()[-1] == "result: first changed in 1.5.0 (last like 1.0.0: 1.4.0)"
    # each comparison is a row of the side-by-side session, its blocks kept, side A's figures beside
    rows = both.session.run.cases
    assert rows and all(r.ab is not None and len(r.ab.blocks) == 80 for r in rows)
    assert rows[0].ab.a == "fakert-cpu@1.0.0" and rows[0].case.runtime == "fakert-cpu@1.8.0"
    assert 1.6 < rows[0].ab.ratio < 2.0 and rows[0].details["bisect"]["side_a"]["latency"]["p50_ms"] > 0
    assert (tmp_path / "side-by-side" / "results.json").is_file()
    assert any(line.startswith("  side by side fakert-cpu@1.0.0 vs fakert-cpu@1.8.0: regressed, B/A 1.")
               for line in lines), lines


@pytest.mark.parametrize("jitter", [0.15, 0.02])
def test_a_contended_a_a_history_never_names_a_step(tmp_path, jitter):
    """No release changed: side by side under load the A/B is not judged (wide: could not judge, its figure
    shown) or, with a tight interval at the 10% gate, passes under load (no change); never a step."""
    costs = dict.fromkeys(VERSIONS, 30.0)
    both = _side_by_side(tmp_path, costs, jitter=jitter, lines=[])
    found = bisect(VERSIONS, _measured_apart(costs, []), lambda a, b: judge(a, b, GateConfig(), both),
                   "fakert-cpu")
    both.session.finish(interrupted=False)
    assert found.first_changed is None and not any(s.changed for s in found.steps)
    last = found.lines()[-1]
    if jitter > 0.1:
        assert found.unjudged == ("1.0.0", "1.8.0") and last.startswith("result: could not judge between 1.0.0 "
                                                                         "and 1.8.0 (latency_median contended (x")
        assert "side by side with fakert-cpu@1.0.0" in last
    else:
        assert found.unjudged is None and last.startswith("result: no change from 1.0.0 to 1.8.0"), last
        assert "latency_median pass" in found.steps[1].why and "judged under load" in found.steps[1].why


def test_a_small_contended_step_stays_could_not_judge_with_its_figures(tmp_path):
    """5% at 1.5.0 under this load: neither end judges it; the search stops with the estimate shown."""
    costs = {v: 30.0 * (1.05 if i >= 5 else 1.0) for i, v in enumerate(VERSIONS)}
    both = _side_by_side(tmp_path, costs, jitter=0.15, lines=[])
    found = bisect(VERSIONS, _measured_apart(costs, []), lambda a, b: judge(a, b, GateConfig(), both),
                   "fakert-cpu")
    both.session.finish(interrupted=False)
    assert found.first_changed is None and found.unjudged == ("1.0.0", "1.8.0")
    row = both.session.run.cases[0]
    assert row.ab.verdict == "inconclusive" and row.ab.ratio is not None
    assert f"(x{row.ab.ratio:.3f} [{row.ab.ci_low:.3f}, {row.ab.ci_high:.3f}], side by side with fakert-cpu@1.0.0)" \
        in found.lines()[-1]


def test_the_side_by_side_threshold_is_the_median_gate_and_without_one_the_figures_judge(tmp_path):
    """--gate median:5% judges the side-by-side A/B at 5%; a gate without a median leaves it unmeasured."""
    costs = {"1.0.0": 30.0, "1.1.0": 54.0}
    seen: list[float] = []

    def spy(good, other, min_effect):
        seen.append(min_effect)
        return "not measured in this test"

    measure = _measured_apart(costs, [])
    a, b = measure("1.0.0"), measure("1.1.0")
    changed, why = judge(a, b, load_gate_config(None, ["median:5%"]), spy)
    assert seen == [0.05] and changed is None and "; not measured side by side: not measured in this test)" in why
    seen.clear()
    judge(a, b, load_gate_config(None, ["p99:20%"]), spy)
    assert seen == []
