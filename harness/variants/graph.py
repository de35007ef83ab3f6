"""Graph transforms of the FP32 ONNX before any precision conversion: onnxsim, onnxslim, ORT's transformer
fusion. The transforms themselves are build steps in harness.artifacts.transform (cached like any artifact)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.precision import Precision
from harness.variants.base import ChoiceKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions
    from harness.model import ModelSpec


class _Transform(ChoiceKind):
    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, graph_transforms=(*options.graph_transforms, value))


class Simplify(_Transform):
    key = "simplify"
    title = "simplify the exported FP32 graph with onnxsim (onnx-simplifier) or onnxslim"
    values = "onnxsim or onnxslim"
    choices = ("onnxsim", "onnxslim")
    needs = "onnx-graph"


class Fuse(_Transform):
    key = "fuse"
    title = ("ONNX Runtime's transformer fusion optimiser (onnxruntime.transformers.optimizer: attention, "
             "LayerNorm, Gelu fusions into com.microsoft operators that only ONNX Runtime runs)")
    values = "transformer"
    choices = ("transformer",)
    needs = "ort-session"

    def refusal(self, value: str, spec: ModelSpec, precision: Precision) -> str | None:
        if "transformer" not in spec.tags:
            return f"variant fuse={value}: model {spec.name!r} is not a transformer (tags: " \
                   f"{', '.join(sorted(spec.tags)) or 'none'})"
        return super().refusal(value, spec, precision)


SIMPLIFY, FUSE = Simplify(), Fuse()
