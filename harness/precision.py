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
    """

    atol: float | None = None
    rtol: float | None = None
    max_rel_l2: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    min_task_ratio: float | None = None

    def merged(self, other: "Tolerance | None") -> "Tolerance":
        """This tolerance with every bound that `other` sets replacing ours."""
        if other is None:
            return self
        changes = {f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) is not None}
        return replace(self, **changes)

    def as_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Defaults per precision. FP32 vs FP32 differs only by kernel order (fusions, blocking): errors of ~1e-6
# relative. Lower precisions are judged by direction and ranking rather than elementwise.
DEFAULT_TOLERANCES: dict[Precision, Tolerance] = {
    Precision.FP32: Tolerance(atol=1e-4, rtol=1e-3, max_rel_l2=1e-4, min_cosine=0.99999, min_top1=0.99),
    Precision.FP16: Tolerance(max_rel_l2=2e-2, min_cosine=0.999, min_top1=0.95),
    Precision.BF16: Tolerance(max_rel_l2=5e-2, min_cosine=0.995, min_top1=0.90),
    Precision.INT8: Tolerance(max_rel_l2=0.15, min_cosine=0.99, min_top1=0.90),
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
