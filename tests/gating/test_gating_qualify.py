"""Qualification specs: parsing errors, judging PASS/FAIL with margins, certificates, the command end to end."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gating_synth import ENV, case_result, samples

from harness.cli import main
from harness.errors import UsageError
from harness.execution.qualify_run import spec_case, spec_run_config
from harness.gating.qualify import SpecError, judge, load_spec
from harness.report.certificate import write_certificate
from harness.results import write_results
from harness.results.schema import CaseId, RunResults
from harness.workloads import get_workload
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord

SPECS = Path(__file__).resolve().parents[2] / "specs"
GOOD = """
name = "fake-box"
description = "fake runtimes on a fake box"
[measure]
min_time = 0.01
min_iters = 5
warmup = 1
[defaults.require]
drift_within_tolerance = true
[[case]]
model = "fake-linear"
runtime = "fake-ok"
precision = "fp32"
batch = 1
[case.require]
p99_ms_max = 1000
throughput_sps_min = 1
not_noisy = false
[[case]]
model = "fake-linear"
runtime = "fake-ok-b"
batch = 4
[case.require]
p50_ms_max = 1000
"""
CASE1 = CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu")
CASE2 = CaseId("fake-linear", "fake-ok-b", "fp32", 4, None, "cpu")


@pytest.fixture
def spec_file(tmp_path, fakes):
    p = tmp_path / "spec.toml"
    p.write_text(GOOD)
    return p


def results_file(tmp_path, *cases):
    run = RunResults(run_id="q", started_at="t", environment=RunEnvironmentRecord.from_dict(dict(ENV)), config={}, cases=list(cases),
                     complete=True)
    return write_results(run, tmp_path / "run")


def test_load_spec(spec_file):
    spec = load_spec(spec_file, spec_case)
    assert spec.name == "fake-box" and [c.case for c in spec.cases] == [CASE1, CASE2]
    assert spec.cases[0].require == {"drift_within_tolerance": True, "p99_ms_max": 1000.0,
                                     "throughput_sps_min": 1.0}
    assert spec.cases[1].require == {"drift_within_tolerance": True, "p50_ms_max": 1000.0}
    config = spec_run_config(spec, Path("/tmp/x"))
    assert config.matrix.models == ("fake-linear",) and config.matrix.runtimes == ("fake-ok", "fake-ok-b")
    assert config.matrix.batch_sizes == (1, 4) and config.measure.timing.min_time_s == 0.01 and config.outputs.out_dir == Path("/tmp/x")


def test_spec_cases_follow_the_matrix_rule_of_harness_run(tmp_path):
    """A spec asking torch-cpu fp16 gets the bf16 case that `harness run --precisions fp16` measures."""
    from harness.config import RunConfig
    from harness.precision import Precision

    p = tmp_path / "spec.toml"
    p.write_text('[[case]]\nmodel = "mlp"\nruntime = "torch-cpu"\nprecision = "fp16"\nbatch = 1\n'
                 '[case.require]\np99_ms_max = 100\n')
    (case,) = [c.case for c in load_spec(p, spec_case).cases]
    run = RunConfig.build(models=("mlp",), runtimes=("torch-cpu",), precisions=(Precision.FP16,), batch_sizes=(1,),
                    out_dir=tmp_path)
    assert [case] == get_workload(run.workload).cases(run) and case.precision is Precision.BF16 and case.id == "mlp-torch-cpu-bf16-b1"


@pytest.mark.parametrize("old, new, message", [
    ('batch = 4', 'batch = 4\nbach = 2', "case 2: unknown key 'bach'"),
    ('p99_ms_max = 1000', 'p99_max = 1000', "case 1: require: unknown key 'p99_max'"),
    ('min_time = 0.01', 'min_tme = 0.01', "[measure]: unknown key 'min_tme'"),
    ('name = "fake-box"', 'name = "fake-box"\nowner = "me"', "unknown key 'owner'"),
    ('runtime = "fake-ok-b"', 'runtime = "warp-drive"', "case 2: unknown runtime 'warp-drive'; valid runtimes"),
    ('model = "fake-linear"\nruntime = "fake-ok"\n', 'model = "gpt-9"\nruntime = "fake-ok"\n',
     "case 1: unknown model 'gpt-9'"),
    ('p99_ms_max = 1000', 'p99_ms_max = "fast"', "p99_ms_max = 'fast' is not a number"),
    ('p99_ms_max = 1000', 'p99_ms_max = -1', "p99_ms_max = -1 is below 0"),
    ('batch = 4', 'batch = 2.5', "batch = 2.5 is not a whole number"),
    ('batch = 4', 'batch = 0', "batch = 0 is below 1"),
    ('precision = "fp32"', 'precision = "fp12"', "case 1: "),
    ('batch = 4', 'batch = 4\nseq = 16', "has no sequence axis"),
    ('not_noisy = false', 'not_noisy = "no"', "must be true or false"),
    ('min_time = 0.01', 'min_time = 0.01 0.02', "not valid TOML"),
    ('[[case]]\nmodel = "fake-linear"\nruntime = "fake-ok-b"\nbatch = 4',
     '[[case]]\nmodel = "fake-linear"\nruntime = "fake-ok"\nbatch = 1', "is listed twice"),
])
def test_bad_specs_name_the_file_and_the_problem(tmp_path, fakes, old, new, message, capsys):
    assert old in GOOD, old
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as info:
        load_spec(p, spec_case)
    assert str(info.value).startswith(str(p)) and message in str(info.value), str(info.value)
    assert isinstance(info.value, UsageError)
    assert main(["qualify", str(p)]) == 2
    assert message in capsys.readouterr().err


def test_spec_without_cases_or_requirements(tmp_path, fakes):
    p = tmp_path / "s.toml"
    p.write_text('name = "x"\n')
    with pytest.raises(SpecError, match="no \\[\\[case\\]\\] tables"):
        load_spec(p, spec_case)
    p.write_text('[[case]]\nmodel = "fake-linear"\nruntime = "fake-ok"\nbatch = 1\n')
    with pytest.raises(SpecError, match="no requirements"):
        load_spec(p, spec_case)
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml", spec_case)


def test_judge_pass_with_margins_and_certificate(tmp_path, spec_file):
    res = results_file(tmp_path, case_result(CASE1, samples(2.0, 100, 1)), case_result(CASE2, samples(3.0, 100, 2)))
    run = __import__("harness.gating", fromlist=["load_run"]).load_run(res)
    cert = judge(load_spec(spec_file, spec_case), run, res)
    assert cert.passed and cert.exit_code == 0 and cert.verdict == "PASS"
    p99 = next(r for r in cert.requirements if r.requirement == "p99_ms_max")
    assert p99.measured == pytest.approx(run.cases[0].latency.p99_ms)
    assert p99.margin == pytest.approx(1000 - p99.measured) and 99 < p99.margin_pct < 100
    tp = next(r for r in cert.requirements if r.requirement == "throughput_sps_min")
    assert tp.margin == pytest.approx(tp.measured - 1)
    files = write_certificate(cert, tmp_path / "cert")
    doc = json.loads(files["certificate_json"].read_text())
    assert doc["verdict"] == "PASS" and doc["total"] == 5
    assert doc["results"]["sha256"] == hashlib.sha256(res.read_bytes()).hexdigest()
    assert doc["machine"]["cpu_model"] == "Test CPU 9000" and doc["machine"]["libraries"]["torch"] == "2.13.0"
    html = files["certificate_html"].read_text()
    assert doc["results"]["sha256"] in html and ">PASS<" in html
    assert not re.search(r"<script|https?://|<link", html)  # self-contained


def test_impossible_unmeasured_and_broken_requirements_fail(tmp_path, spec_file):
    text = spec_file.read_text().replace("p99_ms_max = 1000", "p99_ms_max = 0.000001\ngpu_peak_mb_max = 100")
    spec_file.write_text(text)
    res = results_file(tmp_path, case_result(CASE1, samples(2.0, 100, 1)), case_result(CASE2, status="crashed"))
    from harness.gating import load_run

    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    assert not cert.passed and cert.exit_code == 1
    by = {(r.case_id, r.requirement): r for r in cert.requirements}
    p99 = by[(CASE1.id, "p99_ms_max")]
    assert p99.status == "FAIL" and p99.margin < 0 and "is not <=" in p99.reason
    gpu = by[(CASE1.id, "gpu_peak_mb_max")]
    assert gpu.status == "FAIL" and "was not measured" in gpu.reason and gpu.measured is None
    assert by[(CASE1.id, "throughput_sps_min")].status == "PASS"
    crashed = by[(CASE2.id, "p50_ms_max")]
    assert crashed.status == "FAIL" and "crashed" in crashed.reason


def test_noisy_and_drift_flags(tmp_path, spec_file):
    spec_file.write_text(spec_file.read_text().replace("not_noisy = false", "not_noisy = true"))
    noisy = case_result(CASE1, samples(2.0, 100, 1, sigma=0.8), status="failed", reason="drift over tolerance: x")
    res = results_file(tmp_path, noisy, case_result(CASE2, samples(3.0, 100, 2)))
    from harness.gating import load_run

    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    by = {(r.case_id, r.requirement): r for r in cert.requirements}
    assert by[(CASE1.id, "not_noisy")].status == "FAIL"
    assert by[(CASE1.id, "drift_within_tolerance")].status == "FAIL"
    assert "drift over tolerance" in by[(CASE1.id, "drift_within_tolerance")].reason
    assert by[(CASE2.id, "drift_within_tolerance")].status == "PASS"


def test_cli_qualify_with_stored_results(tmp_path, spec_file, capsys):
    res = results_file(tmp_path, case_result(CASE1, samples(2.0, 100, 1)), case_result(CASE2, samples(3.0, 100, 2)))
    assert main(["qualify", str(spec_file), "--results", str(res), "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"PASS\s+fake-linear-fake-ok-fp32-b1\s+latency p99", out) and "PASS: 5/5" in out
    assert (tmp_path / "c" / "certificate.html").is_file()
    spec_file.write_text(spec_file.read_text().replace("throughput_sps_min = 1", "throughput_sps_min = 1e12"))
    assert main(["qualify", str(spec_file), "--results", str(res), "--out", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL\s+fake-linear-fake-ok-fp32-b1\s+throughput", out) and "FAIL: 4/5" in out


@pytest.mark.e2e
def test_qualify_runs_the_cases_end_to_end(fake_env, tmp_path, spec_file):
    out = tmp_path / "q"
    res = subprocess.run([sys.executable, "-m", "harness.cli", "qualify", str(spec_file), "--out", str(out)],
                         capture_output=True, text=True, env=fake_env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS: 7/7" in res.stdout  # 5 of the spec, and each case's audits (qualify audits every case)
    assert re.search(r"PASS\s+fake-linear-fake-ok-fp32-b1\s+audits inside the timed run\s+3 checks passed", res.stdout)
    doc = json.loads((out / "certificate.json").read_text())
    assert doc["results"]["sha256"] == hashlib.sha256((out / "results.json").read_bytes()).hexdigest()
    assert (out / "report.html").is_file()  # the same machinery as `harness run`
    results = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in results["cases"]] == [CASE1.id, CASE2.id] and results["complete"] is True


def test_sample_specs_parse(fakes):
    cpu = load_spec(SPECS / "cpu-2core.toml", spec_case)
    assert cpu.cases and all(c.case.device == "cpu" for c in cpu.cases)
    text = (SPECS / "h100.toml").read_text()
    for name in ("torch-cuda", "ort-cuda", "tensorrt", "gpu_peak_mb_max"):
        assert name in text
    import tomllib

    doc = tomllib.loads(text)
    assert all(set(c) <= {"model", "runtime", "precision", "batch", "seq", "require"} for c in doc["case"])


def test_a_case_at_a_batch_its_model_fixes_otherwise_is_refused(tmp_path, fakes, monkeypatch):
    from harness.model import _MODELS, ModelSpec, TensorSpec

    monkeypatch.setitem(_MODELS, "fixed-one", ModelSpec("fixed-one", (TensorSpec("x", (1, 4)),), ("y",),
                                                        onnx_path=tmp_path / "one.onnx"))
    p = tmp_path / "fixed.toml"
    p.write_text(GOOD.replace('model = "fake-linear"\nruntime = "fake-ok-b"',
                              'model = "fixed-one"\nruntime = "fake-ok-b"'))
    with pytest.raises(SpecError, match=r"case 2: one.onnx fixes input 'x' axis 0 at 1; --batch-sizes 4 does not "
                                        r"apply"):
        load_spec(p, spec_case)


def test_certificate_shows_values_readably_and_breaks_no_word(tmp_path, spec_file):
    """Nested facts (git, a GPU) read as "key value; key value", never a raw dict; no CSS that breaks words."""
    from harness.report.certificate import _fmt, certificate_text

    res = results_file(tmp_path, case_result(CASE1, samples(2.0, 100, 1)), case_result(CASE2, samples(3.0, 100, 2)))
    run = __import__("harness.gating", fromlist=["load_run"]).load_run(res)
    run.environment.add(git={"commit": "0123abcd", "dirty": False}, gpu=[{"name": "NVIDIA H100", "memory_gb": 80.0}])
    cert = judge(load_spec(spec_file, spec_case), run, res)
    html = write_certificate(cert, tmp_path / "cert")["certificate_html"].read_text()
    assert "commit 0123abcd; dirty no" in html and "name NVIDIA H100; memory gb 80" in html
    assert "{&#39;" not in html and "{'" not in html and "[{" not in html
    assert "break-all" not in html and "code { font-size: 12px; white-space: nowrap; }" in html  # no mid-word
    assert html.count('<code class="hash">') == 4  # only hashes and paths may wrap anywhere
    assert _fmt({"a_b": [1.23456, True], "c": None}) == "a b 1.235, yes; c -"
    lines = certificate_text(cert).splitlines()[:-1]  # the requirement rows: one column each, whatever their width
    assert len({line.index(r.case_id) for line, r in zip(lines, cert.requirements)}) == 1
    assert "{" not in certificate_text(cert)


def test_a_contended_case_meets_one_sided_limits_and_is_inconclusive_where_it_misses(tmp_path, spec_file):
    """Contention inflated case 1. Latency can only be higher and throughput lower under contention: its p99 under a
    maximum and its throughput over a minimum have met them ("met under contention"); a noise flag can move either
    way and is not judged; its drift is judged as ever. A limit the inflated figure misses stays INCONCLUSIVE
    (exit 3: not qualified, not a FAIL), and a noisy flag names the CV once the case is quiet."""
    spec_file.write_text(spec_file.read_text().replace("not_noisy = false", "not_noisy = true"))
    c1 = case_result(CASE1, samples(2.0, 100, 1, sigma=0.8))
    c1.contention = CaseContentionRecord(contended=True, cause="1 thread(s): waited 70%")
    res = results_file(tmp_path, c1, case_result(CASE2, samples(3.0, 100, 2)))
    from harness.gating import load_run

    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    by = {(r.case_id, r.requirement): r for r in cert.requirements}
    for key in ("p99_ms_max", "throughput_sps_min"):
        r = by[(CASE1.id, key)]
        assert r.status == "PASS" and "met under contention (the quiet figure can only be better" in r.reason, r
        assert r.margin is not None and r.margin > 0
    noisy = by[(CASE1.id, "not_noisy")]
    assert noisy.status == "INCONCLUSIVE" and noisy.reason.startswith("inconclusive (contended): 1 thread(s)")
    assert by[(CASE1.id, "drift_within_tolerance")].status == "PASS"
    assert cert.verdict == "INCONCLUSIVE" and cert.exit_code == 3 and not cert.passed
    line = cert.unjudged_line()  # the command's last line: which requirements, why, and no way to accept them
    assert line.startswith(f"could not judge 1 of {len(cert.requirements)} requirements (contended: {CASE1.id} "
                           "not_noisy)") and line.endswith("exit 3, not a pass")
    # the limits met under contention, the flag gone: qualified
    spec_file.write_text(spec_file.read_text().replace("not_noisy = true", "not_noisy = false"))
    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    assert cert.verdict == "PASS" and cert.exit_code == 0
    # a maximum the contended figure misses: inconclusive (the quiet figure might meet it), never FAIL
    spec_file.write_text(spec_file.read_text().replace("p99_ms_max = 1000", "p99_ms_max = 0.5"))
    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    p99 = next(r for r in cert.requirements if r.case_id == CASE1.id and r.requirement == "p99_ms_max")
    assert p99.status == "INCONCLUSIVE" and p99.reason.startswith("inconclusive (contended): ") and \
        "is not <= 0.5 under contention" in p99.reason
    assert cert.verdict == "INCONCLUSIVE" and cert.exit_code == 3
    c1.contention = None
    spec_file.write_text(spec_file.read_text().replace("not_noisy = false", "not_noisy = true"))
    res = results_file(tmp_path, c1, case_result(CASE2, samples(3.0, 100, 2)))
    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    noisy = next(r for r in cert.requirements if r.case_id == CASE1.id and r.requirement == "not_noisy")
    assert noisy.status == "FAIL" and noisy.reason.startswith("noisy: robust CV ") and cert.verdict == "FAIL"


def test_a_percentile_requirement_on_too_few_samples_is_inconclusive(tmp_path, spec_file):
    """p99_ms_max on 12 samples: not judged (the report shows "n/a (n=12 < 100)"), the certificate INCONCLUSIVE;
    the p50 limit of the other case is judged as ever."""
    res = results_file(tmp_path, case_result(CASE1, samples(2.0, 12, 1)), case_result(CASE2, samples(3.0, 12, 2)))
    from harness.gating import load_run

    cert = judge(load_spec(spec_file, spec_case), load_run(res), res)
    by = {(r.case_id, r.requirement): r for r in cert.requirements}
    p99 = by[(CASE1.id, "p99_ms_max")]
    assert p99.status == "INCONCLUSIVE" and "n/a (n=12 < 100)" in p99.reason and "not judged" in p99.reason
    assert by[(CASE2.id, "p50_ms_max")].status == "PASS"
    assert cert.verdict == "INCONCLUSIVE" and cert.exit_code == 3


def _run_options(tmp_path, **kw):
    from harness.options import OPTIONS, parse_run_options

    return parse_run_options({**{o.dest: None for o in OPTIONS}, "out": str(tmp_path / "o"), **kw})


@pytest.mark.parametrize("line, option", [
    ("min_time = -1", "min_time"),
    ("threads = 0", "threads"),
    ("min_iters = 2.5", "min_iters"),
    ("case_timeout = nan", "case_timeout"),
    ('exporter = "torchscript"', "exporter"),
])
def test_a_bad_measure_value_names_the_spec_file_and_the_key_with_the_message_of_harness_run(
        tmp_path, fakes, capsys, line, option):
    """[measure] is read by the run options' own definitions: the spec's error is the file, the table, the key
    and its value, then exactly what `harness run` says of the same value."""
    import tomllib

    key, value = next(iter(tomllib.loads(line).items()))
    with pytest.raises(UsageError) as cli:
        _run_options(tmp_path, **{option: line.split(" = ")[1].strip('"')})
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace("min_time = 0.01\nmin_iters = 5\nwarmup = 1", line, 1))
    with pytest.raises(SpecError) as info:
        load_spec(p, spec_case)
    assert str(info.value) == f"{p}: [measure] {key} = {value!r}: {cli.value}"
    assert main(["qualify", str(p)]) == 2
    assert f"{p}: [measure] {key} = {value!r}: {cli.value}" in capsys.readouterr().err


def test_every_measure_key_sets_what_its_run_option_sets(tmp_path, fakes):
    table = ('min_time = 0.02\nmin_iters = 3\nwarmup = 2\nnoise_cv = 0.2\nthreads = 1\nseed = 7\ncase_timeout = 30\n'
             'case_memory = 2.5\nexporter = "legacy"\nisolation = false')
    p = tmp_path / "all.toml"
    p.write_text(GOOD.replace("min_time = 0.01\nmin_iters = 5\nwarmup = 1", table, 1))
    spec = spec_run_config(load_spec(p, spec_case), tmp_path / "q")
    run = _run_options(tmp_path, min_time="0.02", min_iters="3", warmup="2", noise_cv="0.2", threads="1", seed="7",
                       case_timeout="30", case_memory="2.5", exporter="legacy", no_isolation=True)
    assert spec.measure == run.measure and spec.process == run.process
    assert spec.inputs.seed == run.inputs.seed == 7 and spec.artifacts.exporter == run.artifacts.exporter == "legacy"
    p.write_text(GOOD.replace("min_time = 0.01", "isolation = true", 1))
    assert spec_run_config(load_spec(p, spec_case), tmp_path / "q").process.isolation is True
    p.write_text(GOOD.replace("min_time = 0.01", 'isolation = "no"', 1))
    with pytest.raises(SpecError, match=r"\[measure\] isolation = 'no' must be true or false"):
        load_spec(p, spec_case)


GOLDEN = """name = "golden-box"
[measure]
min_time = 0.05
min_iters = 10
[defaults.require]
p50_ms_max = 1000
[[case]]
model = "fake-linear"
runtime = "fake-flip"
batch = 4
"""


@pytest.mark.slow  # the e2e tier: three qualify runs in subprocesses (about 25 s)
def test_golden_outputs_recorded_then_a_corrupting_machine_fails_with_the_element(fake_env, tmp_path, fakes):
    spec = tmp_path / "golden.toml"
    spec.write_text(GOLDEN)

    def qualify(*extra, flip="0"):
        out = tmp_path / f"q{len(list(tmp_path.glob('q*')))}"
        res = subprocess.run([sys.executable, "-m", "harness.cli", "qualify", str(spec), "--out", str(out), *extra],
                             capture_output=True, text=True, env={**fake_env, "FAKE_FLIP_K": flip}, timeout=300)
        return res, out

    res, _ = qualify("--record-golden")
    assert res.returncode == 0, res.stdout + res.stderr
    store = tmp_path / "golden-box.golden"
    index = json.loads((store / "index.json").read_text())
    record = index["fake-linear-fake-flip-fp32-b4"]
    assert record["rule"] == "bitwise" and (store / f"{record['sha256']}.npz").is_file()
    assert "golden outputs: 1 case(s) recorded" in res.stdout
    res, _ = qualify()  # the same machine: equal
    assert res.returncode == 0 and re.search(r"PASS\s+\S+\s+outputs equal the golden outputs", res.stdout), res.stdout
    res, out = qualify(flip="1")  # every call wrong in one element
    assert res.returncode == 1, res.stdout + res.stderr
    assert re.search(r"FAIL\s+\S+\s+outputs equal the golden outputs\s+wrong results \(persistent: 5 of 5", res.stdout)
    assert "y[0, 3]" in res.stdout
