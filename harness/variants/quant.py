"""INT8 recipe knobs: static (calibrated QDQ) vs dynamic quantisation, per-channel vs per-tensor weights."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.precision import Precision
from harness.variants.base import ChoiceKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions


class Int8Method(ChoiceKind):
    key = "int8"
    title = "INT8 quantisation method of ONNX Runtime's INT8 cases (onnxruntime.quantization)"
    values = "static or dynamic"
    choices = ("static", "dynamic")
    needs = "int8-recipe"
    precisions = frozenset({Precision.INT8})

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, int8_method=value)


class WeightGranularity(ChoiceKind):
    key = "weights"
    title = "INT8 weight scales: one per output channel (the default) or one per tensor"
    values = "per-channel or per-tensor"
    choices = ("per-channel", "per-tensor")
    needs = "int8-recipe"
    precisions = frozenset({Precision.INT8})

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, per_channel=value == "per-channel")


INT8, WEIGHTS = Int8Method(), WeightGranularity()
