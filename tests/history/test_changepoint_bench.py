"""The change-point benchmark's plumbing with fakes: the JSON-over-stdin driver, a venv that cannot be built,
scoring and bad options (no competitor is installed here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_changepoint_corpus import _bench


@pytest.fixture
def bench(monkeypatch):
    mod = _bench()
    fake = {"requirement": "fake-detector==1.0", "dist": "pytest", "setting": "every 50th point",
            "code": "def detect(x, seed):\n    return [i for i in range(50, len(x), 50)]\n"}
    monkeypatch.setitem(mod.COMPETITORS, "fake", fake)
    return mod


def test_a_competitor_is_driven_over_json_on_stdin(bench) -> None:
    series = [bench.generate("step_function", s, 120) for s in range(3)]
    version, found = bench.run_competitor(Path(sys.executable), "fake", series)
    assert version == __import__("pytest").__version__
    assert [f for f, _ in found] == [[50, 100]] * 3 and all(t >= 0 for _, t in found)
    assert bench.run_competitor(Path(sys.executable), "fake", series, jobs=2)[1][0][0] == [50, 100]  # in order
    score = bench.score(series, found, 5)
    assert (score.tp, score.fp, score.fn) == (0, 6, 3)  # the true step is at 60: 10 points from 50


def test_a_venv_that_cannot_be_built_is_one_line(bench, tmp_path, monkeypatch) -> None:
    python = sys.executable
    monkeypatch.setitem(bench.COMPETITORS["fake"], "requirement", "no-such-package-harness-test==0.0.0")
    monkeypatch.setattr(bench.sys, "executable", str(tmp_path / "no-python"))
    with pytest.raises(bench.DetectorUnavailable, match=r"^fake: `.*` failed"):
        bench.venv_python(tmp_path, "fake", log=lambda m: None)
    ready = tmp_path / "fake"
    ready.mkdir(exist_ok=True)
    (ready / "bin").mkdir(exist_ok=True)
    (ready / "bin" / "python").symlink_to(python)
    (ready / "ready.txt").write_text("no-such-package-harness-test==0.0.0\n")
    assert bench.venv_python(tmp_path, "fake", log=lambda m: None) == ready / "bin" / "python"  # reused


def test_bad_options_exit_2(bench, capsys) -> None:
    assert bench.main(["--patterns", "nope"]) == 2
    assert "unknown 'nope'" in capsys.readouterr().err
    assert bench.main(["--count", "0"]) == 2


def test_ours_alone_on_two_patterns(bench, tmp_path, capsys) -> None:
    out = tmp_path / "cp.json"
    assert bench.main(["--count", "2", "--patterns", "step_function,noise_normal", "--detectors", "harness",
                       "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| step | 100.0 / 100.0 / 100.0 |" in text and "seeds 0..1 per pattern" in text
    import json

    data = json.loads(out.read_text())
    assert data["results"]["noise_normal"]["harness"]["series"] == 2 and data["seeds"] == [0, 1]


def test_our_corpora_are_seeded_and_labelled(bench) -> None:
    for name in bench.SYNTHETIC:
        a, b = bench.generate(name, 3, 120), bench.generate(name, 3, 120)
        assert a.values == b.values and len(a.values) == 120  # the seed decides
        assert a.truth == ([72] if name.endswith("_step") else [])
        assert bench.generate(name, 4, 120).values != a.values
    assert set(bench.SYNTHETIC) == {p for g in ("autocorrelated", "autocorrelated step", "wander", "wander step",
                                                "seasonal", "bimodal", "quiet", "quiet step")
                                       for p in bench.GROUPS[g]}
    assert "binseg" in bench.COMPETITORS and "Binseg(model='l2')" in bench.COMPETITORS["binseg"]["code"]
