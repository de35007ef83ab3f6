"""Precisions, accuracy tolerances and their defaults per precision."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from enum import Enum


class Precision(str, Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"

    def __str__(self) -> str:  # "fp32", not "Precision.FP32", in ids and tables
        return self.value

    @classmethod
    def parse(cls, text: str) -> "Precision":
        try:
            return cls(text.strip().lower())
        except ValueError:
            valid = ", ".join(p.value for p in cls)
            from harness.errors import did_you_mean

            hint = did_you_mean(text.strip().lower(), [p.value for p in cls])
            raise ValueError(f"unknown precision {text!r}{hint}; valid precisions: {valid}") from None


@dataclass(frozen=True)
class Tolerance:
    """How far a case's outputs may drift from the FP32 reference.

    Every bound is optional (None = not checked):
    atol/rtol: elementwise, every element must satisfy |out - ref| <= atol + rtol * |ref|.
    max_rel_l2: ||out - ref||_2 / ||ref||_2.
    min_cosine: cosine similarity of the flattened outputs.
    min_top1: fraction of samples whose arg-max class agrees (classification models only).
    min_task_ratio: task accuracy on the model's labelled eval split over the FP32 reference's (models with
      an eval split only; None = harness.accuracy.task.DEFAULT_MIN_TASK_RATIO, 0.99 for every precision).
    floor: the absolute floor of the relative measures, in the output's units (RMS of out - ref). rel_l2 is
      judged as ||out - ref|| <= max_rel_l2 * ||ref|| + floor * sqrt(n) (np.allclose's atol + rtol * |ref|,
      over the norm), and cosine and top-1 are not held against an output whose error is within the floor:
      over a reference near 0 they measure float noise (docs/method.md#drift-near-zero).
    """

    atol: float | None = None
    rtol: float | None = None
    max_rel_l2: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    min_task_ratio: float | None = None
    floor: float | None = None

    def merged(self, other: "Tolerance | None") -> "Tolerance":
        """This tolerance with every bound that `other` sets replacing ours."""
        if other is None:
            return self
        changes = {f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) is not None}
        return replace(self, **changes)

    def as_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The spacing of the precision's numbers at 1 (machine epsilon; INT8: one step of a tensor quantised over
# [-1, 1]). A network's outputs come from activations of order 1 (normalisation keeps them there), so an
# output computed at this precision carries an absolute error of that order whatever its own size: an output
# near 0 (a saturated sigmoid, a cancellation) has such an error over a value of nothing.
UNIT_ROUNDOFF: dict[Precision, float] = {
    Precision.FP32: 2.0 ** -23,  # 1.19e-07
    Precision.FP16: 2.0 ** -10,  # 9.77e-04
    Precision.BF16: 2.0 ** -7,   # 7.81e-03
    Precision.INT8: 2.0 ** -7,   # 7.81e-03 (1/128)
}


def rounding_rms(precision: Precision) -> float:
    """The RMS error of rounding values of order 1 once to `precision`: eps / (2 * sqrt(3)), a rounding error
    being uniform over half a spacing either way (fp32 3.4e-08, fp16 2.8e-04, bf16 and int8 2.3e-03)."""
    return UNIT_ROUNDOFF[Precision(precision)] / (2.0 * math.sqrt(3.0))


# Defaults per precision. FP32 vs FP32 differs only by kernel order (fusions, blocking): errors of ~1e-6
# relative. Lower precisions are judged by direction and ranking rather than elementwise. Every precision's
# absolute floor (the error below which rel_l2 and cosine are float noise) is one rounding of values of order 1.
DEFAULT_TOLERANCES: dict[Precision, Tolerance] = {
    Precision.FP32: Tolerance(atol=1e-4, rtol=1e-3, max_rel_l2=1e-4, min_cosine=0.99999, min_top1=0.99,
                              floor=rounding_rms(Precision.FP32)),
    Precision.FP16: Tolerance(max_rel_l2=2e-2, min_cosine=0.999, min_top1=0.95, floor=rounding_rms(Precision.FP16)),
    Precision.BF16: Tolerance(max_rel_l2=5e-2, min_cosine=0.995, min_top1=0.90, floor=rounding_rms(Precision.BF16)),
    Precision.INT8: Tolerance(max_rel_l2=0.15, min_cosine=0.99, min_top1=0.90, floor=rounding_rms(Precision.INT8)),
}

# Per task, bounds replacing the precision defaults above (classification and regression use those as they
# are). Embeddings are judged by direction (cosine) more than by magnitude; LM logits over a large vocabulary
# pass through many layers, so their relative error grows with depth while the ranking (what sampling sees)
# holds: looser rel_l2, cosine still checked.
TASK_TOLERANCES: dict[str, dict[Precision, Tolerance]] = {
    "embedding": {
        Precision.FP16: Tolerance(max_rel_l2=3e-2, min_cosine=0.999),
        Precision.BF16: Tolerance(max_rel_l2=6e-2, min_cosine=0.995),
        Precision.INT8: Tolerance(max_rel_l2=0.20, min_cosine=0.98),
    },
    "lm": {
        Precision.FP16: Tolerance(max_rel_l2=3e-2, min_cosine=0.999),
        Precision.BF16: Tolerance(max_rel_l2=8e-2, min_cosine=0.99),
        Precision.INT8: Tolerance(max_rel_l2=0.25, min_cosine=0.97),
    },
}


def default_tolerance(precision: Precision, task: str | None = None) -> Tolerance:
    """The default tolerance of `precision`, with the task's own bounds (TASK_TOLERANCES) where it has any."""
    precision = Precision(precision)
    return DEFAULT_TOLERANCES[precision].merged(TASK_TOLERANCES.get(task or "", {}).get(precision))


def tolerance_keys() -> tuple[str, ...]:
    """The bounds a --tolerance override may set (every Tolerance field)."""
    return tuple(f.name for f in fields(Tolerance))


def parse_tolerance_overrides(text: str) -> dict[Precision, Tolerance]:
    """Parse "fp16.max_rel_l2=0.05,int8.min_cosine=0.98" into a Tolerance per precision.

    Raises ValueError naming the bad entry: unknown precision or bound, a value that is not a number.
    """
    values: dict[Precision, dict[str, float]] = {}
    for entry in (e.strip() for e in str(text).split(",")):
        if not entry:
            continue
        key, sep, value = entry.partition("=")
        prec, dot, bound = key.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"{entry!r}: expected PRECISION.BOUND=VALUE, e.g. fp16.max_rel_l2=0.05")
        precision = Precision.parse(prec)
        if bound not in tolerance_keys():
            raise ValueError(f"{entry!r}: unknown bound {bound!r}; valid bounds: {', '.join(tolerance_keys())}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{entry!r}: {value.strip()!r} is not a number") from None
        if math.isnan(number) or number < 0:
            raise ValueError(f"{entry!r}: a bound must be a number >= 0")
        values.setdefault(precision, {})[bound] = number
    if not values:
        raise ValueError("empty list; expected PRECISION.BOUND=VALUE[,...]")
    return {p: Tolerance(**v) for p, v in values.items()}
