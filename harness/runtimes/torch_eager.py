"""torch-cpu: PyTorch eager execution under inference mode (fp32; bf16 autocast; int8 dynamic Linear)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.model import ModelSpec, name_outputs
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime


class TorchEager(Runtime):
    """Eager PyTorch on `torch_device`; outputs come back to the host inside the timed call.

    bf16: the FP32 module under torch.autocast(device, bfloat16) (matmuls and convolutions in BF16, the rest
    as autocast decides). int8 (CPU): torch.ao.quantization.quantize_dynamic of every nn.Linear (INT8 weights,
    activations quantised per call); other layers, e.g. convolutions, stay FP32. On the CPU an fp16 request
    runs as bf16 (case_precision): PyTorch has no fast FP16 CPU path, and the row says bf16, not fp16.
    """

    name: ClassVar[str] = "torch-cpu"
    module: ClassVar[str | None] = "torch"
    device: ClassVar[str] = "cpu"
    torch_device: ClassVar[str] = "cpu"
    description: ClassVar[str] = "PyTorch eager, torch.inference_mode()"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.BF16, Precision.INT8})
    decodes: ClassVar[bool] = True
    runs_torch_module: ClassVar[bool] = True
    distribution: ClassVar[str | None] = "torch"  # torch-cpu@2.12.0: that torch release in its own environment

    @classmethod
    def availability(cls) -> Availability:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            return Availability(False, f"torch is not importable: {exc}")
        return Availability(True)

    @classmethod
    def case_precision(cls, requested: Precision) -> Precision:
        if Precision(requested) is Precision.FP16 and cls.torch_device == "cpu":
            return Precision.BF16
        return Precision(requested)

    @classmethod
    def _supports_model(cls, model: ModelSpec) -> Availability:
        if model.build is None:
            return Availability(False, f"model {model.name!r} is ONNX-only: there is no PyTorch module to run")
        return Availability(True)

    def _activate(self) -> None:
        import torch

        torch.set_num_threads(self.options.threads)
        self._torch = torch
        module = self.model.build().eval().to(self.torch_device)
        self._autocast: Any = contextlib.nullcontext
        if self.precision is Precision.BF16:
            device = self.torch_device.split(":")[0]
            self._autocast = lambda: torch.autocast(device, dtype=torch.bfloat16)
            self.recipe = f"bf16: torch.autocast({device}, bfloat16) over the FP32 module"
        elif self.precision is Precision.INT8:
            module, self.recipe = quantize_linear_dynamic(module)
        self._module = module

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return {k: self._torch.from_numpy(np.ascontiguousarray(v)).to(self.torch_device) for k, v in feed.items()}

    def _infer(self, prepared: dict[str, Any]) -> Mapping[str, Any]:
        with self._torch.inference_mode(), self._autocast():
            return name_outputs(self._module(**prepared), self.model.outputs)

    def _to_numpy(self, value: Any) -> np.ndarray:
        return value.detach().float().cpu().numpy()

    def _deactivate(self) -> None:
        self._module = None

    def _profile(self, feed: Mapping[str, np.ndarray], runs: int) -> Any:
        """Forward pre/post hooks on every module, added for the profiled pass and removed after it (the timed
        loop ran without them): one warm-up call, then `runs`, each module's self time (its calls' time less its
        submodules') summed with perf_counter_ns; a module's self time is credited to the ONNX nodes the torch
        exporter recorded in that module's scope (torch_module_ops). The hooks' own cost (a few microseconds
        per module call) lands in the parent modules' self time and in the gap to the measured latency."""
        import time

        from harness.profile.layers import OpProfile, SourceGraph

        prepared = self._prepare(feed)
        self._infer(prepared)  # not counted
        sync = self.synchronize  # a GPU subclass: each module's kernels finish before its clock is read
        clock = time.perf_counter_ns
        stack: list[list[Any]] = []
        self_ns: dict[str, int] = {}
        kinds: dict[str, str] = {}
        handles = []

        def enter(name: str) -> Any:
            def hook(module: Any, args: Any, kwargs: Any = None) -> None:
                sync()
                if name not in self_ns:
                    self_ns[name] = 0  # the modules in the order of their first call
                stack.append([name, clock(), 0])
            return hook

        def leave(module: Any, args: Any, output: Any) -> None:
            sync()
            name, start, children = stack.pop()
            took = clock() - start
            self_ns[name] = self_ns.get(name, 0) + took - children
            if stack:
                stack[-1][2] += took

        try:
            for name, module in self._module.named_modules():
                kinds[name] = type(module).__name__
                handles.append(module.register_forward_pre_hook(enter(name)))
                handles.append(module.register_forward_hook(lambda m, a, o: leave(m, a, o)))
            t0 = clock()
            for _ in range(runs):
                self._infer(prepared)
            wall_us = (clock() - t0) / 1e3 / runs
        finally:
            for h in handles:
                h.remove()
        graph_path = self.cost_graph()
        ops = torch_module_ops({k: v / 1e3 / runs for k, v in self_ns.items()}, kinds,
                               SourceGraph.from_model(graph_path))
        return OpProfile(ops=ops, runs=runs, wall_us=wall_us, graph=graph_path,
                         method=f"torch {self._torch.__version__} forward hooks on every module (perf_counter_ns), "
                                f"self time per module over {runs} calls, mapped by the export's module scopes")

    def decoder(self) -> Any:
        """The model's Hugging Face causal LM stepped eagerly with its DynamicCache on `torch_device`."""
        from harness.runtimes.decoding.torch_kv import TorchDecoder

        return TorchDecoder(self.model, self.precision, self.options.threads, self.torch_device,
                            int8=quantize_linear_dynamic)

    def details(self) -> dict[str, Any]:
        return {**super().details(), "torch": self._torch.__version__ if hasattr(self, "_torch") else None}


def quantize_linear_dynamic(module: Any) -> tuple[Any, str]:
    """torch.ao dynamic quantisation of every nn.Linear (qint8 weights); returns the module and its recipe,
    which says how much of the model that covers (a CNN keeps its convolutions in FP32)."""
    import torch
    from torch import nn

    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    total = sum(p.numel() for p in module.parameters())
    covered = sum(p.numel() for m in linears for p in m.parameters())
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao, still present
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)
    size = f"{total / 1e6:.1f}M" if total >= 1e5 else f"{total / 1e3:.1f}k"
    share = f"{covered / total:.0%} of {size} parameters" if total else "no parameters"
    n = len(linears)
    recipe = f"int8: torch.ao dynamic quantisation of nn.Linear (qint8), {n} layer{'' if n == 1 else 's'}, {share}"
    if not linears:
        recipe += " (no nn.Linear: nothing was quantised, this row is FP32 compute)"
    elif covered < total:
        recipe += "; other layers (e.g. Conv2d) stay FP32"
    return quantized, recipe


def torch_module_ops(self_us: Mapping[str, float], kinds: Mapping[str, str], graph: Any) -> tuple[Any, ...]:
    """Each module's self time (microseconds per inference, by its path in named_modules(); "" the root; in the
    order of their first call) as an OpTime over the ONNX nodes whose innermost recorded scope is that module
    (SourceGraph.scopes, from the torch exporter's name scopes): a module that exported to several nodes is a
    fusion named "module <Class>". A leaf module with no node of its own was folded into the next one by the
    export (Conv2d into the BatchNorm2d after it: the fused Conv carries the BatchNorm's scope): its time goes
    to the nodes of the next leaf module called, the fold named; a container's own time (its bookkeeping and
    the hooks' cost) is unmapped."""
    from harness.profile.layers import OpTime

    by_scope = graph.nodes_of_scope()
    paths = list(self_us)
    leaves = [p for p in paths if not any(q.startswith(p + ".") or (p == "" and q) for q in paths)]
    out = []
    for path, us in self_us.items():
        nodes = tuple(by_scope.get(path, ()))
        kind = kinds.get(path, "")
        fusion = f"module {kind}" if len(nodes) > 1 else ""
        if not nodes and path in leaves:
            after = leaves[leaves.index(path) + 1:]
            if after and by_scope.get(after[0]):
                nodes = tuple(by_scope[after[0]])
                fusion = f"module {kind} folded into {kinds.get(after[0], after[0])} by the export"
        out.append(OpTime(path or "(root)", kind, us, nodes, fusion))
    return tuple(out)
