"""The generation workload through plain pytest (the suites, supervised worker processes), as `harness run`."""

from __future__ import annotations

import json

from harness.commands.run import suites_dir

SUITES_DIR = suites_dir()
INI = str(SUITES_DIR / "pytest.ini")


def test_plain_pytest_runs_the_generation_matrix_in_workers(pytester, fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_PLUGINS", "gen_fakes")
    out = tmp_path / "run"
    res = pytester.runpytest_subprocess(
        str(SUITES_DIR), "-c", INI, "--rootdir", str(SUITES_DIR), f"--harness-out={out}",
        "--harness-workload=generate", "--harness-models=fake-lm", "--harness-runtimes=fake-gen,fake-gen-diverges",
        "--harness-batch-sizes=1", "--harness-prompt-lens=8", "--harness-output-lens=10",
        "--harness-min-time=0", "--harness-min-iters=3", "--harness-repeats=1")
    assert res.ret == 0, res.stdout.str()
    doc = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in doc["cases"]] == ["fake-lm-fake-gen-fp32-b1-s8-g10",
                                               "fake-lm-fake-gen-diverges-fp32-b1-s8-g10"]
    assert doc["config"]["workload"] == "generate"
    assert [c["generation"]["conformance"]["first_divergence"] for c in doc["cases"]] == [None, 5]
    assert "Generation" in (out / "report.html").read_text()
    assert "tpot_p50_ms" in (out / "results.csv").read_text().splitlines()[0]
