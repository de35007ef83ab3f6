"""TVM tuned with MetaSchedule for a bounded number of trials (tvm-cpu), as a variant: `tune=64` beside untuned."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.precision import Precision
from harness.variants.base import IntKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions

DEFAULT_TRIALS = 64  # `tune=on`: a small budget (about a minute or two of tuning for the mlp on 2 cores)
MAX_TRIALS = 20000


class Tune(IntKind):
    key = "tune"
    title = (f"TVM MetaSchedule tuning: the trial budget spent before the compile (default: untuned; "
             f"tune=on is {DEFAULT_TRIALS} trials; the case timeout bounds the tuning time)")
    values = f"a whole number of trials from 1 to {MAX_TRIALS}, or on ({DEFAULT_TRIALS})"
    needs = "tvm-tuning"
    precisions = frozenset({Precision.FP32})
    lo, hi, aliases = 1, MAX_TRIALS, {"on": DEFAULT_TRIALS}

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, tuning_trials=int(value))


TUNE = Tune()
