"""ONNX Runtime: one adapter, the execution provider chosen by the registered subclass."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from harness.artifacts import onnx_for_model, onnx_for_precision
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime


class OnnxRuntime(Runtime):
    """InferenceSession with full graph optimisation and the run's intra-op thread count.

    Precisions (every EP subclass inherits them): fp32 runs the FP32 export; fp16 and int8 run the files
    onnx_for_precision builds from it (FP16 with FP32 I/O; INT8 static QDQ or dynamic). On the CPU EP an FP16
    graph runs mostly through Casts to FP32 (few FP16 CPU kernels: ORT inserts the Casts itself); INT8 QDQ
    Conv/MatMul/Gemm with per-channel weights fuse into QLinearConv/QLinearMatMul/QGemm kernels, dynamic
    MatMul runs as DynamicQuantizeLinear + MatMulInteger.
    """

    provider: ClassVar[str]
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16, Precision.INT8})
    provider_options: ClassVar[dict[str, Any]] = {}

    @classmethod
    def availability(cls) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return Availability(False, f"onnxruntime is not importable: {exc}")
        providers = ort.get_available_providers()
        if cls.provider not in providers:
            return Availability(False, f"{cls.provider} not available: onnxruntime {ort.__version__} "
                                       f"was built with {', '.join(providers)}")
        return Availability(True)

    def _activate(self) -> None:
        import onnxruntime as ort

        self.artifact = onnx_for_precision(self.model, self.precision, self.options)
        self.recipe = str(self.artifact.meta.get("recipe") or self.precision)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = self.options.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        self._session = ort.InferenceSession(str(self.artifact.path), so,
                                             providers=[(self.provider, dict(self.provider_options))])
        active = self._session.get_providers()
        if not active or active[0] != self.provider:
            # onnxruntime falls back to CPU silently when a provider's libraries are missing.
            raise RuntimeError(f"{self.provider} not available: the session fell back to {active}")
        self._output_names = [o.name for o in self._session.get_outputs()]
        self._ort_version = ort.__version__

    def _infer(self, prepared: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(zip(self._output_names, self._session.run(self._output_names, prepared)))

    def _deactivate(self) -> None:
        self._session = None

    def onnx_pair(self) -> tuple[Path, Path] | None:
        if self.artifact is None or self.precision is Precision.FP32:
            return None
        return onnx_for_model(self.model, self.options.cache, self.options.exporter).path, self.artifact.path

    def details(self) -> dict[str, Any]:
        return {**super().details(), "provider": self.provider,
                "onnxruntime": getattr(self, "_ort_version", None)}


class OrtCpu(OnnxRuntime):
    name: ClassVar[str] = "ort-cpu"
    provider: ClassVar[str] = "CPUExecutionProvider"
    description: ClassVar[str] = "ONNX Runtime, CPUExecutionProvider, ORT_ENABLE_ALL"
