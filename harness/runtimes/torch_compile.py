"""torch-compile-cpu / torch-compile-cuda: torch.compile (Inductor), one static-shape compile per input shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.model import name_outputs
from harness.runtimes.base import Availability, Runtime
from harness.runtimes.torch_eager import TorchEager


class TorchCompile(TorchEager):
    """torch.compile(backend="inductor", dynamic=False, mode=--compile-mode), compiled in `_setup_shape`.

    Each new input shape resets Dynamo and compiles afresh (a static graph, as a deployment would ship), so
    the compile lands in setup_s, never in the timed loop.
    """

    decodes: ClassVar[bool] = False  # the eager decode loop would not be this runtime's
    reactivate_between_repeats: ClassVar[bool] = False  # activation is a compile/build: keep it
    name: ClassVar[str] = "torch-compile-cpu"
    description: ClassVar[str] = "torch.compile, Inductor, dynamic=False, one compile per shape"
    _profile = Runtime._profile  # module hooks do not see inside the compiled graph
    cannot_profile: ClassVar[str] = ("module hooks do not see inside an Inductor graph and its fused kernels keep no "
                                     "record of the ONNX nodes they cover")

    def _activate(self) -> None:
        super()._activate()
        self._compiled: Any = None
        self._compiles = 0

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        torch = self._torch
        torch._dynamo.reset()  # drop the previous shape's graph: no symbolic-batch recompile
        self._compiled = torch.compile(self._module, backend="inductor", mode=self.options.compile_mode,
                                       dynamic=False)
        prepared = self._prepare(feed)  # outside inference_mode, like `bind`: Dynamo guards on the dispatch keys
        with torch.inference_mode():
            self._compiled(**prepared)  # the compile happens on this first call
        self.synchronize()
        self._compiles += 1

    def _infer(self, prepared: dict[str, Any]) -> Mapping[str, Any]:
        with self._torch.inference_mode():
            return name_outputs(self._compiled(**prepared), self.model.outputs)

    def _deactivate(self) -> None:
        self._compiled = None
        super()._deactivate()

    def details(self) -> dict[str, Any]:
        return {**super().details(), "compile_mode": self.options.compile_mode, "backend": "inductor",
                "dynamic": False, "compiles": getattr(self, "_compiles", 0)}


class TorchCompileCuda(TorchCompile):
    """The same on a CUDA GPU; outputs are copied back to the host inside the timed call."""

    name: ClassVar[str] = "torch-compile-cuda"
    device: ClassVar[str] = "cuda"
    torch_device: ClassVar[str] = "cuda"
    description: ClassVar[str] = "torch.compile, Inductor, dynamic=False, CUDA"

    @classmethod
    def availability(cls) -> Availability:
        base = super().availability()
        if not base:
            return base
        import torch

        if not torch.cuda.is_available():
            return Availability(False, f"torch {torch.__version__} sees no CUDA device "
                                       f"(built with CUDA {torch.version.cuda})")
        return Availability(True)

    def _activate(self) -> None:
        import torch

        from harness.runtimes.torch_cuda import ieee_fp32

        self._fp32_math = ieee_fp32(torch)
        super()._activate()

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def details(self) -> dict[str, Any]:
        return {**super().details(), "fp32_math": getattr(self, "_fp32_math", None)}
