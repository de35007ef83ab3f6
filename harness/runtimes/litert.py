"""litert-cpu: LiteRT (the TFLite runtime) with XNNPACK on a .tflite converted from the torch module per shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.errors import install_hint
from harness.model import ModelSpec
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime

INSTALL = install_hint("litert") + " (ai-edge-litert, litert-torch; not in the same environment as the tvm extra)"
# Precision -> the litert-torch quantisation recipe (see harness.artifacts.tflite_from_torch.RECIPES).
RECIPE: dict[Precision, str] = {
    Precision.FP32: "fp32",
    Precision.INT8: "int8-dynamic",  # dynamic-range: int8 weights, activations quantised at run time
    Precision.FP16: "fp16-weights",  # fp16 weights, fp32 compute
}


class LiteRtCpu(Runtime):
    """ai_edge_litert Interpreter, the run's thread count, the XNNPACK delegate (LiteRT's default CPU path).

    A .tflite from litert-torch is fixed-shape, so each input shape converts (and caches) its own artifact
    in `_setup_shape`; the conversion time is part of setup_s.
    """

    reactivate_between_repeats: ClassVar[bool] = False  # activation is a compile/build: keep it
    module: ClassVar[str | None] = "ai_edge_litert"
    name: ClassVar[str] = "litert-cpu"
    requirements: ClassVar[tuple[str, ...]] = ("ai-edge-litert>=1.2", "litert-torch>=0.10")  # the extra `litert`
    install: ClassVar[str] = INSTALL
    distribution: ClassVar[str | None] = "ai-edge-litert"
    precisions: ClassVar[frozenset[Precision]] = frozenset(RECIPE)
    description: ClassVar[str] = "LiteRT Interpreter + XNNPACK, .tflite from litert-torch"
    cannot_profile: ClassVar[str] = ("ai_edge_litert's Python Interpreter has no per-op profiler (the op profiling "
                                     "of the C++ benchmark tool is not exposed), and its .tflite comes from the "
                                     "torch module, not the ONNX graph")


    @classmethod
    def _supports_model(cls, model: ModelSpec) -> Availability:
        if model.build is None:
            return Availability(False, f"model {model.name!r} is ONNX-only: litert-cpu converts a PyTorch "
                                       "module to .tflite, and there is none")
        return Availability(True)

    def _activate(self) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self._interpreter_cls = Interpreter
        self._resolver = OpResolverType.AUTO  # builtin kernels with the default XNNPACK delegate applied
        self._interp: Any = None
        self.recipe = RECIPE[self.precision]

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        from harness.artifacts.tflite_from_torch import TfliteFromTorch

        names = [t.name for t in self.model.inputs]
        self._interp = None
        self.artifact = TfliteFromTorch(self.model, self.options.cache,
                                        shapes={n: tuple(feed[n].shape) for n in names},
                                        dtypes={n: str(feed[n].dtype) for n in names}, recipe=self.recipe)()
        interp = self._interpreter_cls(model_path=str(self.artifact.path), num_threads=self.options.threads,
                                       experimental_op_resolver_type=self._resolver)
        interp.allocate_tensors()
        signature = interp.get_signature_runner()
        ins = signature.get_input_details()  # {"args_0": {...}, ...} in the module's argument order
        outs = signature.get_output_details()  # {"output_0": {...}, ...}
        self._in_index = [ins[f"args_{i}"]["index"] for i in range(len(names))]
        # the converter narrows int64 inputs (token ids, masks) to int32: feed what the .tflite declares
        self._in_dtype = [np.dtype(ins[f"args_{i}"]["dtype"]) for i in range(len(names))]
        self._out_index = [outs[k]["index"] for k in sorted(outs, key=lambda k: int(k.rsplit("_", 1)[-1]))]
        if len(self._out_index) < len(self.model.outputs):
            raise RuntimeError(f"{self.artifact.path}: the .tflite has {len(self._out_index)} outputs, model "
                               f"{self.model.name!r} declares {len(self.model.outputs)}")
        self._interp = interp

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        dtypes = getattr(self, "_in_dtype", [None] * len(self.model.inputs))
        return [np.ascontiguousarray(feed[t.name], dtype=d) for t, d in zip(self.model.inputs, dtypes)]

    def _infer(self, prepared: list[np.ndarray]) -> Mapping[str, Any]:
        interp = self._interp
        for index, arr in zip(self._in_index, prepared):
            interp.set_tensor(index, arr)
        interp.invoke()
        return {name: interp.get_tensor(i) for name, i in zip(self.model.outputs, self._out_index)}

    def _deactivate(self) -> None:
        self._interp = None

    def details(self) -> dict[str, Any]:
        import importlib.metadata as md

        out = {**super().details(), "recipe": getattr(self, "recipe", None), "delegate": "xnnpack"}
        try:
            out["ai_edge_litert"] = md.version("ai-edge-litert")
        except md.PackageNotFoundError:
            pass
        return out
