"""Drift metrics (max_abs, mean_abs, p99_abs, rel_l2, cosine, top-1 agreement) and the tolerance check."""

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


@dataclass(frozen=True)
class AccuracyResult:
    """Truthy when every output is within tolerance, so `assert result, result.message` reads naturally."""

    outputs: tuple[OutputDrift, ...]
    tolerance: Tolerance
    failures: tuple[str, ...] = field(default_factory=tuple)

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
        if self:
            return f"drift within tolerance ({figures})"
        return f"drift over tolerance: {'; '.join(self.failures)} [{figures}]"

    def as_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "failures": list(self.failures), "tolerance": self.tolerance.as_dict(),
                **self.worst(), "outputs": [asdict(o) for o in self.outputs]}


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


_CHUNK = 1 << 22  # elements per float64 block: memory stays bounded for large outputs (LM logits)


def drift_metrics(name: str, out: np.ndarray, ref: np.ndarray, *, classification: bool = False,
                  atol: float | None = None, rtol: float | None = None) -> OutputDrift:
    """Metrics of `out` against `ref` computed in float64 (top-1 over the last axis for classifiers).

    Large outputs are processed in blocks of `_CHUNK` elements (a batch x seq x 102400 logits tensor would
    otherwise need several float64 copies at once); |diff| is kept for the p99 in float32 beyond one block.
    """
    out_a, ref_a = np.asarray(out), np.asarray(ref)
    if out_a.shape != ref_a.shape:
        raise ValueError(f"output {name!r}: shape {out_a.shape} differs from the reference {ref_a.shape}")
    n = int(out_a.size)
    if n == 0:
        return OutputDrift(name, 0.0, 0.0, 0.0, 1.0, None, 0, 0, 0)
    o_flat, r_flat = out_a.reshape(-1), ref_a.reshape(-1)
    absdiff = np.empty(n, dtype=np.float64 if n <= _CHUNK else np.float32)
    nonfinite = violations = 0
    ss_ref = ss_diff = ss_out = dot = sum_abs = max_abs = 0.0
    check = atol is not None or rtol is not None
    for a in range(0, n, _CHUNK):
        o = o_flat[a:a + _CHUNK].astype(np.float64)
        r = r_flat[a:a + _CHUNK].astype(np.float64)
        nonfinite += int(o.size - np.isfinite(o).sum())
        d = o - r
        ad = np.abs(d)
        ss_ref += float(np.dot(r, r))
        ss_diff += float(np.dot(d, d))
        ss_out += float(np.dot(o, o))
        dot += float(np.dot(o, r))
        if check:
            bound = (atol or 0.0) + (rtol or 0.0) * np.abs(r)
            violations += int(np.count_nonzero(~(ad <= bound)))  # NaN counts as a violation
        if not nonfinite:
            sum_abs += float(ad.sum())
            max_abs = max(max_abs, float(ad.max()))
        absdiff[a:a + ad.size] = ad
    ref_norm, diff_norm = math.sqrt(ss_ref), math.sqrt(ss_diff)
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    denom = math.sqrt(ss_out) * ref_norm
    cosine = dot / denom if denom > 0 else (1.0 if np.array_equal(o_flat, r_flat) else 0.0)
    top1 = None
    if classification and out_a.ndim >= 1 and out_a.shape[-1] > 1:
        top1 = float(np.mean(np.argmax(out_a, axis=-1) == np.argmax(ref_a, axis=-1)))
    if nonfinite:
        max_abs = mean_abs = p99_abs = math.inf
    else:
        mean_abs, p99_abs = sum_abs / n, float(np.percentile(absdiff, 99))
    return OutputDrift(name, max_abs, mean_abs, rel_l2, cosine, top1, violations, nonfinite, n, p99_abs)


def compare(reference: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], tolerance: Tolerance,
            *, classification: bool = False) -> AccuracyResult:
    """Judge `outputs` against `reference` (same feed) with `tolerance`; every failed bound is named."""
    drifts: list[OutputDrift] = []
    failures: list[str] = []
    for name, ref in reference.items():
        if name not in outputs:
            failures.append(f"output {name!r} missing (got {sorted(outputs)})")
            continue
        try:
            d = drift_metrics(name, outputs[name], ref, classification=classification,
                              atol=tolerance.atol, rtol=tolerance.rtol)
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
        if tolerance.max_rel_l2 is not None and not d.rel_l2 <= tolerance.max_rel_l2:
            failures.append(f"{p}rel_l2={d.rel_l2:.3g} > {tolerance.max_rel_l2:g}")
        if tolerance.min_cosine is not None and not d.cosine >= tolerance.min_cosine:
            failures.append(f"{p}cosine={d.cosine:.6f} < {tolerance.min_cosine:g}")
        if tolerance.min_top1 is not None and d.top1_agreement is not None \
                and not d.top1_agreement >= tolerance.min_top1:
            failures.append(f"{p}top1_agreement={d.top1_agreement:.3f} < {tolerance.min_top1:g}")
    return AccuracyResult(tuple(drifts), tolerance, tuple(failures))
