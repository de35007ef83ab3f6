"""gate-check's logic on a synthetic measure (no timing), and its runtime wrapper on fake runtimes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.cli import main
from harness.gating import GateConfig, parse_gate
from harness.execution.gatecheck_run import SupervisedRuns
from harness.gating.gatecheck import gate_check
from harness.runtimes.selftest import slowed_runtime
from harness.report.gatecheck import gatecheck_markdown
from harness.results.schema import CaseId
from harness.workloads import get_workload

CASES = [CaseId("mlp", "torch-cpu", "fp32", 1, None, "cpu"), CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu")]


class SyntheticMeasure:
    """Each run: a run-level offset (between-run drift, sd `run_sd`) times lognormal per-sample noise;
    the injected delay adds to every sample, as the busy-wait wrapper does."""

    def __init__(self, run_sd: float = 0.0, n: int = 300, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.run_sd, self.n, self.calls = run_sd, n, []

    def __call__(self, case: CaseId, delay_s: float) -> list[int]:
        self.calls.append((case.id, delay_s))
        base_ms = 1.0 if case.runtime == "ort-cpu" else 2.0
        offset = 1.0 + self.rng.normal(0.0, self.run_sd)
        x = base_ms * 1e6 * offset * self.rng.lognormal(0.0, 0.05, self.n) + delay_s * 1e9
        return [int(v) for v in x]


def test_quiet_machine_no_false_alarms_and_power_above_the_threshold():
    m = SyntheticMeasure()
    r = gate_check(CASES, GateConfig(resamples=2000), m, rounds=4, levels=(0.05, 0.2, 0.3))
    assert r.aa_trials == 2 * 4 * 3 and r.aa_false_alarms == 0 and r.false_alarm_rate == 0.0
    power = {lv.level: lv.power for lv in r.levels}
    assert power[0.05] == 0.0  # under the 10% gate by design
    assert power[0.2] == 1.0 and power[0.3] == 1.0
    assert r.smallest_detected == 0.2
    assert r.suggested_run_sigma < 0.02 and set(r.run_sigma) == {c.id for c in CASES}
    assert all(lv.trials == 2 * 4 * 4 for lv in r.levels)
    # interleaved rounds: every round runs A then each level for each case
    assert m.calls[:4] == [(CASES[0].id, 0.0)] + [(CASES[0].id, pytest.approx(lv * 0.002, rel=0.05))
                                                   for lv in (0.05, 0.2, 0.3)]
    assert r.levels[1].delays_us[CASES[1].id] == pytest.approx(200, rel=0.05)  # 20% of 1 ms
    doc = r.as_dict()
    assert doc["smallest_detected"] == 0.2 and doc["power_target"] == 0.95
    md = gatecheck_markdown(r)
    assert "false alarms (A/A, ordered pairs judged regressed): **0/24 = 0.0%**" in md and "| 20% | 32 | 32 | 100% |" in md


def test_noisy_machine_shows_false_alarms_or_lower_power():
    """Large between-run drift: the within-run bootstrap cannot see it; gate-check measures what it costs."""
    r = gate_check(CASES, GateConfig(resamples=2000), SyntheticMeasure(run_sd=0.15, seed=3), rounds=5,
                   levels=(0.2,))
    assert r.aa_false_alarms > 0 or r.levels[0].power < 0.95
    assert max(r.aa_spread.values()) > 1.1
    assert 0.05 < r.suggested_run_sigma < 0.4  # the spread it saw, offered as the gate's run_sigma
    assert r.tuned is not None and r.tuned.gates.case_sigma == {k: v for k, v in r.run_sigma.items() if v > 0}
    assert r.tuned.aa_false_alarms <= r.aa_false_alarms and "re-scored with each case's measured" in gatecheck_markdown(r)
    from harness.gating.gatecheck import suggested_config
    from harness.gating.gates import load_gate_config

    toml = suggested_config(r)
    assert "[run_sigma_cases]" in toml
    path = __import__("pathlib").Path(__import__("tempfile").mkdtemp()) / "gates.toml"
    path.write_text(toml)
    cfg = load_gate_config(path)
    assert all(cfg.sigma_for(k) == pytest.approx(v) for k, v in r.run_sigma.items())
    # folding that spread into the bounds removes the false alarms on the same machine
    tuned = gate_check(CASES, GateConfig(resamples=2000, run_sigma=0.3), SyntheticMeasure(run_sd=0.15, seed=3),
                       rounds=5, levels=(1.0,))
    assert tuned.aa_false_alarms == 0 and "run_sigma" in gatecheck_markdown(tuned)


def test_strict_gate_detects_smaller_slowdowns():
    r = gate_check(CASES, GateConfig(gates=(parse_gate("median:2%"),), resamples=2000), SyntheticMeasure(),
                   rounds=3, levels=(0.05,))
    assert r.smallest_detected == 0.05


def test_needs_two_rounds():
    with pytest.raises(ValueError, match="at least 2 rounds"):
        gate_check(CASES, GateConfig(), SyntheticMeasure(), rounds=1)


@pytest.mark.e2e
@pytest.mark.parametrize("isolation", [True, False])
def test_supervised_runs_measure_plain_and_slowed_blocks_in_a_worker_per_run(fakes, fake_env, tmp_path,
                                                                             isolation):
    """gate-check's measuring side: each simulated run in a fresh worker (or, with the in-process executor, the
    same code path here); a slowed block runs the case's runtime rebuilt by name in the worker."""
    from harness.config import RunConfig
    from harness.measure.timer import TimingPolicy
    from harness.runtimes import get_runtime
    from harness.runtimes.selftest import slowed_name

    base = get_runtime("fake-ok")
    cls = slowed_runtime(base, 0.000_25)
    assert cls.name == slowed_name("fake-ok", 0.000_25) == "fake-ok+delay250000ns"
    assert issubclass(cls, base) and "SELF-TEST ONLY" in cls.description and cls.injected_delay_s == 0.000_25
    assert get_runtime("fake-ok+delay1500ns").injected_delay_s == 1.5e-6  # rebuilt from its name (a worker's way)
    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), batch_sizes=(1,),
                       timing=TimingPolicy(min_time_s=0.0, min_iters=5, warmup_iters=1), out_dir=tmp_path,
                       cache_dir=tmp_path / "cache", isolation=isolation)
    runs = SupervisedRuns(config)  # each simulated run a HarnessSession (isolated or not, as configured)
    [case] = get_workload(config.workload).cases(config)
    r = gate_check([case], GateConfig(resamples=500), runs.measure, rounds=2, levels=(0.5,), execute=runs.execute)
    assert r.aa_trials == 2 and r.levels[0].trials == 4 and r.cases == [case.id]
    assert runs.workers == 2 and runs.session is None  # one session (worker) per simulated run, finished after it
    assert sorted(p.name for p in tmp_path.iterdir() if (p / "results.json").is_file()) == ["001", "002"]
    with pytest.raises(RuntimeError, match="outside a run"):
        runs.measure(case, 0.0)


def test_a_case_that_is_not_measured_stops_gate_check_with_its_reason(fakes, tmp_path):
    from harness.config import RunConfig
    from harness.errors import HarnessError
    from harness.measure.timer import TimingPolicy

    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-raises",), batch_sizes=(1,), isolation=False,
                       timing=TimingPolicy(min_time_s=0.0, min_iters=3, warmup_iters=1), out_dir=tmp_path,
                       cache_dir=tmp_path / "cache")
    runs = SupervisedRuns(config)
    with pytest.raises(HarnessError, match="was not measured .error: .*model file is garbage"):
        gate_check(get_workload(config.workload).cases(config), GateConfig(resamples=100), runs.measure, rounds=2, levels=(0.5,),
                   execute=runs.execute)


def test_gate_check_cli_usage_errors(capsys):
    # --levels and --rounds are gate-check's option group (harness.options.gating): the CLI's parser refuses them,
    # one line and exit 2, before the command runs
    for argv, words in ((["--levels", "five"], "error: --levels 'five': expected percentages like 5,10,20"),
                        (["--rounds", "1"], "error: --rounds: 1 is below the minimum 2")):
        with pytest.raises(SystemExit) as info:
            main(["gate-check", *argv])
        assert info.value.code == 2 and capsys.readouterr().err.strip().endswith(words)
    assert main(["gate-check", "--gate", "mean:10%"]) == 2


@pytest.mark.e2e
def test_gate_check_cli_end_to_end_on_fakes(fake_env, tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "harness.cli", "gate-check", "--models", "fake-linear",
                          "--runtimes", "fake-ok", "--rounds", "2", "--levels", "50", "--min-time", "0.01",
                          "--min-iters", "5", "--out", str(tmp_path / "gc")],
                         capture_output=True, text=True, env=fake_env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "false alarms (A/A" in res.stdout and "smallest injected slowdown detected" in res.stdout
    assert "**" not in res.stdout and "###" not in res.stdout and "| ---" not in res.stdout  # plain text
    doc = json.loads((tmp_path / "gc" / "gatecheck.json").read_text())
    assert doc["aa_trials"] == 2 and doc["levels"][0]["level"] == 0.5 and doc["repeats"] == 3
    assert doc["machine"] and doc["measured_at"].endswith("Z")
    html = (tmp_path / "gc" / "gatecheck.html").read_text()
    assert "<h1>Gate check: <code>gates median:10%" in html and "Power per injected slowdown" in html
    assert "fake-linear-fake-ok-fp32-b1" in html
    # the suggested config carries what was measured; the verdict tables show it
    from harness.gating import compare_runs, load_gate_config
    from harness.gating.gates import GateConfig
    from harness.report.verdicts import verdicts_markdown

    cfg = load_gate_config(tmp_path / "gc" / "gates-suggested.toml")
    assert cfg.measured["trials"] == 2 and "50%" in cfg.measured["power"]
    line = cfg.measured_line()
    assert line.startswith("measured by `harness gate-check` on ") and "false alarms" in line and "50%:" in line
    assert "not measured on this machine" in GateConfig().measured_line()
    from gating_synth import make_run

    md = verdicts_markdown(compare_runs(make_run(1), make_run(2), cfg))
    assert "This gate: measured by `harness gate-check`" in md


def test_a_bad_gate_check_table_is_a_usage_error(tmp_path):
    from harness.errors import UsageError
    from harness.gating.gates import load_gate_config

    for text, msg in (('gate_check = 3', "[gate_check] must be a table"),
                      ('[gate_check]\ntrials = "many"', "trials = 'many' is not a number"),
                      ('[gate_check]\npower = 2', "gate_check.power must be a table")):
        path = tmp_path / "g.toml"
        path.write_text(text)
        with pytest.raises(UsageError, match=re.escape(msg)):
            load_gate_config(path)


def test_gate_check_through_a_given_execute_scores_like_in_process():
    calls = []

    def execute(fn, *args):
        calls.append(len(args))
        return fn(*args)

    a = gate_check(CASES, GateConfig(resamples=500), SyntheticMeasure(seed=1), rounds=3, levels=(0.3,), repeats=2)
    b = gate_check(CASES, GateConfig(resamples=500), SyntheticMeasure(seed=1), rounds=3, levels=(0.3,), repeats=2,
                   execute=execute)
    assert len(calls) == 3  # one call per simulated run
    assert a.repeats == 2 and a.aa_trials == b.aa_trials == 2 * 3 * 2
    assert a.levels[0].power == b.levels[0].power == 1.0 and a.aa_false_alarms == b.aa_false_alarms == 0


def test_a_spread_too_large_to_gate_is_measured_not_an_error():
    """On a busy machine the A runs' medians can lie a factor e or more apart (run-to-run spread >= 1, which no
    gate config takes): gate-check reports it and leaves it out of the tuned re-score and the suggested file."""
    from harness.gating.gatecheck import suggested_config
    from harness.results.schema import CaseId

    case = CaseId("m", "rt", "fp32", 1, None, "cpu")
    calls = {"n": 0}

    def measure(c, delay_s):
        calls["n"] += 1
        run = (calls["n"] - 1) // 2  # two blocks (A and one slowed level) per run
        scale = 30.0 ** run  # each run 30x slower than the last
        return [int(scale * (1_000_000 + delay_s * 1e9 + i)) for i in range(20)]

    r = gate_check([case], GateConfig(resamples=200), measure, rounds=3, levels=(0.5,))
    assert r.run_sigma[case.id] > 1.0
    assert r.tuned is None or case.id not in r.tuned.gates.case_sigma
    text = suggested_config(r)
    assert f'# "{case.id}" = ' in text and "too spread to gate here" in text
