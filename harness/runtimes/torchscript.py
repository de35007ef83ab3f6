"""torchscript-cpu: torch.jit.trace + freeze + optimize_for_inference (TorchScript is in maintenance mode)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.model import name_outputs
from harness.runtimes.base import Runtime
from harness.runtimes.torch_eager import TorchEager


class TorchScript(TorchEager):
    """The seed documents' TorchScript row: a traced, frozen, inference-optimised graph, traced per shape.

    Tracing records one shape's control flow and sizes, so each new input shape traces again in
    `_setup_shape` (recorded in setup_s). Inputs are passed positionally in the model's input order.
    """

    decodes: ClassVar[bool] = False  # the eager decode loop would not be this runtime's
    reactivate_between_repeats: ClassVar[bool] = False  # a trace per shape: keep the activation
    name: ClassVar[str] = "torchscript-cpu"
    description: ClassVar[str] = "TorchScript: jit.trace + jit.freeze + jit.optimize_for_inference"
    _profile = Runtime._profile  # a frozen traced graph runs no module hooks
    cannot_profile: ClassVar[str] = "a frozen, traced TorchScript graph runs no module hooks"

    def _activate(self) -> None:
        super()._activate()
        self._scripted: Any = None

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        import warnings

        torch = self._torch
        args = self._args(self._prepare(feed))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about shape-dependent Python values
            traced = torch.jit.trace(self._module, args, check_trace=False)
            self._scripted = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
            self._scripted(*args)  # the profiling executor specialises on its first calls

    def _args(self, prepared: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(prepared[t.name] for t in self.model.inputs)

    def _infer(self, prepared: dict[str, Any]) -> Mapping[str, Any]:
        with self._torch.no_grad():
            return name_outputs(self._scripted(*self._args(prepared)), self.model.outputs)

    def _deactivate(self) -> None:
        self._scripted = None
        super()._deactivate()
