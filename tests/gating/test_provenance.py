"""Certificates anyone can check (harness.gating.provenance): the provenance bundled, the seal, `--verify` naming
an edited field or a changed file, bands from the activations, `--reproduce` end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gating_synth import case_result, samples

from harness.cli import main
from harness.results import write_results
from harness.results.schema import Block, CaseId, RunResults
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord

SPEC = """name = "prov-box"
[measure]
min_time = 0.1
min_iters = 20
[defaults.require]
p50_ms_max = 1000
throughput_sps_min = 1
[[case]]
model = "fake-linear"
runtime = "fake-ok"
batch = 1
"""
CASE = CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu")


@pytest.fixture
def certified(tmp_path, fakes, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    ns = samples(2.0, 90, 1) + samples(2.04, 90, 2) + samples(1.98, 90, 3)
    blocks = [Block.measured(ns[i:i + 90], "case") for i in (0, 90, 180)]
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"python": "3.11", "libraries": {"numpy": "2"}}),
                     config={"seed": 0}, cases=[case_result(CASE, ns, blocks=blocks, feed_sha256="f" * 64)],
                     complete=True)
    res = write_results(run, tmp_path / "run")
    assert main(["qualify", str(spec), "--results", str(res)]) == 0
    capsys.readouterr()
    return tmp_path / "run" / "certificate.json"


def test_a_certificate_bundles_its_provenance_and_verifies(certified, capsys):
    doc = json.loads(certified.read_text())
    prov = doc["provenance"]
    assert prov["spec_text"] == SPEC and prov["feeds"][CASE.id] == {"seed": 0, "sha256": "f" * 64}
    assert prov["environment_lock"]["libraries"] == {"numpy": "2"}
    bands = {b["requirement"]: b for b in prov["bands"].values()}
    p50 = bands["p50_ms_max"]
    assert p50["blocks"] == 3 and p50["low"] < p50["measured"] < p50["high"] and p50["pct"] >= 2.0
    assert doc["seal"]["sha256"] and "requirements[0].measured" in doc["seal"]["fields"]
    assert main(["qualify", "--verify", str(certified)]) == 0
    out = capsys.readouterr().out
    assert "ok  seal:" in out and "re-judged 2 requirements from the results: the same" in out and "verified" in out


def test_an_edited_certificate_is_refused_naming_the_field(certified, capsys):
    doc = json.loads(certified.read_text())
    doc["requirements"][0]["measured"] = doc["requirements"][0]["measured"] * 0.5  # a nicer figure, by hand
    certified.write_text(json.dumps(doc, indent=1))
    assert main(["qualify", "--verify", str(certified)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  seal broken: edited field requirements[0].measured" in out
    assert "REFUSED: seal broken" in out


def test_a_resealed_edit_is_still_refused_by_the_results(certified, capsys):
    from harness.gating.provenance import seal

    doc = json.loads(certified.read_text())
    doc["requirements"][0]["measured"] = 0.5
    doc["seal"] = seal(doc)  # whoever edits can recompute the seal; the results behind it still disagree
    certified.write_text(json.dumps(doc, indent=1))
    assert main(["qualify", "--verify", str(certified)]) == 1
    out = capsys.readouterr().out
    assert "ok  seal:" in out and "requirements[0].measured: the certificate says 0.5" in out
    results = certified.parent / "results.json"
    results.write_text(results.read_text().replace('"complete": true', '"complete": false'))
    assert main(["qualify", "--verify", str(certified)]) == 1
    assert "sha256 is " in capsys.readouterr().out


def test_verify_refuses_a_certificate_without_a_seal(certified, capsys):
    doc = json.loads(certified.read_text())
    del doc["seal"]
    certified.write_text(json.dumps(doc))
    assert main(["qualify", "--verify", str(certified)]) == 1
    assert "no seal" in capsys.readouterr().out


@pytest.mark.slow  # the e2e tier: a qualify run and its reproduction in subprocesses
def test_reproduce_reruns_the_bundled_spec_and_judges_each_figure_by_its_band(fake_env, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace('runtime = "fake-ok"', 'runtime = "fake-2ms"'))
    out = tmp_path / "q"
    res = subprocess.run([sys.executable, "-m", "harness.cli", "qualify", str(spec), "--out", str(out)],
                         capture_output=True, text=True, env=fake_env, timeout=300)
    assert res.returncode in (0, 3), res.stdout + res.stderr
    spec.unlink()  # the certificate carries its spec
    res = subprocess.run([sys.executable, "-m", "harness.cli", "qualify", "--reproduce", str(out / "certificate.json"),
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, env=fake_env, timeout=300)
    assert res.returncode in (0, 1, 3), res.stdout + res.stderr
    assert "reproduced" in res.stdout and "figures within their bands" in res.stdout
    doc = json.loads((tmp_path / "r" / "reproduce.json").read_text())
    assert {r["requirement"] for r in doc["rows"]} == {"p50_ms_max", "throughput_sps_min"}
    assert all(r["status"] in ("reproduced", "not reproduced", "contended", "band contended") for r in doc["rows"])


def test_reproduce_rows_say_contention_apart_only_in_its_direction():
    from types import SimpleNamespace

    from harness.gating.provenance import reproduce_rows

    doc = {"provenance": {"bands": {
        "0": {"case_id": "c", "requirement": "p50_ms_max", "measured": 10.0, "low": 9.0, "high": 11.0, "blocks": 3},
        "1": {"case_id": "c", "requirement": "throughput_sps_min", "measured": 100.0, "low": 90.0, "high": 110.0,
              "blocks": 3},
        "2": {"case_id": "c", "requirement": "p99_ms_max", "measured": 12.0, "low": 11.0, "high": 13.0, "blocks": 3,
              "contended": True}}}}

    def rows(p50, tp, contended):
        reqs = [SimpleNamespace(case_id="c", requirement=k, measured=v)
                for k, v in (("p50_ms_max", p50), ("throughput_sps_min", tp), ("p99_ms_max", 12.0))]
        run = SimpleNamespace(cases=[SimpleNamespace(case=SimpleNamespace(id="c"), details={},
                                                     contention=CaseContentionRecord(contended=contended))])
        return [r["status"] for r in reproduce_rows(doc, run, SimpleNamespace(requirements=reqs))]

    assert rows(10.5, 95.0, False) == ["reproduced", "reproduced", "band contended"]
    assert rows(14.0, 80.0, True) == ["contended", "contended", "band contended"]  # slower: contention explains
    assert rows(7.0, 130.0, True) == ["not reproduced", "not reproduced", "band contended"]  # faster: it cannot
    assert rows(14.0, 80.0, False) == ["not reproduced", "not reproduced", "band contended"]


def test_qualify_refuses_options_that_do_not_go_together(tmp_path, fakes, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    for argv, message in (([str(spec), "--serial"], "--nodes, --serial and --node-deadline qualify a fleet"),
                          (["--verify", "c.json", str(spec)], "--verify and --reproduce take a certificate only"),
                          ([], "give a spec file"),
                          ([str(spec), "--burn-in", "zz"], "expected a duration such as 90s"),
                          ([str(spec), "--node-deadline", "60"], "--node-deadline qualify a fleet: give --ray"),
                          ([str(spec), "--ray", "auto", "--node-deadline", "0"],
                           "--node-deadline '0': expected a duration such as 90s"),
                          ([str(spec), "--burn-in", "1m", "--results", "r.json"], "--burn-in runs the spec in rounds"),
                          ([str(spec), "--env-wheels", "w"], "--env-wheels builds the certified releases'"),
                          ([str(spec), "--record-golden", "--ray", "auto"], "--record-golden runs the spec on this"),
                          (["--verify", str(tmp_path / "none.json")], "not a readable certificate")):
        assert main(["qualify", *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_a_band_is_a_prediction_interval_over_the_activations_and_unjudged_figures_get_none():
    from harness.gating.provenance import band
    from harness.gating.qualify import RequirementResult

    def req(measured, unjudged=""):
        return RequirementResult(CASE.id, "p50_ms_max", "latency p50", 10.0, measured, "ms", True, None, None, "",
                                 bool(unjudged), unjudged)

    def result(blocks):  # one block of 50 identical samples per activation: each block's p50 is its value
        ns = [int(v * 1e6) for v in blocks for _ in range(50)]
        return case_result(CASE, ns, blocks=[Block(samples=50, p50_ms=v) for v in blocks])

    import numpy as np
    from scipy.stats import t

    spread = band(result([1.0, 1.1, 0.9]), req(1.0))
    logs = np.log([1.0, 1.1, 0.9])
    half = t.ppf(0.975, 2) * np.std(logs, ddof=1) * np.sqrt(2 / 3)
    assert spread["blocks"] == 3 and spread["low"] == pytest.approx(np.exp(-half)) and spread["high"] == (
        pytest.approx(np.exp(half)))
    tight = band(result([1.0, 1.0001, 0.9999]), req(1.0))
    assert tight["high"] == pytest.approx(1.04) and tight["low"] == pytest.approx(1 / 1.04)  # the 4% floor
    assert band(result([1.0, 1.1, 0.9]), req(1.0, "too few samples")) is None  # certified nothing: no band
    assert band(result([1.0]), req(1.0)) is None  # one activation: no spread to band by
