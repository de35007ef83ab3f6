"""Int8OnnxFromOnnx: ONNX Runtime INT8 quantisation of an FP32 ONNX model (static QDQ or dynamic), cached."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError

INT8_METHODS = ("auto", "static", "dynamic")
CALIBRATION_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
DEFAULT_CALIBRATION_METHOD = "minmax"
INT8_ACTIVATIONS = ("u8", "s8")  # u8: asymmetric QUInt8 (x86 CPU kernels); s8: symmetric QInt8 (TensorRT)
CALIBRATION_FEEDS = 32  # seeded feeds when a model has no calibration source of its own
CALIBRATION_SEED = 10_000  # far from the measurement seeds (0, 1, ...): calibration never sees the test feed
DYNAMIC_OPS = ("MatMul",)  # ORT's dynamic (integer-op) registry; Gemm is rewritten to MatMul + Add first

Feed = Mapping[str, np.ndarray]


def cpu_has_vnni() -> bool:
    """x86 VNNI (8-bit dot products without saturation): without it, weights use 7 bits (reduce_range)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # not Linux x86: no range reduction
    return "avx512_vnni" in flags or "avx_vnni" in flags or "avx2" not in flags


def choose_method(model_path: Path, has_calibration: bool) -> str:
    """The `auto` choice: dynamic for MatMul graphs without Conv (transformers) and no calibration source,
    static QDQ otherwise (CNNs, MLPs exported as Gemm, any model that brings calibration data)."""
    import onnx

    ops = {n.op_type for n in onnx.load(str(model_path), load_external_data=False).graph.node}
    if not has_calibration and "Conv" not in ops and "MatMul" in ops:
        return "dynamic"
    return "static"


@dataclass(frozen=True)
class Int8OnnxFromOnnx:
    """Lazy build step: the cached INT8 ONNX made from the FP32 artifact `source`.

    static: onnxruntime.quantization.quantize_static, QDQ format, per-channel INT8 weights, activations
    calibrated on `calibration()` feeds with `calibration_method` (minmax | entropy | percentile).
    dynamic: quantize_dynamic, INT8 weights of MatMul (Gemm rewritten to MatMul + Add), activations quantised
    at run time per tensor.
    """

    source: Artifact
    cache: ArtifactCache
    label: str
    method: str  # static | dynamic (resolve "auto" with choose_method first)
    calibration: Callable[[], Iterable[Feed]] | None = None
    calibration_source: str = ""  # what the feeds are, for the recipe and the cache key
    calibration_method: str = DEFAULT_CALIBRATION_METHOD
    activations: str = "u8"
    per_channel: bool = True  # weights quantised per output channel (False: one scale per tensor)

    def __post_init__(self) -> None:
        if self.method not in ("static", "dynamic"):
            raise ValueError(f"int8 method {self.method!r}: valid methods: static, dynamic")
        if self.calibration_method not in CALIBRATION_METHODS:
            raise ValueError(f"calibration method {self.calibration_method!r}: valid: "
                             f"{', '.join(CALIBRATION_METHODS)}")
        if self.activations not in INT8_ACTIVATIONS:
            raise ValueError(f"int8 activations {self.activations!r}: valid: {', '.join(INT8_ACTIVATIONS)}")
        if self.method == "static" and self.calibration is None:
            raise ValueError("static INT8 quantisation needs calibration feeds")

    @property
    def granularity(self) -> str:
        return "per-channel" if self.per_channel else "per-tensor"

    @property
    def reduce_range(self) -> bool:
        return self.activations == "u8" and not cpu_has_vnni()

    def key_parts(self) -> dict[str, Any]:
        import onnx
        import onnxruntime

        return {"source": self.source.key, "method": self.method, "activations": self.activations,
                "calibration_method": self.calibration_method if self.method == "static" else None,
                "calibration_source": self.calibration_source if self.method == "static" else None,
                "reduce_range": self.reduce_range, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__, "step": "Int8OnnxFromOnnx/1",
                **({} if self.per_channel else {"per_channel": False})}  # keys of per-channel builds unchanged

    def __call__(self) -> Artifact:
        return self.cache.get_or_build("onnx-int8", self.label, self.key_parts(), "model.onnx", self._quantize)

    def _quantize(self, path: Path) -> dict[str, Any]:
        import onnx

        work = path.parent / "fp32-prepared.onnx"
        model = onnx.load(str(self.source.path))
        rewritten = gemm_to_matmul(model) if self.method == "dynamic" else 0
        onnx.save(model, str(work))
        has_conv = any(n.op_type == "Conv" for n in model.graph.node)
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # the quantiser logs "consider pre-processing" on the root logger
        try:
            if self.method == "static":
                n_feeds = self._static(work, path)
                what = (f"int8: ORT static QDQ, {self.granularity} {'7-bit ' if self.reduce_range else ''}INT8 weights, "
                        f"{'asymmetric UINT8' if self.activations == 'u8' else 'symmetric INT8'} activations, "
                        f"{CALIBRATION_METHODS[self.calibration_method]} calibration on {n_feeds} feeds "
                        f"({self.calibration_source})")
            else:
                self._dynamic(work, path)
                what = (f"int8: ORT dynamic, {self.granularity} INT8 weights of MatMul"
                        + (f" ({rewritten} Gemm rewritten to MatMul + Add)" if rewritten else "")
                        + ", UINT8 activations quantised at run time"
                        + ("; Conv stays FP32 (no dynamic INT8 Conv kernel)" if has_conv else ""))
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - any quantiser failure is one clear error
            raise ModelError(f"{self.source.path}: INT8 {self.method} quantisation failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        finally:
            root.setLevel(level)
            work.unlink(missing_ok=True)
            for extra in path.parent.glob("*.data"):  # calibration scratch files, if any
                extra.unlink(missing_ok=True)
        quantized = onnx.load(str(path), load_external_data=False)
        ops = [n.op_type for n in quantized.graph.node]
        n_q = ops.count("QuantizeLinear") + ops.count("DynamicQuantizeLinear") + ops.count("MatMulInteger")
        if self.method == "static":
            int8_inits = {i.name for i in quantized.graph.initializer
                          if i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8) and len(i.dims) >= 2}
            n_q = sum(1 for n in quantized.graph.node if n.op_type == "DequantizeLinear"
                      and n.input[0] in int8_inits)  # quantised weight matrices and kernels
            recipe = f"{what}; {n_q} weight tensors quantised"
        else:
            n_q = ops.count("MatMulInteger")
            recipe = f"{what}; {n_q} MatMulInteger nodes"
        if n_q == 0:
            recipe += " (nothing was quantised: this model runs in FP32)"
        return {"recipe": recipe, "source": str(self.source.path), "method": self.method, "quantised": n_q}

    def _static(self, src: Path, dst: Path) -> int:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        feeds = _FeedReader(self.calibration())  # type: ignore[misc]
        symmetric = self.activations == "s8"
        quantize_static(
            str(src), str(dst), feeds, quant_format=QuantFormat.QDQ, per_channel=self.per_channel,
            reduce_range=self.reduce_range,
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=getattr(CalibrationMethod, CALIBRATION_METHODS[self.calibration_method]),
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
        if feeds.count == 0:
            raise ModelError(f"{self.label}: the calibration source gave no feeds")
        return feeds.count

    def _dynamic(self, src: Path, dst: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(src), str(dst), op_types_to_quantize=list(DYNAMIC_OPS), per_channel=self.per_channel,
                         reduce_range=self.reduce_range, weight_type=QuantType.QInt8)


class _FeedReader:
    """onnxruntime.quantization CalibrationDataReader over an iterable of feeds, counting them."""

    def __init__(self, feeds: Iterable[Feed]) -> None:
        self._it: Iterator[Feed] = iter(feeds)
        self.count = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        feed = next(self._it, None)
        if feed is None:
            return None
        self.count += 1
        return {k: np.ascontiguousarray(v) for k, v in feed.items()}

    def rewind(self) -> None:  # part of the reader interface; calibration reads once
        pass


def gemm_to_matmul(model: Any) -> int:
    """Rewrite plain Gemm nodes (alpha = beta = 1, transA = 0, constant B) as MatMul + Add, in place.

    ORT's dynamic quantiser handles MatMul only; torch exports nn.Linear on 2-D inputs as Gemm. The MatMul
    keeps the Gemm's node name, the Add produces the Gemm's output tensor, so tensor names do not change.
    Returns the number of nodes rewritten.
    """
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    nodes, count = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (node.op_type == "Gemm" and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
                 and not attrs.get("transA", 0) and len(node.input) >= 2 and node.input[1] in inits)
        if not plain:
            nodes.append(node)
            continue
        b = node.input[1]
        if attrs.get("transB", 0):
            w = numpy_helper.to_array(inits[b]).T
            inits[b].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w), b))
        out = node.output[0]
        has_bias = len(node.input) >= 3 and node.input[2]
        mm_out = f"{out}_matmul" if has_bias else out
        nodes.append(helper.make_node("MatMul", [node.input[0], b], [mm_out], name=node.name))
        if has_bias:
            nodes.append(helper.make_node("Add", [mm_out, node.input[2]], [out], name=f"{node.name}_bias"))
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if count:  # recorded shapes of the transposed weights are stale: let shape inference redo them
        del model.graph.value_info[:]
    return count
