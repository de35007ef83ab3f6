"""Fp16OnnxFromOnnx: an FP16 ONNX model made from an FP32 one, FP32 inputs/outputs kept, fragile ops in FP32."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError

# Ops kept in FP32 (a Cast is inserted around them), on top of onnxconverter-common's own default list (the
# ai.onnx.ml ops and others that have no FP16 definition). Numerically fragile in FP16 (max 65504, 11-bit
# mantissa): normalisations and reductions, which sum many terms (variance of large activations overflows);
# exponentials and powers, whose range exceeds FP16 (Softmax's exp, Pow(x, 2) of LayerNorm variance); index
# arithmetic (Range, CumSum), which must stay exact.
FP16_BLOCK_LIST: tuple[str, ...] = (
    "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization", "GroupNormalization",
    "InstanceNormalization", "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp",
    "ReduceProd", "Pow", "Exp", "Log", "Softmax", "LogSoftmax", "Range", "CumSum",
)


def fp16_recipe(block_list: tuple[str, ...]) -> str:
    return f"fp16: onnxconverter-common float16, keep_io_types, block list [{', '.join(block_list)}]"


@dataclass(frozen=True)
class Fp16OnnxFromOnnx:
    """Lazy build step: the cached FP16 ONNX made from the FP32 artifact `source`.

    onnxconverter-common's convert_float_to_float16 with keep_io_types=True (inputs and outputs stay FP32,
    Casts at the boundary) and `block_list` ops left in FP32. Weights outside FP16's range are clamped by the
    converter (|w| in [1e-7, 1e4]).
    """

    source: Artifact
    cache: ArtifactCache
    label: str
    block_list: tuple[str, ...] = field(default=FP16_BLOCK_LIST)

    @property
    def recipe(self) -> str:
        return fp16_recipe(self.block_list)

    def key_parts(self) -> dict[str, Any]:
        import onnx
        import onnxconverter_common

        return {"source": self.source.key, "block_list": list(self.block_list), "keep_io_types": True,
                "onnx": onnx.__version__, "onnxconverter_common": onnxconverter_common.__version__,
                "step": "Fp16OnnxFromOnnx/1"}

    def __call__(self) -> Artifact:
        return self.cache.get_or_build("onnx-fp16", self.label, self.key_parts(), "model.onnx", self._convert)

    def _convert(self, path: Path) -> dict[str, Any]:
        import onnx

        model = onnx.load(str(self.source.path))
        try:
            converted = convert_to_fp16(model, self.block_list)
        except Exception as exc:  # noqa: BLE001 - any converter failure is one clear error
            raise ModelError(f"{self.source.path}: FP16 conversion failed: {type(exc).__name__}: {exc}") from exc
        onnx.save(converted, str(path))
        kept = sorted({n.op_type for n in converted.graph.node if n.op_type in set(self.block_list)})
        return {"recipe": self.recipe, "source": str(self.source.path), "fp32_kept_ops": kept,
                "casts": sum(n.op_type == "Cast" for n in converted.graph.node)}


def convert_to_fp16(model: Any, block_list: tuple[str, ...] = FP16_BLOCK_LIST) -> Any:
    """The harness's FP16 conversion of an onnx.ModelProto (what Fp16OnnxFromOnnx caches; conformance runs it on
    each case): keep_io_types, `block_list` and the converter's own block list left in FP32, then checked."""
    import onnx
    from onnxconverter_common import float16

    block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(block_list))
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block)
    onnx.checker.check_model(converted)
    return converted
