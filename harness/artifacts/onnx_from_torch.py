"""OnnxFromTorch: export a ModelSpec's torch module to ONNX with dynamic batch/seq axes, checked and cached."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError
from harness.model import BATCH, SEQ, ModelSpec, name_outputs

# Example sizes used while tracing: not 0 or 1, which exporters specialise into constants.
_EXAMPLE_DIMS = {BATCH: 2, SEQ: 16}
EXPORTERS = ("dynamo", "legacy")


@dataclass(frozen=True)
class OnnxFromTorch:
    """Lazy build step: calling it returns the cached ONNX Artifact for `spec`, exporting on a miss.

    exporter "dynamo" is torch.onnx's torch.export-based exporter (the default since PyTorch 2.9);
    "legacy" is the TorchScript-based one (opset 17, as in the seed documents).
    """

    spec: ModelSpec
    cache: ArtifactCache
    exporter: str = "dynamo"
    opset: int | None = None

    def key_parts(self) -> dict[str, Any]:
        import onnx
        import torch

        return {"model_fingerprint": self.spec.fingerprint(), "exporter": self.exporter, "opset": self.opset,
                "torch": torch.__version__, "onnx": onnx.__version__, "step": "OnnxFromTorch/1"}

    def __call__(self) -> Artifact:
        if self.spec.build is None:
            raise ModelError(f"model {self.spec.name!r} has no torch module to export")
        if self.exporter not in EXPORTERS:
            raise ModelError(f"unknown ONNX exporter {self.exporter!r}; valid: {', '.join(EXPORTERS)}")
        return self.cache.get_or_build("onnx", self.spec.name, self.key_parts(), "model.onnx", self._export)

    def _export(self, path: Path) -> dict[str, Any]:
        import onnx
        import torch

        from harness.data import make_feed

        spec = self.spec
        module = spec.build().eval()
        dims = {d: _EXAMPLE_DIMS.get(d, 2) for d in spec.symbolic_dims}
        feed = make_feed(spec, dims, seed=0)
        kwargs = {name: torch.from_numpy(arr) for name, arr in feed.items()}
        input_names = [t.name for t in spec.inputs]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if self.exporter == "dynamo":
                    dim_objs = {d: torch.export.Dim(d) for d in spec.symbolic_dims}
                    dynamic_shapes = {t.name: {i: dim_objs[d] for i, d in enumerate(t.shape) if isinstance(d, str)}
                                      for t in spec.inputs}
                    torch.onnx.export(module, (), str(path), kwargs=kwargs, input_names=input_names,
                                      output_names=list(spec.outputs), dynamic_shapes=dynamic_shapes,
                                      opset_version=self.opset, dynamo=True, verbose=False)
                else:
                    dynamic_axes = {t.name: {i: d for i, d in enumerate(t.shape) if isinstance(d, str)}
                                    for t in spec.inputs}
                    dynamic_axes.update(_output_axes(module, kwargs, spec, dims))
                    args = tuple(kwargs[n] for n in input_names)
                    torch.onnx.export(module, args, str(path), input_names=input_names,
                                      output_names=list(spec.outputs), dynamic_axes=dynamic_axes,
                                      opset_version=self.opset or 17, dynamo=False, do_constant_folding=True)
        except Exception as exc:  # noqa: BLE001 - every exporter failure becomes one clear error
            raise ModelError(f"model {spec.name!r}: ONNX export ({self.exporter}) failed: "
                             f"{_describe_export_error(exc)}") from exc
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"model {spec.name!r}: exported ONNX fails onnx.checker: {exc}") from exc
        model = onnx.load(str(path), load_external_data=False)
        _check_dynamic_axes(spec, model, path)
        return {"exporter": self.exporter, "opset": [(o.domain, o.version) for o in model.opset_import],
                "inputs": input_names, "outputs": list(spec.outputs)}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", str(exc)).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _describe_export_error(exc: BaseException) -> str:
    """The exporter's error and its root cause (torch.export wraps a data-dependent branch in two layers)."""
    root = exc
    seen = {id(exc)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    text = _first_line(exc)
    if root is not exc:
        text += f" (cause: {_first_line(root)})"
    if "data-dependent" in text or "GuardOnDataDependent" in text:
        text += ("; the module branches on tensor values (data-dependent control flow), which torch.export "
                 "cannot capture: rewrite it with torch.where/torch.cond, or try --exporter legacy (it "
                 "traces the branch taken on the example input only)")
    return text[:1500]


def _output_axes(module: Any, kwargs: dict[str, Any], spec: ModelSpec,
                 dims: dict[str, int]) -> dict[str, Any]:
    """Names for the outputs' dynamic axes (legacy exporter): axis 0 is batch; a later axis whose size is the
    example sequence length is seq. Found by one forward pass on the example feed."""
    import torch

    with torch.no_grad():
        outs = name_outputs(module(**kwargs), spec.outputs)
    axes: dict[str, Any] = {}
    for name in spec.outputs:
        shape = tuple(getattr(outs.get(name), "shape", ()))
        ax: dict[int, str] = {0: BATCH} if shape else {}
        if SEQ in dims:
            ax.update({i: SEQ for i, n in enumerate(shape) if i > 0 and n == dims[SEQ]})
        axes[name] = ax
    return axes


def _check_dynamic_axes(spec: ModelSpec, model: Any, path: Path) -> None:
    """Fail if an exporter froze a symbolic dimension into a constant."""
    graph_inputs = {i.name: i for i in model.graph.input}
    for t in spec.inputs:
        gi = graph_inputs.get(t.name)
        if gi is None:
            raise ModelError(f"{path}: exported graph has no input {t.name!r} (has {sorted(graph_inputs)})")
        gdims = gi.type.tensor_type.shape.dim
        for i, d in enumerate(t.shape):
            if isinstance(d, str) and i < len(gdims) and not gdims[i].dim_param:
                raise ModelError(f"{path}: input {t.name!r} axis {i} ({d}) was exported as the constant "
                                 f"{gdims[i].dim_value}; the batch/seq axes must stay dynamic")


def onnx_for_model(spec: ModelSpec, cache: ArtifactCache, exporter: str = "dynamo",
                   opset: int | None = None) -> Artifact:
    """The FP32 ONNX file for a model: the user's own file, or the cached export of its torch module (at
    `opset`, else the exporter's default)."""
    if spec.onnx_path is not None:
        from harness.model_files import check_model_path

        check_model_path(spec.onnx_path)  # before onnxruntime opens it
        return Artifact(Path(spec.onnx_path), spec.fingerprint(), True, 0.0, {"kind": "user-onnx"})
    return OnnxFromTorch(spec, cache, exporter, opset)()
