"""Task accuracy on a labelled eval split: a runtime's top-1 accuracy against the FP32 reference's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_MIN_TASK_RATIO = 0.99
METRIC = "top1_accuracy"

Infer = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class EvalSplit:
    """A labelled held-out split: every input has the N samples on axis 0; labels are N class indices.

    output: the model output holding class scores (default: the model's first output).
    """

    inputs: Mapping[str, np.ndarray]
    labels: np.ndarray
    output: str | None = None
    description: str = ""
    metric: str = METRIC

    def __post_init__(self) -> None:
        n = len(self.labels)
        for name, arr in self.inputs.items():
            if len(arr) != n:
                raise ValueError(f"eval split: input {name!r} has {len(arr)} samples, labels have {n}")
        if self.metric != METRIC:
            raise ValueError(f"eval split: metric {self.metric!r} is not supported (only {METRIC})")

    @property
    def n(self) -> int:
        return int(len(self.labels))


def top1_accuracy(infer: Infer, split: EvalSplit, batch: int, output: str) -> float:
    """Fraction of samples whose arg-max over `output`'s last axis equals the label, run `batch` at a time.

    The last chunk is padded to `batch` by repeating its last sample (a runtime built for a fixed batch
    still runs it); predictions for the padding are dropped.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    correct = 0
    for start in range(0, split.n, batch):
        stop = min(start + batch, split.n)
        feed = {}
        for name, arr in split.inputs.items():
            chunk = arr[start:stop]
            if stop - start < batch:
                pad = np.repeat(chunk[-1:], batch - (stop - start), axis=0)
                chunk = np.concatenate([chunk, pad], axis=0)
            feed[name] = np.ascontiguousarray(chunk)
        scores = np.asarray(infer(feed)[output])[: stop - start]
        correct += int(np.count_nonzero(scores.reshape(stop - start, -1).argmax(axis=-1)
                                        == np.asarray(split.labels[start:stop])))
    return correct / split.n if split.n else float("nan")


@dataclass(frozen=True)
class TaskAccuracy:
    """A runtime's task accuracy beside the reference's; truthy when the ratio meets `min_ratio`."""

    accuracy: float
    reference_accuracy: float
    min_ratio: float
    n: int
    batch: int
    metric: str = METRIC
    reference_runtime: str = ""
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        if self.reference_accuracy > 0:
            return self.accuracy / self.reference_accuracy
        return 1.0 if self.accuracy >= self.reference_accuracy else 0.0

    @property
    def passed(self) -> bool:
        return bool(self.ratio >= self.min_ratio)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def message(self) -> str:
        verdict = ">=" if self.passed else "<"
        return (f"task {self.metric} {self.accuracy:.4f} vs reference {self.reference_accuracy:.4f} "
                f"({self.reference_runtime or 'fp32'}) on {self.n} held-out samples: ratio {self.ratio:.4f} "
                f"{verdict} {self.min_ratio:g}")

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "accuracy": self.accuracy,
                "reference_accuracy": self.reference_accuracy,
                "ratio": self.ratio, "min_ratio": self.min_ratio, "passed": self.passed, "n": self.n,
                "batch": self.batch, "reference_runtime": self.reference_runtime,
                "split": self.description, **dict(self.extra)}


def judge(accuracy: float, reference_accuracy: float, n: int, batch: int, min_ratio: float | None,
          reference_runtime: str = "", description: str = "") -> TaskAccuracy:
    """Combine two accuracies into a verdict; `min_ratio` None means DEFAULT_MIN_TASK_RATIO (0.99)."""
    return TaskAccuracy(accuracy, reference_accuracy,
                        DEFAULT_MIN_TASK_RATIO if min_ratio is None else float(min_ratio), n, batch,
                        reference_runtime=reference_runtime, description=description)
