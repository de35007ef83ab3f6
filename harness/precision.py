"""Precisions, accuracy tolerances and their defaults per precision."""

from __future__ import annotations

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
            raise ValueError(f"unknown precision {text!r}; valid precisions: {valid}") from None


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


def default_tolerance(precision: Precision) -> Tolerance:
    return DEFAULT_TOLERANCES[precision]
