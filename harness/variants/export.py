"""Export knobs: the ONNX opset of the harness's export, and fixed vs dynamic axes at run time."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.precision import Precision
from harness.variants.base import ChoiceKind, IntKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions
    from harness.model import ModelSpec

OPSETS = range(13, 24)  # what torch.onnx exports here (dynamo: 18+ natively, lower by its version converter)


class Opset(IntKind):
    key = "opset"
    title = "ONNX opset of the harness's export of the model's torch module"
    values = f"an opset from {OPSETS.start} to {OPSETS.stop - 1}"
    needs = "onnx-export"
    lo, hi = OPSETS.start, OPSETS.stop - 1

    def refusal(self, value: str, spec: ModelSpec, precision: Precision) -> str | None:
        if spec.build is None:
            return f"variant opset={value}: model {spec.name!r} is an ONNX file, not exported by the harness"
        return super().refusal(value, spec, precision)

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, opset=int(value))


class Axes(ChoiceKind):
    key = "axes"
    title = ("batch/sequence axes: dynamic (the default) or fixed to each case's shape when the session is made "
             "(ONNX Runtime free-dimension overrides: the seeds' \"fix some dimensions\")")
    values = "fixed or dynamic"
    choices = ("fixed", "dynamic")
    needs = "fixed-axes"

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, fixed_axes=value == "fixed")


OPSET, AXES = Opset(), Axes()
