"""Lazy, cached build steps named XFromY (OnnxFromTorch, ...), cached on disk by a fingerprint."""

from harness.artifacts.cache import Artifact, ArtifactCache, default_cache_dir
from harness.artifacts.for_precision import onnx_for_precision, onnx_fp32
from harness.artifacts.fp16 import FP16_BLOCK_LIST, Fp16OnnxFromOnnx
from harness.artifacts.int8 import Int8OnnxFromOnnx
from harness.artifacts.onnx_from_torch import OnnxFromTorch, onnx_for_model

__all__ = ["FP16_BLOCK_LIST", "Artifact", "ArtifactCache", "Fp16OnnxFromOnnx", "Int8OnnxFromOnnx", "OnnxFromTorch",
           "default_cache_dir", "onnx_for_model", "onnx_for_precision", "onnx_fp32"]
