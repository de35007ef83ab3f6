"""Lazy, cached build steps named XFromY (OnnxFromTorch, ...), cached on disk by a fingerprint."""

from harness.artifacts.cache import Artifact, ArtifactCache, default_cache_dir
from harness.artifacts.onnx_from_torch import OnnxFromTorch, onnx_for_model

__all__ = ["Artifact", "ArtifactCache", "OnnxFromTorch", "default_cache_dir", "onnx_for_model"]
