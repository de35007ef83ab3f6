"""Change-point detectors side by side on otava-test-data's labelled patterns and on our own seeded corpora of
autocorrelated and wandering histories: ours (`harness history changes`), apache-otava (defaults), MongoDB's
e-divisive (signal-processing-algorithms), ruptures' PELT and binary segmentation.

    python -m harness_suites.benchmarks.changepoints [--count 1000] [--seed 0] [--length 200] [--margin 5]
        [--patterns step_function,...] [--detectors harness,otava,edivisive,pelt,binseg] [--jobs N] [--json FILE]
        [--markdown FILE]
    python -m harness_suites.benchmarks.changepoints --corpus-dir DIR [--detectors harness,zero,pelt_mbic,...]
        [--json FILE] [--markdown FILE]

Series: the 17 patterns of otava-test-data's visualiser (its `GENERATORS` table, the package's own default
parameters; `python -m harness_suites.benchmarks.changepoints --list` shows them), generated here from the
package's generators with seeds SEED .. SEED+COUNT-1 (the same seeds for every pattern and detector). Ground
truth is the package's change points less the outliers (as the package's own scoring does: an outlier is an
anomaly, not a change point).

Our own corpora (#53, generated here with numpy from the seed, nothing downloaded; `SYNTHETIC`): flat AR(1)
noise at phi 0.5, 0.8 and 0.9 (2% marginal sigma), AR(1) noise with a 10% step, a random walk with and without a
15% step, a seasonal pattern with and without a step, two alternating levels (modes) with and without a step of
both; and quiet histories (#53c: flatter than the 0.2% noise floor, 0.05% noise) with a smooth trend, a slow
drift or a slow wave, each with and without a +3% step. Ground truth: the steps (a wander, a season, a trend
and modes are not change points).

A labelled real-world corpus (`--corpus-dir DIR`, changepoints_tcpd): the Turing Change Point Dataset's format
(github.com/alan-turing-institute/TCPD: clone it, run its `make` for the series it cannot redistribute, pass the
folder; or any folder of NAME.json series with an annotations.json). Nothing of it is stored here. Scored with
TCPDBench's F1 (margin 5, over the annotators) and segmentation covering, ours beside no change point and
TCPDBench's default PELT and binary segmentation, split by the lag-1 autocorrelation of the residuals.

Ours runs in this process exactly as `harness history changes` calls it (harness.history.changes.detect with
its defaults). Each detector's first call is an untimed warm-up. Each competitor runs in a virtual environment of its own (their numpy pins conflict with ours
and with each other): a plain venv under CACHE/changepoint-detectors/NAME, built on first use with `pip
install` from the package index, then driven by a small script reading JSON on stdin; nothing of theirs is
imported here and nothing is fetched at run time once the venvs exist.

Scoring as the change-point literature does it: a detection within MARGIN points of a true change point is a
hit (each true change and each detection matched at most once); precision, recall and F1 per pattern over all
its series; on the patterns without change points the false change points per series and the share of series
with any; the detector's own time per series (measured around the call, without process start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# otava-test-data 0.1.9's visualiser table (otava_test_data/web/main.py GENERATORS): generator and the parameter
# defaults it shows. Restated here because that module needs fastapi; the generators are the package's own.
PATTERNS: dict[str, tuple[str, dict[str, Any]]] = {
    "constant": ("constant", {"value": 100.0}),
    "noise_normal": ("noise_normal", {"mean": 100.0, "sigma": 5.0}),
    "noise_uniform": ("noise_uniform", {"min_val": 90.0, "max_val": 110.0}),
    "outlier": ("outlier", {"baseline": 100.0, "outlier_value": 150.0, "sigma": 5.0}),
    "step_function": ("step_function", {"value_before": 100.0, "value_after": 120.0, "sigma": 5.0}),
    "regression_fix": ("regression_fix", {"value_normal": 100.0, "value_regression": 130.0,
                                          "regression_duration": 20, "sigma": 5.0}),
    "banding": ("banding", {"value1": 100.0, "value2": 105.0, "sigma": 2.0}),
    "variance_change": ("variance_change", {"mean": 100.0, "sigma_before": 2.0, "sigma_after": 10.0}),
    "phase_change": ("phase_change", {"amplitude": 10.0, "baseline": 100.0, "period": 20, "sigma": 2.0}),
    "multiple_changes": ("multiple_changes", {"sigma": 5.0}),
    "multiple_outliers": ("multiple_outliers", {"baseline": 100.0, "outlier_value": 150.0, "n_outliers": 5,
                                                "sigma": 5.0}),
    "multiple_variance_changes": ("multiple_variance_changes", {"mean": 100.0}),
    "step_function_clean": ("step_function", {"value_before": 100.0, "value_after": 120.0, "sigma": 0.0}),
    "multiple_changes_clean": ("multiple_changes", {"sigma": 0.0}),
    "regression_fix_clean": ("regression_fix", {"value_normal": 100.0, "value_regression": 130.0,
                                                "regression_duration": 20, "sigma": 0.0}),
    "banding_clean": ("banding", {"value1": 100.0, "value2": 110.0, "sigma": 0.0}),
    "outlier_clean": ("outlier", {"baseline": 100.0, "outlier_value": 150.0, "sigma": 0.0}),
}
# what each pattern stands for in a benchmark history (the goal is stated per group)
GROUPS = {
    "step": ("step_function", "step_function_clean"),
    "multiple": ("multiple_changes", "multiple_changes_clean", "regression_fix", "regression_fix_clean"),
    "variance": ("variance_change", "multiple_variance_changes"),
    "flat": ("constant", "noise_normal", "noise_uniform", "banding", "banding_clean"),
    "outliers": ("outlier", "outlier_clean", "multiple_outliers"),
    "phase": ("phase_change",),
    "autocorrelated": ("ar1_0.5", "ar1_0.8", "ar1_0.9"),
    "autocorrelated step": ("ar1_0.8_step",),
    "wander": ("random_walk",),
    "wander step": ("random_walk_step",),
    "seasonal": ("seasonal", "seasonal_step"),
    "bimodal": ("bimodal", "bimodal_step"),
    "quiet": ("quiet_trend", "quiet_drift", "quiet_season"),
    "quiet step": ("quiet_trend_step", "quiet_drift_step", "quiet_season_step"),
}


def _ar1(rng: Any, n: int, phi: float, sigma: float) -> Any:
    """AR(1) noise of marginal sigma `sigma`, started in its stationary distribution."""
    import numpy as np

    e = rng.standard_normal(n) * sigma * (1 - phi**2) ** 0.5
    x = np.empty(n)
    x[0] = rng.standard_normal() * sigma
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


def _synthetic(name: str, seed: int, length: int) -> tuple[list[float], list[int]]:
    """(values, true change points) of one of our corpora (SYNTHETIC), level 100."""
    import numpy as np

    rng = np.random.default_rng([seed, sum(map(ord, name))])
    n = length
    at = int(0.6 * n)
    step = np.zeros(n)
    if name.startswith("ar1_"):
        phi = float(name.split("_")[1])
        x = 100 * (1 + _ar1(rng, n, phi, 0.02))
        if name.endswith("_step"):
            x[at:] *= 1.10
            return list(x), [at]
        return list(x), []
    if name.startswith("random_walk"):  # a wander of 0.4% a run, 0.5% run-to-run noise
        x = 100 * (1 + np.cumsum(0.004 * rng.standard_normal(n)) + 0.005 * rng.standard_normal(n))
        if name.endswith("_step"):
            x[at:] += 15.0
            return list(x), [at]
        return list(x), []
    if name.startswith("seasonal"):  # a period of 24 runs, 3% amplitude, 1% noise
        x = 100 * (1 + 0.03 * np.sin(2 * np.pi * (np.arange(n) + rng.integers(24)) / 24)
                   + 0.01 * rng.standard_normal(n))
        if name.endswith("_step"):
            step[at:] = 10.0
            return list(x + step), [at]
        return list(x), []
    if name.startswith("quiet_"):  # flatter than the detector's 0.2% noise floor: a smooth level, 0.05% noise
        t = np.arange(n) / n
        if name.startswith("quiet_trend"):  # a smooth growth or decline curve: 10-40% over the series, bent
            total = rng.uniform(0.1, 0.4) * rng.choice([-1.0, 1.0])
            bend = rng.uniform(-0.5, 0.5)
            level = total * (t + bend * t * (t - 1))
        elif name.startswith("quiet_drift"):  # a slow drift with momentum: its per-run change an AR(1) (phi 0.95)
            level = np.cumsum(_ar1(rng, n, 0.95, 0.001))
        else:  # quiet_season: a slow wave (period 40-80 runs, amplitude 1-3%)
            period, amp = rng.uniform(40, 80), rng.uniform(0.01, 0.03)
            level = amp * np.sin(2 * np.pi * (np.arange(n) / period + rng.random()))
        x = 100 * (1 + level + 0.0005 * rng.standard_normal(n))
        if name.endswith("_step"):
            x[at:] *= 1 + QUIET_STEP
            return list(x), [at]
        return list(x), []
    if name.startswith("bimodal"):  # two levels 20% apart, 35% of runs at the high one, 1% noise
        high = rng.random(n) < 0.35
        x = np.where(high, 120.0, 100.0) * (1 + 0.01 * rng.standard_normal(n))
        if name.endswith("_step"):
            x[at:] *= 1.08
            return list(x), [at]
        return list(x), []
    raise KeyError(name)


# our own corpora (#53): name -> what it is (generated by _synthetic)
SYNTHETIC: dict[str, str] = {
    "ar1_0.5": "flat, AR(1) noise phi 0.5, marginal sigma 2%",
    "ar1_0.8": "flat, AR(1) noise phi 0.8, marginal sigma 2%",
    "ar1_0.9": "flat, AR(1) noise phi 0.9, marginal sigma 2%",
    "ar1_0.8_step": "AR(1) noise phi 0.8 (2%), a +10% step at 60% of the series",
    "random_walk": "a level walking 0.4% a run, 0.5% noise",
    "random_walk_step": "the same walk, a +15% step at 60%",
    "seasonal": "a season of 24 runs (3% amplitude), 1% noise",
    "seasonal_step": "the same season, a +10% step at 60%",
    "bimodal": "two levels 20% apart (35% of runs at the high one), 1% noise",
    "bimodal_step": "the same modes, both +8% from 60%",
    "quiet_trend": "a smooth bent curve, 10-40% up or down over the series, 0.05% noise (under the 0.2% floor)",
    "quiet_trend_step": "the same curve, a +3% step at 60%",
    "quiet_drift": "a slow drift with momentum (its per-run change AR(1), phi 0.95, 0.1%), 0.05% noise",
    "quiet_drift_step": "the same drift, a +3% step at 60%",
    "quiet_season": "a slow wave (period 40-80 runs, amplitude 1-3%), 0.05% noise",
    "quiet_season_step": "the same wave, a +3% step at 60%",
}
QUIET_STEP = 0.03  # the quiet corpora's planted step: 15 times the detector's noise floor


@dataclass(frozen=True)
class Labelled:
    """One generated series and its true change points (first index of each new regime)."""

    pattern: str
    seed: int
    values: list[float]
    truth: list[int]


def generate(pattern: str, seed: int, length: int = 200) -> Labelled:
    """Pattern `pattern` of otava-test-data (or of our SYNTHETIC corpora) with `seed`: the values and the change
    points (outliers left out)."""
    if pattern in SYNTHETIC:
        values, truth = _synthetic(pattern, seed, length)
        return Labelled(pattern, seed, values, truth)
    from otava_test_data.generators import advanced, basic

    name, params = PATTERNS[pattern]
    gen = getattr(basic, name, None) or getattr(advanced, name)
    ts = gen(length=length, seed=seed, **params)
    truth = sorted(int(cp.index) for cp in ts.change_points if cp.change_type != "outlier")
    return Labelled(pattern, seed, [float(v) for v in ts.data], truth)


def corpus(patterns: Sequence[str], seeds: Sequence[int], length: int = 200) -> dict[str, list[Labelled]]:
    return {p: [generate(p, s, length) for s in seeds] for p in patterns}


# --- scoring -------------------------------------------------------------------------------------------------

def match(truth: Sequence[int], detected: Sequence[int], margin: int) -> int:
    """True positives: detections within `margin` of a true change point, each side matched at most once
    (each detection, in order, takes the nearest unmatched true change point in reach)."""
    free = sorted(truth)
    hits = 0
    for d in sorted(detected):
        reach = [t for t in free if abs(t - d) <= margin]
        if reach:
            free.remove(min(reach, key=lambda t: (abs(t - d), t)))
            hits += 1
    return hits


@dataclass
class Score:
    series: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    series_with_false: int = 0  # series with a detection that matches no true change point
    seconds: list[float] = field(default_factory=list)

    def add(self, truth: Sequence[int], detected: Sequence[int], seconds: float, margin: int) -> None:
        hits = match(truth, detected, margin)
        self.series += 1
        self.tp += hits
        self.fp += len(detected) - hits
        self.fn += len(truth) - hits
        self.series_with_false += len(detected) > hits
        self.seconds.append(seconds)

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None:
            return None
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, Any]:
        import statistics

        s = sorted(self.seconds)
        return {"series": self.series, "tp": self.tp, "fp": self.fp, "fn": self.fn,
                "precision": self.precision, "recall": self.recall, "f1": self.f1,
                "false_per_series": self.fp / self.series if self.series else None,
                "series_with_false": self.series_with_false,
                "mean_ms": 1e3 * statistics.fmean(s) if s else None,
                "p95_ms": 1e3 * s[min(len(s) - 1, int(0.95 * len(s)))] if s else None}


def score(series: Sequence[Labelled], detections: Sequence[tuple[list[int], float]], margin: int) -> Score:
    out = Score()
    for lab, (found, seconds) in zip(series, detections, strict=True):
        out.add(lab.truth, found, seconds, margin)
    return out


# --- detectors -----------------------------------------------------------------------------------------------

def harness_detect(values: Sequence[float], seed: int) -> list[int]:
    """Ours, as `harness history changes` calls it (defaults)."""
    from harness.history.changes import detect

    return [c.index for c in detect(values)]


# Each competitor: its pinned requirement and the body of `detect(x, seed)` run inside its own venv.
COMPETITORS: dict[str, dict[str, str]] = {
    "otava": {
        "requirement": "apache-otava==0.8.0", "dist": "apache-otava",
        "setting": "otava.analysis.compute_change_points defaults: window_len=50, max_pvalue=0.001, "
                   "min_magnitude=0",
        "code": "from otava.analysis import compute_change_points\n"
                "def detect(x, seed):\n"
                "    cps, _weak = compute_change_points(x)\n"
                "    return [int(c.index) for c in cps]\n",
    },
    "edivisive": {
        "requirement": "signal-processing-algorithms==2.1.6", "dist": "signal-processing-algorithms",
        "setting": "energy_statistics.e_divisive defaults: pvalue=0.05, permutations=100 (numpy's global "
                   "generator seeded with the series' seed)",
        "code": "import numpy as np\n"
                "from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive\n"
                "def detect(x, seed):\n"
                "    np.random.seed(seed)\n"
                "    return sorted(int(i) for i in e_divisive(np.asarray(x, dtype=float)))\n",
    },
    "pelt": {
        "requirement": "ruptures==1.1.10", "dist": "ruptures",
        "setting": "ruptures.Pelt(model='rbf') (min_size=2, jump=5) .predict(pen=10), the README's example",
        "code": "import numpy as np\n"
                "import ruptures as rpt\n"
                "def detect(x, seed):\n"
                "    return [int(b) for b in rpt.Pelt(model='rbf').fit(np.asarray(x, dtype=float)).predict(pen=10)"
                "[:-1]]\n",
    },
    "binseg": {
        "requirement": "ruptures==1.1.10", "dist": "ruptures",
        "setting": "ruptures.Binseg(model='l2') (min_size=2, jump=5) .predict(pen=2 s^2 ln n), the BIC penalty of "
                   "a mean change with s the MAD of successive differences / sqrt 2",
        "code": "import numpy as np\n"
                "import ruptures as rpt\n"
                "def detect(x, seed):\n"
                "    x = np.asarray(x, dtype=float)\n"
                "    d = np.diff(x)\n"
                "    s = 1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)\n"
                "    pen = 2 * max(s, 1e-9 * max(1.0, abs(float(np.median(x))))) ** 2 * np.log(len(x))\n"
                "    return [int(b) for b in rpt.Binseg(model='l2').fit(x).predict(pen=pen)[:-1]]\n",
    },
}
DRIVER = '''
import json, sys, time
from importlib.metadata import version
{code}
job = json.load(sys.stdin)
if job["series"]:
    detect(job["series"][0], job["seeds"][0])  # warm-up: lazy imports are not the detector's time
out = []
for x, seed in zip(job["series"], job["seeds"]):
    t0 = time.perf_counter()
    found = detect(x, seed)
    out.append([found, time.perf_counter() - t0])
json.dump({{"version": version({dist!r}), "results": out}}, sys.stdout)
'''


class DetectorUnavailable(RuntimeError):
    pass


def venv_python(cache: Path, name: str, log: Callable[[str], None] = print) -> Path:
    """The detector's venv (built on first use: `python -m venv`, then `pip install REQUIREMENT`)."""
    spec = COMPETITORS[name]
    root = cache / name
    py = root / "bin" / "python"
    ready = root / "ready.txt"
    if ready.is_file() and ready.read_text().strip() == spec["requirement"] and py.exists():
        return py
    log(f"building the {name} environment in {root} (pip install {spec['requirement']}) ...")
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    steps = [[sys.executable, "-m", "venv", str(root)],
             [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec["requirement"]]]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True)
        except OSError as exc:
            raise DetectorUnavailable(f"{name}: `{' '.join(cmd[-3:])}` failed: {exc}") from None
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DetectorUnavailable(f"{name}: `{' '.join(cmd[-3:])}` failed: {tail[0]}")
    ready.write_text(spec["requirement"] + "\n")
    return py


def run_competitor(py: Path, name: str, series: Sequence[Labelled], jobs: int = 1,
                   spec: dict[str, str] | None = None) -> tuple[str, list[tuple[list[int], float]]]:
    """(version, [(detected indices, seconds)]) from the detector's venv: `jobs` processes, each a contiguous
    share of the series (the results in the series' order). `spec`: the detector's entry when it is not
    COMPETITORS[name] (the real-world corpus' defaults, changepoints_tcpd.DEFAULTS)."""
    if jobs > 1 and len(series) > 1:
        from concurrent.futures import ThreadPoolExecutor

        size = -(-len(series) // jobs)
        chunks = [series[i:i + size] for i in range(0, len(series), size)]
        with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
            parts = list(pool.map(lambda c: run_competitor(py, name, c, spec=spec), chunks))
        return parts[0][0], [r for _, found in parts for r in found]
    spec = spec or COMPETITORS[name]
    script = DRIVER.format(code=spec["code"], dist=spec["dist"])
    job = json.dumps({"series": [s.values for s in series], "seeds": [s.seed for s in series]})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    try:
        done = subprocess.run([str(py), "-c", script], check=False, input=job, capture_output=True, text=True,
                              env=env)
    except OSError as exc:
        raise DetectorUnavailable(f"{name}: its environment's python cannot run: {exc}") from None
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise DetectorUnavailable(f"{name}: its driver failed: {tail[0]}")
    reply = json.loads(done.stdout)
    return reply["version"], [(list(f), float(s)) for f, s in reply["results"]]


def run_harness(series: Sequence[Labelled]) -> list[tuple[list[int], float]]:
    if series:
        harness_detect(series[0].values, series[0].seed)  # warm-up: lazy imports are not the detector's time
    out = []
    for s in series:
        t0 = time.perf_counter()
        found = harness_detect(s.values, s.seed)
        out.append((found, time.perf_counter() - t0))
    return out


# --- the table -----------------------------------------------------------------------------------------------

def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def markdown(results: dict[str, dict[str, dict[str, Any]]], detectors: Sequence[str]) -> str:
    """Per pattern (rows, grouped) and detector (column groups): P/R/F1 (%), or on patterns without change
    points the false change points per series and the share of series with any; mean ms per series."""
    lines = ["| group | pattern | " + " | ".join(f"{d} P / R / F1 (%)" for d in detectors) + " | "
             + " | ".join(f"{d} ms" for d in detectors) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in detectors) * 2 + " |"]
    lines[1] = "| --- | --- | " + " | ".join("---:" for _ in range(2 * len(detectors))) + " |"
    for group, names in GROUPS.items():
        for p in names:
            if p not in results:
                continue
            cells, times = [], []
            for d in detectors:
                r = results[p].get(d)
                if r is None:
                    cells.append("n/a")
                    times.append("n/a")
                    continue
                if r["tp"] + r["fn"] == 0:  # no change points: what a detector says is all false
                    cells.append(f"{r['false_per_series']:.3f} false/series, {r['series_with_false']}"
                                 f"/{r['series']} series")
                else:
                    cells.append(f"{_pct(r['precision'])} / {_pct(r['recall'])} / {_pct(r['f1'])}")
                times.append(f"{r['mean_ms']:.1f}")
            lines.append(f"| {group} | {p} | " + " | ".join(cells) + " | " + " | ".join(times) + " |")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The checkout's git commit (the detector scored), or "unknown"."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], check=False, capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent)
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def group_markdown(results: dict[str, dict[str, dict[str, Any]]], detectors: Sequence[str]) -> str:
    """The patterns pooled per group: precision/recall/F1 (%) where the group has change points, else the
    series with a false change point."""
    lines = ["| group | " + " | ".join(detectors) + " |", "| --- | " + " | ".join("---:" for _ in detectors) + " |"]
    for group, names in GROUPS.items():
        cells = []
        for d in detectors:
            rs = [results[p][d] for p in names if p in results and d in results[p]]
            if not rs:
                cells.append("n/a")
                continue
            pooled = Score(series=sum(r["series"] for r in rs), tp=sum(r["tp"] for r in rs),
                           fp=sum(r["fp"] for r in rs), fn=sum(r["fn"] for r in rs))
            bad = sum(r["series_with_false"] for r in rs)
            if pooled.tp + pooled.fn:
                cells.append(f"{_pct(pooled.precision)} / {_pct(pooled.recall)} / {_pct(pooled.f1)}")
            else:
                cells.append(f"{bad}/{pooled.series} series with a false change point "
                             f"({100 * bad / pooled.series:.1f}%)")
        if any(c != "n/a" for c in cells):
            lines.append(f"| {group} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from harness.artifacts.cache import default_cache_dir

    p = argparse.ArgumentParser(prog="python -m harness_suites.benchmarks.changepoints",
                                description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1000, help="series per pattern (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="first seed: series use SEED .. SEED+COUNT-1 (default 0)")
    p.add_argument("--length", type=int, default=200, help="points per series (default 200, the package's)")
    p.add_argument("--margin", type=int, default=5, help="a detection this close to a true change is a hit")
    p.add_argument("--patterns", default=",".join(PATTERNS),
                   help="comma-separated (default: otava-test-data's 17; ours: " + ",".join(SYNTHETIC) + ")")
    p.add_argument("--detectors", default="harness," + ",".join(COMPETITORS),
                   help="comma-separated from harness," + ",".join(COMPETITORS))
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the detectors' venvs live (default: $HARNESS_CACHE_DIR or ~/.cache/harness, "
                        "under changepoint-detectors/)")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes per competitor, each a share of a pattern's series (default 1; on a quiet "
                        "machine with N cores, N-1: e-divisive takes 0.1-0.5 s a series)")
    p.add_argument("--json", type=Path, help="write every figure, seed and version here")
    p.add_argument("--markdown", type=Path, help="write the table here")
    p.add_argument("--list", action="store_true", help="list the patterns and their parameters")
    p.add_argument("--corpus-dir", type=Path, default=None,
                   help="score a labelled real-world corpus in the Turing Change Point Dataset's format instead "
                        "(annotations.json and one NAME.json per series, or a clone of "
                        "github.com/alan-turing-institute/TCPD after its `make`) with TCPDBench's F1 (margin 5) "
                        "and covering; detectors default to harness,zero,pelt_mbic,binseg_mbic")
    args = p.parse_args(argv)
    if args.corpus_dir is not None:
        return corpus_main(args, p.get_default("detectors") != args.detectors)

    if args.list:
        for name, (gen, params) in PATTERNS.items():
            print(f"{name:<28} {gen}({', '.join(f'{k}={v}' for k, v in params.items())})")
        for name, what in SYNTHETIC.items():
            print(f"{name:<28} ours: {what}")
        return 0
    patterns = [x.strip() for x in args.patterns.split(",") if x.strip()]
    detectors = [x.strip() for x in args.detectors.split(",") if x.strip()]
    bad = [x for x in patterns if x not in PATTERNS and x not in SYNTHETIC] + [x for x in detectors
                                                        if x != "harness" and x not in COMPETITORS]
    if bad or args.count < 1 or args.margin < 0 or args.length < 20 or args.jobs < 1:
        what = (f"unknown {', '.join(map(repr, bad))}" if bad
                else "--count >= 1, --margin >= 0, --length >= 20, --jobs >= 1")
        print(f"changepoints: {what} (patterns: {', '.join(PATTERNS)}; detectors: harness, "
              f"{', '.join(COMPETITORS)})", file=sys.stderr)
        return 2
    try:
        import otava_test_data
    except ImportError:
        print("changepoints: otava-test-data is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    cache = (args.cache_dir or default_cache_dir()) / "changepoint-detectors"
    seeds = list(range(args.seed, args.seed + args.count))

    pythons: dict[str, Path] = {}
    unavailable: dict[str, str] = {}
    for d in detectors:
        if d != "harness":
            try:
                pythons[d] = venv_python(cache, d, lambda m: print(m, file=sys.stderr))
            except DetectorUnavailable as exc:
                unavailable[d] = str(exc)
                print(f"changepoints: {exc}", file=sys.stderr)
    versions: dict[str, str] = {}
    from importlib.metadata import version

    versions["harness"] = (f"inference-harness {version('inference-harness')} at {_commit()} (numpy "
                           f"{version('numpy')}, scipy {version('scipy')})")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    t_start = time.time()
    for pat in patterns:
        series = [generate(pat, s, args.length) for s in seeds]
        results[pat] = {}
        for d in detectors:
            if d in unavailable:
                continue
            try:
                if d == "harness":
                    found = run_harness(series)
                else:
                    versions[d], found = run_competitor(pythons[d], d, series, args.jobs)
            except DetectorUnavailable as exc:
                unavailable[d] = str(exc)
                print(f"changepoints: {exc}", file=sys.stderr)
                continue
            results[pat][d] = score(series, found, args.margin).as_dict()
            r = results[pat][d]
            print(f"{pat:<26} {d:<10} P {_pct(r['precision']):>5} R {_pct(r['recall']):>5} F1 {_pct(r['f1']):>5} "
                  f"false/series {r['false_per_series']:.3f}  {r['mean_ms']:.1f} ms/series "
                  f"[{time.time() - t_start:.0f} s]", file=sys.stderr, flush=True)
    shown = [d for d in detectors if d not in unavailable]
    command = ("python -m harness_suites.benchmarks.changepoints "
               f"--count {args.count} --seed {args.seed} --length {args.length} --margin {args.margin}")
    head = (f"{command}\n\notava-test-data {otava_test_data.__version__}; seeds {seeds[0]}..{seeds[-1]} per "
            f"pattern; margin {args.margin} points; "
            + "; ".join(f"{d}: {versions.get(d, '?')}" for d in shown) + "\n\n")
    table = (group_markdown(results, shown) + "\nPer pattern (P / R / F1 in %; no change points: false change "
             "points per series and series with any; mean ms per series):\n\n" + markdown(results, shown))
    return _emit(args, head + table, unavailable, lambda: {
        "command": command, "otava_test_data": otava_test_data.__version__, "seeds": [seeds[0], seeds[-1]],
        "length": args.length, "margin": args.margin, "versions": versions, "unavailable": unavailable,
        "settings": {d: COMPETITORS[d]["setting"] for d in shown if d in COMPETITORS}
        | {"harness": "harness.history.changes.detect defaults"},
        "results": results})


def _emit(args: argparse.Namespace, text: str, unavailable: dict[str, str], doc) -> int:
    """The benchmark's table on stdout (then what did not run), in --markdown, and `doc()` in --json."""
    print(text, end="")
    for why in unavailable.values():
        print(f"not run: {why}")
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(doc(), indent=1))
    return 0


def corpus_main(args: argparse.Namespace, detectors_given: bool) -> int:
    """`--corpus-dir DIR`: ours, no change point ("zero"), TCPDBench's default PELT and binary segmentation
    (changepoints_tcpd.DEFAULTS) and any of COMPETITORS on every annotated univariate series of DIR; per detector
    the mean F1 and covering, over all series and per lag-1 autocorrelation of their residuals, then per series."""
    from harness.artifacts.cache import default_cache_dir
    from harness_suites.benchmarks import changepoints_tcpd as tcpd

    detectors = ([x.strip() for x in args.detectors.split(",") if x.strip()] if detectors_given
                 else ["harness", "zero", *tcpd.DEFAULTS])
    known = {"harness", "zero", *COMPETITORS, *tcpd.DEFAULTS}
    bad = [d for d in detectors if d not in known]
    if bad or args.margin < 0 or args.jobs < 1:
        what = f"unknown {', '.join(map(repr, bad))}" if bad else "--margin >= 0, --jobs >= 1"
        print(f"changepoints: {what} (detectors with --corpus-dir: {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    try:
        series, skipped = tcpd.read_corpus(args.corpus_dir)
    except tcpd.CorpusError as exc:
        print(f"changepoints: {exc}", file=sys.stderr)
        return 2
    cache = (args.cache_dir or default_cache_dir()) / "changepoint-detectors"
    labelled = [Labelled(s.name, 0, s.values, []) for s in series]
    from importlib.metadata import version

    versions = {"harness": f"inference-harness {version('inference-harness')} at {_commit()} (numpy "
                           f"{version('numpy')}, scipy {version('scipy')})", "zero": "no change point"}
    scores: dict[str, dict[str, Any]] = {}
    unavailable: dict[str, str] = {}
    for d in detectors:
        if d == "harness":
            found = run_harness([Labelled(s.name, 0, tcpd.for_ours(s.values), []) for s in series])
        elif d == "zero":
            found = [([], 0.0) for _ in series]
        else:
            spec = tcpd.DEFAULTS.get(d) or COMPETITORS[d]
            try:
                py = venv_python(cache, spec.get("venv", d), lambda m: print(m, file=sys.stderr))
                versions[d], found = run_competitor(py, d, labelled, args.jobs, spec=spec)
            except DetectorUnavailable as exc:
                unavailable[d] = str(exc)
                print(f"changepoints: {exc}", file=sys.stderr)
                continue
        scores[d] = {s.name: tcpd.score_series(s, f, sec, args.margin) for s, (f, sec) in zip(series, found,
                                                                                              strict=True)}
        print(f"{d:<12} mean F1 {sum(x.f1 for x in scores[d].values()) / len(series):.3f} cover "
              f"{sum(x.cover for x in scores[d].values()) / len(series):.3f}", file=sys.stderr, flush=True)
    shown = [d for d in detectors if d in scores]
    command = (f"python -m harness_suites.benchmarks.changepoints --corpus-dir {args.corpus_dir} --margin "
               f"{args.margin}" + (f" --detectors {','.join(detectors)}" if detectors_given else ""))
    head = (f"{command}\n\n{len(series)} annotated univariate series of {args.corpus_dir}"
            + (f" ({len(skipped)} skipped: " + "; ".join(f"{n}: {why}" for n, why in skipped) + ")" if skipped
               else "") + f"; margin {args.margin} points; "
            + "; ".join(f"{d}: {versions.get(d, '?')}" for d in shown) + "\n\n")
    table = ("Mean F1 / mean covering over the series (TCPDBench's scores), in brackets the median number of change "
             "points reported; columns: all series and by the lag-1 autocorrelation of their residuals around "
             "the annotated segments:\n\n" + tcpd.summary_markdown(series, scores, shown)
             + "\nPer series (k: change points reported; annotators: the fewest and most one of them marked; "
               "* missing values interpolated):\n\n" + tcpd.series_markdown(series, scores, shown))
    return _emit(args, head + table, unavailable, lambda: {
        "command": command, "corpus_dir": str(args.corpus_dir), "margin": args.margin, "versions": versions,
        "skipped": skipped, "unavailable": unavailable,
        "settings": {d: (tcpd.DEFAULTS.get(d) or COMPETITORS.get(d) or {}).get("setting") for d in shown}
        | {"harness": "harness.history.changes.detect defaults, on changepoints_tcpd.for_ours(values)",
           "zero": "no change point"},
        "series": {s.name: {"n": len(s.values), "missing": s.missing, "annotations": s.annotations,
                            "residual_lag1": tcpd.residual_lag1(s.values, s.annotations)} for s in series},
        "results": {d: {n: sc.as_dict() for n, sc in scores[d].items()} for d in shown}})


if __name__ == "__main__":
    sys.exit(main())
