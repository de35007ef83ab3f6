"""ONNX Runtime on the CPU execution provider."""

from __future__ import annotations

from typing import ClassVar

from harness.runtimes.onnxruntime.session import OnnxRuntime


class OrtCpu(OnnxRuntime):
    name: ClassVar[str] = "ort-cpu"
    distribution: ClassVar[str | None] = "onnxruntime"  # ort-cpu@1.20.0: the CPU build of that release
    provider: ClassVar[str] = "CPUExecutionProvider"
    description: ClassVar[str] = "ONNX Runtime, CPUExecutionProvider, ORT_ENABLE_ALL"


