"""Drift metrics (max_abs, mean_abs, p99_abs, rel_l2, cosine, top-1 agreement) and the tolerance check; relative
measures judged only where the reference has magnitude, above an absolute floor (docs/method.md#drift-near-zero)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.precision import Tolerance


@dataclass(frozen=True)
class OutputDrift:
    """Drift of one output tensor against its reference."""

    name: str
    max_abs: float
    mean_abs: float
    rel_l2: float
    cosine: float
    top1_agreement: float | None
    allclose_violations: int  # elements outside atol + rtol * |ref| (0 when atol/rtol are not set)
    nonfinite: int  # NaN or Inf elements in the output
    numel: int
    p99_abs: float = 0.0  # 99th percentile of |out - ref| (linear interpolation, numpy's default)
    rms_abs: float = 0.0  # sqrt(mean((out - ref)^2)): the error the absolute floor is held against
    ref_max_abs: float = 0.0  # max |ref| and its RMS: the reference's magnitude
    ref_rms: float = 0.0


@dataclass(frozen=True)
class AccuracyResult:
    """Truthy when every output is within tolerance, so `assert result, result.message` reads naturally."""

    outputs: tuple[OutputDrift, ...]
    tolerance: Tolerance
    failures: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)  # outputs judged by their floor (a reference ~0)

    def __bool__(self) -> bool:
        return not self.failures

    @property
    def passed(self) -> bool:
        return bool(self)

    def worst(self) -> dict[str, float | None]:
        """Summary over outputs: the worst value of each metric (for tables and CSV)."""
        if not self.outputs:
            return {"max_abs": None, "mean_abs": None, "p99_abs": None, "rel_l2": None, "cosine": None,
                    "top1_agreement": None}
        top1 = [o.top1_agreement for o in self.outputs if o.top1_agreement is not None]
        return {"max_abs": max(o.max_abs for o in self.outputs),
                "mean_abs": max(o.mean_abs for o in self.outputs),
                "p99_abs": max(o.p99_abs for o in self.outputs),
                "rel_l2": max(o.rel_l2 for o in self.outputs),
                "cosine": min(o.cosine for o in self.outputs),
                "top1_agreement": min(top1) if top1 else None}

    @property
    def message(self) -> str:
        w = self.worst()
        figures = ", ".join(f"{k}={_fmt(v)}" for k, v in w.items() if v is not None)
        notes = "".join(f"; {n}" for n in self.notes)
        if self:
            return f"drift within tolerance ({figures}){notes}"
        return f"drift over tolerance: {'; '.join(self.failures)} [{figures}]{notes}"

    def as_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "failures": list(self.failures), "notes": list(self.notes),
                "tolerance": self.tolerance.as_dict(), **self.worst(), "outputs": [asdict(o) for o in self.outputs]}


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


_CHUNK = 1 << 22  # elements per float64 block: memory stays bounded for large outputs (LM logits)


def drift_metrics(name: str, out: np.ndarray, ref: np.ndarray, *, classification: bool = False,
                  atol: float | None = None, rtol: float | None = None,
                  top1_tol: float | None = None) -> OutputDrift:
    """Metrics of `out` against `ref` computed in float64 (top-1 over the last axis for classifiers).

    Top-1: a row agrees when both pick the same class, or (with `top1_tol`) when the class `out` picks scores
    within `top1_tol` of the reference's best in the reference: a near tie that float noise may break either
    way is no disagreement.

    Large outputs are processed in blocks of `_CHUNK` elements (a batch x seq x 102400 logits tensor would
    otherwise need several float64 copies at once); |diff| is kept for the p99 in float32 beyond one block.
    """
    out_a, ref_a = np.asarray(out), np.asarray(ref)
    if out_a.shape != ref_a.shape:
        raise ValueError(f"output {name!r}: shape {out_a.shape} differs from the reference {ref_a.shape}")
    n = int(out_a.size)
    if n == 0:
        return OutputDrift(name, 0.0, 0.0, 0.0, 1.0, None, 0, 0, 0)
    top1_tol = None if top1_tol is None else float(top1_tol)
    o_flat, r_flat = out_a.reshape(-1), ref_a.reshape(-1)
    absdiff = np.empty(n, dtype=np.float64 if n <= _CHUNK else np.float32)
    sums = _BlockSums(atol, rtol)
    for a in range(0, n, _CHUNK):
        ad = sums.add(o_flat[a:a + _CHUNK].astype(np.float64), r_flat[a:a + _CHUNK].astype(np.float64))
        absdiff[a:a + ad.size] = ad
    nonfinite, ss_ref, ss_diff = sums.nonfinite, sums.ss_ref, sums.ss_diff
    ref_norm, diff_norm = math.sqrt(ss_ref), math.sqrt(ss_diff)
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    denom = math.sqrt(sums.ss_out) * ref_norm
    cosine = sums.dot / denom if denom > 0 else (1.0 if np.array_equal(o_flat, r_flat) else 0.0)
    top1 = None
    if classification and out_a.ndim >= 1 and out_a.shape[-1] > 1:
        top1 = _top1_agreement(out_a, ref_a, top1_tol)
    if nonfinite:
        max_abs = mean_abs = p99_abs = rms_abs = math.inf
    else:
        max_abs = sums.max_abs
        mean_abs, p99_abs, rms_abs = sums.sum_abs / n, float(np.percentile(absdiff, 99)), math.sqrt(ss_diff / n)
    return OutputDrift(name, max_abs, mean_abs, rel_l2, cosine, top1, sums.violations, nonfinite, n, p99_abs,
                       rms_abs, sums.ref_max, math.sqrt(ss_ref / n))


@dataclass
class _BlockSums:
    """The running sums drift_metrics derives its figures from, over blocks of out (o) and ref (r) in float64:
    non-finite outputs, |o - r| past atol + rtol |r| (counted when either is given), the sums of squares of r,
    o - r and o, o . r, and (while every output is finite) the sum and max of |o - r|; the max |r|."""

    atol: float | None
    rtol: float | None
    nonfinite: int = 0
    violations: int = 0
    ss_ref: float = 0.0
    ss_diff: float = 0.0
    ss_out: float = 0.0
    dot: float = 0.0
    sum_abs: float = 0.0
    max_abs: float = 0.0
    ref_max: float = 0.0

    def add(self, o: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Add one block; its |o - r|."""
        self.nonfinite += int(o.size - np.isfinite(o).sum())
        d = o - r
        ad = np.abs(d)
        self.ss_ref += float(np.dot(r, r))
        if r.size:
            self.ref_max = max(self.ref_max, float(np.nanmax(np.abs(r))) if np.isfinite(r).any() else 0.0)
        self.ss_diff += float(np.dot(d, d))
        self.ss_out += float(np.dot(o, o))
        self.dot += float(np.dot(o, r))
        if self.atol is not None or self.rtol is not None:
            bound = (self.atol or 0.0) + (self.rtol or 0.0) * np.abs(r)
            self.violations += int(np.count_nonzero(~(ad <= bound)))  # NaN counts as a violation
        if not self.nonfinite:
            self.sum_abs += float(ad.sum())
            self.max_abs = max(self.max_abs, float(ad.max()))
        return ad


def _top1_agreement(out: np.ndarray, ref: np.ndarray, tol: float | None) -> float:
    """Fraction of rows (over the last axis) whose arg-max agrees; a pick within `tol` of the best is a tie."""
    o = out.reshape(-1, out.shape[-1]).astype(np.float64)
    r = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
    pick_o, pick_r = np.argmax(o, axis=-1), np.argmax(r, axis=-1)
    agree = pick_o == pick_r
    if tol is not None and tol > 0:
        rows = np.arange(r.shape[0])
        agree |= r[rows, pick_o] >= r[rows, pick_r] - tol
    return float(np.mean(agree))


def compare(reference: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], tolerance: Tolerance,
            *, classification: bool = False, random_input: bool = True,
            precision: str | None = None) -> AccuracyResult:
    """Judge `outputs` against `reference` (same feed) with `tolerance`; every failed bound is named.

    An output whose relative figures are over their bounds but whose error is within the floor passes with a
    note (`random_input`: the feed was generated, so the note suggests --feeds; `precision` names the floor).
    """
    drifts: list[OutputDrift] = []
    failures: list[str] = []
    notes: list[str] = []
    for name, ref in reference.items():
        if name not in outputs:
            failures.append(f"output {name!r} missing (got {sorted(outputs)})")
            continue
        try:
            d = drift_metrics(name, outputs[name], ref, classification=classification,
                              atol=tolerance.atol, rtol=tolerance.rtol, top1_tol=_top1_tie(tolerance, ref))
        except ValueError as exc:
            failures.append(str(exc))
            continue
        drifts.append(d)
        p = f"{name}: " if len(reference) > 1 else ""
        if d.nonfinite:
            failures.append(f"{p}{d.nonfinite} of {d.numel} elements are NaN/Inf")
        if d.allclose_violations:
            failures.append(f"{p}{d.allclose_violations} of {d.numel} elements exceed atol={tolerance.atol} "
                            f"rtol={tolerance.rtol} (max_abs={d.max_abs:.3g})")
        failed, floored = relative_verdicts(d, tolerance)
        failures += [f"{p}{f}" for f in failed]
        if floored and not d.nonfinite:
            notes.append(near_zero_note(name, d, tolerance, floored, random_input=random_input,
                                        precision=precision))
        if tolerance.min_top1 is not None and d.top1_agreement is not None \
                and not d.top1_agreement >= tolerance.min_top1:
            failures.append(f"{p}top1_agreement={d.top1_agreement:.3f} < {tolerance.min_top1:g}")
    return AccuracyResult(tuple(drifts), tolerance, tuple(failures), tuple(notes))


def within_floor(d: OutputDrift, tolerance: Tolerance) -> bool:
    """True when the output's RMS error is within the tolerance's absolute floor (float noise)."""
    return tolerance.floor is not None and d.rms_abs <= tolerance.floor


def relative_verdicts(d: OutputDrift, tolerance: Tolerance) -> tuple[list[str], list[str]]:
    """(failed bounds, bounds passed only by the floor) of the relative measures of one output.

    rel_l2 fails when ||out - ref|| > max_rel_l2 * ||ref|| + floor * sqrt(n), i.e. rms(out - ref) >
    max_rel_l2 * rms(ref) + floor; cosine fails when under min_cosine unless the error is within the floor (the
    direction of a difference of float noise says nothing). A NaN figure always fails.
    """
    failed: list[str] = []
    floored: list[str] = []
    floor = tolerance.floor or 0.0
    if tolerance.max_rel_l2 is not None and not d.rel_l2 <= tolerance.max_rel_l2:
        if d.rms_abs <= tolerance.max_rel_l2 * d.ref_rms + floor and floor > 0:
            floored.append(f"rel_l2={d.rel_l2:.3g}")
        else:
            failed.append(f"rel_l2={d.rel_l2:.3g} > {tolerance.max_rel_l2:g}"
                          + (f" (rms error {d.rms_abs:.3g} over the floor {floor:.3g})" if floor > 0 else ""))
    if tolerance.min_cosine is not None and not d.cosine >= tolerance.min_cosine:
        if within_floor(d, tolerance):
            floored.append(f"cosine={d.cosine:.6f}")
        else:
            failed.append(f"cosine={d.cosine:.6f} < {tolerance.min_cosine:g}")
    return failed, floored


def near_zero_note(name: str, d: OutputDrift, tolerance: Tolerance, floored: list[str], *, random_input: bool,
                   precision: str | None = None) -> str:
    """The words for an output judged by its floor: its reference is ~0, the relative figures are noise."""
    on = " on random input" if random_input else ""
    at = f"{precision}'s " if precision else "the "
    hint = "; feed real inputs with --feeds" if random_input else ""
    return (f"reference output {name!r} is ~0{on} (max |ref| {d.ref_max_abs:.2g}, rms {d.ref_rms:.2g}): "
            f"{' and '.join(floored)} {'is' if len(floored) == 1 else 'are'} float noise; its error "
            f"(rms {d.rms_abs:.2g}) is within {at}floor {tolerance.floor:.3g}{hint}")


def _top1_tie(tolerance: Tolerance, ref: np.ndarray) -> float | None:
    """How close two reference scores must be to count as a tie for top-1: the floor plus the relative bound
    at the reference's scale (max |ref|), so noise within tolerance cannot flip a near tie into a failure."""
    if tolerance.floor is None and tolerance.max_rel_l2 is None:
        return None
    r = np.asarray(ref)
    finite = r.size and np.issubdtype(r.dtype, np.number) and bool(np.isfinite(r).all())
    scale = float(np.max(np.abs(r))) if finite else 0.0
    return (tolerance.floor or 0.0) + (tolerance.max_rel_l2 or 0.0) * scale
