"""A labelled real-world corpus in the Turing Change Point Dataset's format: its reader, TCPDBench's scores and defaults.

The Turing Change Point Dataset (TCPD: van den Burg and Williams, "An Evaluation of Change Point Detection
Algorithms", 2020; https://github.com/alan-turing-institute/TCPD) is real series, each with the change points
five annotators marked. Nothing of it is stored here or fetched at run time: `python -m
harness_suites.benchmarks.changepoints --corpus-dir DIR` reads a directory the user made (see `read_corpus`).
Scoring is TCPDBench's (its analysis/scripts/metrics.py, restated from its definitions): F1 with a margin of 5
points combined over the annotators, and segmentation covering averaged over them; detections at the first or
last point are dropped first, as TCPDBench does. Its default experiment runs R changepoint's PELT and binary
segmentation with `cpt.mean(penalty="MBIC", test.stat="Normal")` on the standardised series (binary
segmentation with at most Q = 5 change points); `DEFAULTS` are the same with ruptures' search and that cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

MARGIN = 5  # TCPDBench's


class CorpusError(ValueError):
    """The directory is not a TCPD-format corpus (the message says what is missing)."""


@dataclass(frozen=True)
class RealSeries:
    """One univariate series of the corpus: its values (missing ones linearly interpolated, `missing` of them) and
    each annotator's change points (0-based: the first index of each new segment)."""

    name: str
    values: list[float]
    annotations: dict[str, list[int]]
    missing: int = 0


def _interpolate(raw: Sequence[Any]) -> tuple[list[float], int]:
    """The values with each missing one (null or NaN) linearly interpolated between its neighbours (at an end: the
    nearest value); and how many were missing."""
    vals = [float(v) if v is not None else math.nan for v in raw]
    known = [i for i, v in enumerate(vals) if math.isfinite(v)]
    if not known:
        return vals, len(vals)
    out = list(vals)
    for i, v in enumerate(vals):
        if math.isfinite(v):
            continue
        left = max((k for k in known if k < i), default=None)
        right = min((k for k in known if k > i), default=None)
        if left is None or right is None:
            out[i] = vals[right if left is None else left]
        else:
            out[i] = vals[left] + (vals[right] - vals[left]) * (i - left) / (right - left)
    return out, len(vals) - len(known)


def read_corpus(root: Path) -> tuple[list[RealSeries], list[tuple[str, str]]]:
    """(the univariate series, [(name, why skipped)]) of a TCPD-format directory: `annotations.json` ({series name:
    {annotator: [change points]}}) and one JSON file per series (TCPD's schema: name, n_obs, n_dim, series[].raw),
    either directly in `root` (TCPD's `make export`) or as datasets/NAME/NAME.json (a clone of the TCPD
    repository, after `make` for the series it cannot redistribute). Series with more than one dimension, without
    annotations or without values are skipped (said why); annotated series without a file are listed as skipped."""
    root = Path(root)
    ann_path = root / "annotations.json"
    if not ann_path.is_file():
        raise CorpusError(f"{root}: no annotations.json (a TCPD-format corpus has one: clone "
                          "https://github.com/alan-turing-institute/TCPD, run `make`, pass its folder)")
    try:
        annotations = json.loads(ann_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{ann_path}: not readable JSON ({exc})") from None
    if not isinstance(annotations, dict):
        raise CorpusError(f"{ann_path}: not a JSON object of series -> annotator -> change points")
    files = sorted({*root.glob("*.json"), *root.glob("datasets/*/*.json")} - {ann_path})
    series: list[RealSeries] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # not a series file (TCPD's folders hold other JSON too)
        if not isinstance(data, dict) or "series" not in data or "name" not in data:
            continue
        name = str(data["name"])
        if name in seen:
            continue
        seen.add(name)
        if name not in annotations:
            skipped.append((name, "no annotations"))
            continue
        if int(data.get("n_dim", len(data["series"]))) != 1 or len(data["series"]) != 1:
            skipped.append((name, f"{data.get('n_dim', len(data['series']))} dimensions (univariate only)"))
            continue
        values, missing = _interpolate(data["series"][0].get("raw") or [])
        if not values or missing == len(values):
            skipped.append((name, "no values"))
            continue
        ann = {str(k): sorted(int(i) for i in v) for k, v in annotations[name].items()}
        series.append(RealSeries(name, values, ann, missing))
    skipped += [(name, "annotated, no series file in the folder") for name in sorted(set(annotations) - seen)]
    if not series:
        raise CorpusError(f"{root}: no annotated univariate series file (TCPD's NAME.json, directly in the folder "
                          "or under datasets/NAME/)")
    return sorted(series, key=lambda s: s.name), skipped


# --- TCPDBench's scores ----------------------------------------------------------------------------------------

def clean(locations: Iterable[int], n: int) -> list[int]:
    """Detections as TCPDBench scores them: unique, and only 1 .. n-2 (the two ends are no change points)."""
    return sorted({int(x) for x in locations if 1 <= int(x) < n - 1})


def true_positives(truth: Iterable[int], found: Iterable[int], margin: int = MARGIN) -> set[int]:
    """The true change points that a detection within `margin` matches, each detection used once: every true one
    in turn (ascending) takes the nearest detection left in reach (the smaller on a tie)."""
    free = set(found)
    hits: set[int] = set()
    for tau in sorted(set(truth)):
        reach = sorted((abs(tau - x), x) for x in free if abs(tau - x) <= margin)
        if reach:
            hits.add(tau)
            free.remove(reach[0][1])
    return hits


def f_measure(annotations: Mapping[str, Sequence[int]], found: Iterable[int],
              margin: int = MARGIN) -> tuple[float, float, float]:
    """(F1, precision, recall) of detections against several annotators, TCPDBench's way: 0 is added to every
    annotator's set and to the detections (so no change point marked and none found scores 1); precision counts
    the detections that match the union of all annotators' change points; recall is the mean over annotators of
    the share of theirs matched."""
    sets = [set(v) | {0} for v in annotations.values()]
    x = set(found) | {0}
    union = set().union(*sets)
    precision = len(true_positives(union, x, margin)) / len(x)
    recall = sum(len(true_positives(t, x, margin)) / len(t) for t in sets) / len(sets)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return f1, precision, recall


def partition(locations: Iterable[int], n: int) -> list[range]:
    """The segments of 0 .. n-1 that change points (the first index of each new segment) cut."""
    cuts = sorted({c for c in locations if 0 < c < n})
    return [range(a, b) for a, b in pairwise([0, *cuts, n])]


def _jaccard(a: range, b: range) -> float:
    inter = max(0, min(a.stop, b.stop) - max(a.start, b.start))
    return inter / (len(a) + len(b) - inter)


def cover(truth: Sequence[range], found: Sequence[range]) -> float:
    """How well segmentation `found` covers `truth` (Arbelaez et al. 2011, eq. 8): each true segment weighted by
    its length times its best Jaccard overlap with a found segment."""
    n = sum(len(r) for r in truth)
    return sum(len(r) * max(_jaccard(r, f) for f in found) for r in truth) / n


def covering(annotations: Mapping[str, Sequence[int]], found: Iterable[int], n: int) -> float:
    """Segmentation covering of the detections' segments over each annotator's, averaged over annotators."""
    mine = partition(found, n)
    scores = [cover(partition(v, n), mine) for v in annotations.values()]
    return sum(scores) / len(scores)


def residual_lag1(values: Sequence[float], annotations: Mapping[str, Sequence[int]]) -> float:
    """Lag-1 autocorrelation of the series' residuals around the means of the segments that every annotator's
    change point cuts (the union): how dependent its noise is once the marked changes are taken out."""
    cuts = sorted({c for v in annotations.values() for c in v})
    r: list[float] = []
    for seg in partition(cuts, len(values)):
        part = [values[i] for i in seg]
        m = sum(part) / len(part)
        r += [v - m for v in part]
    den = sum(v * v for v in r)
    return sum(a * b for a, b in pairwise(r)) / den if den > 0 else 0.0


def for_ours(values: Sequence[float]) -> list[float]:
    """The series as ours reads a history (figures divided by their median: positive ones): unchanged when every
    value is positive, else moved up so that its minimum sits at its range (x - min + (max - min))."""
    lo, hi = min(values), max(values)
    if lo > 0:
        return list(values)
    return [v - lo + (hi - lo if hi > lo else 1.0) for v in values]


AC_GROUPS: dict[str, tuple[float, float]] = {"lag-1 AC < 0.5": (-math.inf, 0.5), "0.5 <= AC < 0.7": (0.5, 0.7),
                                             "AC >= 0.7": (0.7, math.inf)}


# TCPDBench's default PELT and binary segmentation, in ruptures 1.1.10 (the "pelt" detector's environment): R
# changepoint's cpt.mean with test.stat "Normal" and penalty "MBIC" is a segment cost of its sum of squared
# deviations plus log(its length) (on the series standardised as TCPDBench's loader does: R's scale()), 3 log n
# per change point, segments of at least 1 point; binary segmentation with Q = 5 (changepoint's default) picks,
# along the greedy path of 0 .. 5 change points, the number with the least penalised cost.
_MBIC = (
    "import numpy as np\n"
    "import ruptures as rpt\n"
    "from ruptures.base import BaseCost\n"
    "class MbicMean(BaseCost):\n"
    "    model = 'mbic_mean'\n"
    "    min_size = 1\n"
    "    def fit(self, signal):\n"
    "        s = np.asarray(signal, dtype=float).reshape(-1)\n"
    "        self.signal = s.reshape(-1, 1)\n"
    "        self.c1 = np.concatenate([[0.0], np.cumsum(s)])\n"
    "        self.c2 = np.concatenate([[0.0], np.cumsum(s * s)])\n"
    "        return self\n"
    "    def error(self, start, end):\n"
    "        k = end - start\n"
    "        s1 = self.c1[end] - self.c1[start]\n"
    "        return float(self.c2[end] - self.c2[start] - s1 * s1 / k + np.log(k))\n"
    "def scaled(x):\n"
    "    x = np.asarray(x, dtype=float)\n"
    "    sd = x.std(ddof=1)\n"
    "    return (x - x.mean()) / (sd if sd > 0 else 1.0)\n"
)
DEFAULTS: dict[str, dict[str, str]] = {
    "pelt_mbic": {
        "requirement": "ruptures==1.1.10", "dist": "ruptures", "venv": "pelt",
        "setting": "TCPDBench's default_pelt (R changepoint cpt.mean, PELT, penalty MBIC, test.stat Normal, on the "
                   "standardised series) as ruptures.Pelt(custom_cost=MBIC mean cost, min_size=1, jump=1)"
                   ".predict(pen=3 ln n)",
        "code": _MBIC + "def detect(x, seed):\n"
                        "    z = scaled(x)\n"
                        "    algo = rpt.Pelt(custom_cost=MbicMean(), min_size=1, jump=1).fit(z)\n"
                        "    return [int(b) for b in algo.predict(pen=3 * np.log(len(z)))[:-1]]\n",
    },
    "binseg_mbic": {
        "requirement": "ruptures==1.1.10", "dist": "ruptures", "venv": "pelt",
        "setting": "TCPDBench's default_binseg (R changepoint cpt.mean, BinSeg, Q 5, penalty MBIC, test.stat Normal, "
                   "on the standardised series) as ruptures.Binseg(custom_cost=MBIC mean cost, min_size=1, jump=1): "
                   "of its 0 .. 5 change points, the number with the least cost + 3 ln n each",
        "code": _MBIC + "def detect(x, seed):\n"
                        "    z = scaled(x)\n"
                        "    n = len(z)\n"
                        "    cost = MbicMean().fit(z)\n"
                        "    algo = rpt.Binseg(custom_cost=MbicMean(), min_size=1, jump=1).fit(z)\n"
                        "    best, best_total = [], cost.error(0, n)\n"
                        "    for k in range(1, min(5, n - 1) + 1):\n"
                        "        bkps = algo.predict(n_bkps=k)\n"
                        "        total = sum(cost.error(a, b) for a, b in zip([0] + bkps[:-1], bkps))\n"
                        "        total += 3 * np.log(n) * k\n"
                        "        if total < best_total:\n"
                        "            best, best_total = bkps[:-1], total\n"
                        "    return [int(b) for b in best]\n",
    },
}


@dataclass
class SeriesScore:
    """One detector on one series: its (cleaned) detections and TCPDBench's scores."""

    found: list[int]
    f1: float
    precision: float
    recall: float
    cover: float
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "f1": self.f1, "precision": self.precision, "recall": self.recall,
                "cover": self.cover, "seconds": self.seconds}


def score_series(s: RealSeries, found: Iterable[int], seconds: float, margin: int = MARGIN) -> SeriesScore:
    n = len(s.values)
    locs = clean(found, n)
    f1, p, r = f_measure(s.annotations, locs, margin)
    return SeriesScore(locs, f1, p, r, covering(s.annotations, locs, n), seconds)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def summary_markdown(series: Sequence[RealSeries], scores: Mapping[str, Mapping[str, SeriesScore]],
                     detectors: Sequence[str]) -> str:
    """Mean F1 / cover per detector over all series and per lag-1 autocorrelation group of their residuals, with
    the median number of change points each reports (and the annotators' median)."""
    ac = {s.name: residual_lag1(s.values, s.annotations) for s in series}
    groups = {"all": [s for s in series]} | {
        g: [s for s in series if lo <= ac[s.name] < hi] for g, (lo, hi) in AC_GROUPS.items()}
    lines = ["| series | " + " | ".join(f"{g} ({len(m)})" for g, m in groups.items()) + " |",
             "| --- | " + " | ".join("---:" for _ in groups) + " |"]

    def cell(members: Sequence[RealSeries], d: str) -> str:
        got = [scores[d][s.name] for s in members if s.name in scores.get(d, {})]
        if not got:
            return "-"
        f1, cov = _mean([g.f1 for g in got]), _mean([g.cover for g in got])
        k = _median([len(g.found) for g in got])
        return f"{f1:.3f} / {cov:.3f} ({k:g})"

    for d in detectors:
        lines.append(f"| {d} | " + " | ".join(cell(m, d) for m in groups.values()) + " |")
    ann = []
    for members in groups.values():
        k = _median([_median([len(v) for v in s.annotations.values()]) or 0 for s in members])
        ann.append("-" if k is None else f"({k:g})")
    lines.append("| annotators | " + " | ".join(ann) + " |")
    return "\n".join(lines) + "\n"


def series_markdown(series: Sequence[RealSeries], scores: Mapping[str, Mapping[str, SeriesScore]],
                    detectors: Sequence[str]) -> str:
    """Per series: its length, lag-1 autocorrelation of residuals, the annotators' change points (fewest-most),
    and per detector the change points it reports, F1 and cover."""
    lines = ["| series | n | AC | annotators | " + " | ".join(f"{d} k: F1 / cover" for d in detectors) + " |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in detectors) + " |"]
    for s in series:
        counts = [len(v) for v in s.annotations.values()]
        cells = []
        for d in detectors:
            g = scores.get(d, {}).get(s.name)
            cells.append("-" if g is None else f"{len(g.found)}: {g.f1:.2f} / {g.cover:.2f}")
        lines.append(f"| {s.name}{' *' if s.missing else ''} | {len(s.values)} | "
                     f"{residual_lag1(s.values, s.annotations):.2f} | {min(counts)}-{max(counts)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
