"""The real-world corpus of the change-point benchmark (`--corpus-dir`): a TCPD-format reader and TCPDBench's
scores, on small corpora written here (the Turing Change Point Dataset itself is never stored or fetched)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_changepoint_corpus import _bench


def _tcpd():
    """suites/benchmarks/changepoints_tcpd.py of this checkout."""
    path = Path(__file__).resolve().parents[2] / "suites" / "benchmarks" / "changepoints_tcpd.py"
    if "changepoints_tcpd_bench" not in sys.modules:
        spec = importlib.util.spec_from_file_location("changepoints_tcpd_bench", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["changepoints_tcpd_bench"]


def _series(name: str, values, n_dim: int = 1) -> dict:
    return {"name": name, "longname": name, "n_obs": len(values), "n_dim": n_dim,
            "time": {"index": list(range(len(values)))},
            "series": [{"label": f"V{i}", "type": "float", "raw": list(values)} for i in range(n_dim)]}


def test_tcpdbench_f1_and_covering_on_its_documented_examples() -> None:
    t = _tcpd()
    # TCPDBench's analysis/scripts/metrics.py documents these values
    assert t.f_measure({"1": [10, 20], "2": [11, 20], "3": [10], "4": [0, 5]}, [10, 20])[0] == 1.0
    assert t.f_measure({"1": [], "2": [10], "3": [50]}, [10])[0] == pytest.approx(0.9090909090909091)
    assert t.f_measure({"1": [], "2": [10], "3": [50]}, [])[0] == pytest.approx(0.8)
    assert t.true_positives({1, 10, 20, 23}, {1, 3, 5, 8, 20}) == {1, 10, 20}
    assert t.true_positives(set(), {1, 2}) == set() and t.true_positives({1, 2}, set()) == set()
    assert t.covering({"1": [10, 20], "2": [10], "3": [0, 5]}, [10, 20], 45) == pytest.approx(0.7962962962962963)
    assert t.covering({"1": [], "2": [10], "3": [40]}, [10], 45) == pytest.approx(0.7954144620811286)
    assert t.covering({"1": [], "2": [10], "3": [40]}, [], 45) == pytest.approx(0.8189300411522634)
    assert t.cover(t.partition([], 6), t.partition([4], 6)) == pytest.approx(4 / 6)
    assert [list(r) for r in t.partition([1, 2, 7], 8)] == [[0], [1], [2, 3, 4, 5, 6], [7]]
    assert t.clean([0, 3, 3, 9, 10], 10) == [3]  # the ends are no change points, duplicates count once


def test_the_reader_takes_both_layouts_and_says_what_it_skipped(tmp_path) -> None:
    t = _tcpd()
    (tmp_path / "flat.json").write_text(json.dumps(_series("flat", [1.0, 2.0, 3.0, 4.0])))
    (tmp_path / "datasets" / "gappy").mkdir(parents=True)
    (tmp_path / "datasets" / "gappy" / "gappy.json").write_text(json.dumps(_series("gappy", [1.0, None, 3.0, None])))
    (tmp_path / "two.json").write_text(json.dumps(_series("two", [1.0, 2.0], n_dim=2)))
    (tmp_path / "schema.json").write_text(json.dumps({"type": "object"}))  # not a series: ignored
    (tmp_path / "annotations.json").write_text(json.dumps(
        {"flat": {"1": [2], "2": []}, "gappy": {"7": [1]}, "two": {"1": []}, "gone": {"1": [3]}}))
    series, skipped = t.read_corpus(tmp_path)
    assert [s.name for s in series] == ["flat", "gappy"]
    gappy = series[1]
    assert gappy.values == [1.0, 2.0, 3.0, 3.0] and gappy.missing == 2 and gappy.annotations == {"7": [1]}
    assert dict(skipped) == {"two": "2 dimensions (univariate only)",
                             "gone": "annotated, no series file in the folder"}
    (tmp_path / "annotations.json").unlink()
    with pytest.raises(t.CorpusError, match="no annotations.json"):
        t.read_corpus(tmp_path)


def test_what_ours_reads_and_the_residuals_dependence() -> None:
    t = _tcpd()
    assert t.for_ours([3.0, 5.0]) == [3.0, 5.0]
    assert t.for_ours([-1.0, 1.0]) == [2.0, 4.0]  # minimum moved to the range
    rng = np.random.default_rng(0)
    iid = list(rng.normal(0, 1, 300))
    walk = list(np.cumsum(rng.normal(0, 1, 300)))
    assert abs(t.residual_lag1(iid, {"1": []})) < 0.2 and t.residual_lag1(walk, {"1": []}) > 0.7
    step = [0.0] * 50 + [10.0] * 50
    step = [v + e for v, e in zip(step, rng.normal(0, 1, 100), strict=True)]
    assert t.residual_lag1(step, {"1": [50]}) < 0.3 < t.residual_lag1(step, {"1": []})  # the marked step is out


def test_the_benchmark_scores_a_corpus_folder(tmp_path, capsys) -> None:
    rng = np.random.default_rng(1)
    step = list(100 + rng.normal(0, 1, 60) + np.r_[np.zeros(30), np.full(30, 20.0)])
    flat = list(50 + rng.normal(0, 1, 60))
    for name, vals in (("step", step), ("flat", flat)):
        (tmp_path / f"{name}.json").write_text(json.dumps(_series(name, vals)))
    (tmp_path / "annotations.json").write_text(json.dumps({"step": {"1": [30], "2": [31]}, "flat": {"1": []}}))
    out = tmp_path / "real.json"
    bench = _bench()
    assert bench.main(["--corpus-dir", str(tmp_path), "--detectors", "harness,zero", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 annotated univariate series" in text and "| harness | 1.000 / " in text
    data = json.loads(out.read_text())
    assert data["results"]["harness"]["step"]["found"] == [30] and data["results"]["zero"]["flat"]["f1"] == 1.0
    assert data["results"]["zero"]["step"]["f1"] < 1.0 and data["series"]["step"]["n"] == 60
    assert bench.main(["--corpus-dir", str(tmp_path / "none")]) == 2
    assert "no annotations.json" in capsys.readouterr().err
    assert bench.main(["--corpus-dir", str(tmp_path), "--detectors", "nope"]) == 2
