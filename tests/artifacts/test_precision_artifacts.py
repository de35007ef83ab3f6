"""FP16 and INT8 ONNX artifacts: what each recipe builds, that it is cached, and that its key follows options."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.artifacts import ArtifactCache, Fp16OnnxFromOnnx, onnx_for_model, onnx_for_precision
from harness.artifacts.cache import Artifact
from harness.artifacts.int8 import choose_method, gemm_to_matmul
from harness.data import make_feed
from harness.errors import UsageError
from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import RuntimeOptions


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    return RuntimeOptions(threads=1, cache=ArtifactCache(tmp_path_factory.mktemp("cache")))


def _run(path, feed):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feed)[0]


def test_fp32_is_the_plain_export_with_a_recipe(options):
    spec = get_model("mlp")
    a = onnx_for_precision(spec, Precision.FP32, options)
    assert a.path == onnx_for_model(spec, options.cache).path and a.meta["recipe"] == "fp32"
    with pytest.raises(UsageError, match="no ONNX recipe for bf16"):
        onnx_for_precision(spec, Precision.BF16, options)


def test_fp16_keeps_fp32_io_converts_weights_and_is_cached(options):
    spec = get_model("mlp")
    a = onnx_for_precision(spec, Precision.FP16, options)
    assert a.meta["recipe"].startswith("fp16: onnxconverter-common float16, keep_io_types, block list [")
    m = onnx.load(str(a.path))
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert m.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert {i.data_type for i in m.graph.initializer} == {TensorProto.FLOAT16}
    b = onnx_for_precision(spec, Precision.FP16, options)
    assert b.cache_hit and b.path == a.path and b.meta["recipe"] == a.meta["recipe"]
    feed = make_feed(spec, {"batch": 4}, 0)
    ref = _run(onnx_for_model(spec, options.cache).path, feed)
    np.testing.assert_allclose(_run(a.path, feed), ref, rtol=0, atol=1e-2)


def test_fp16_block_list_keeps_fragile_ops_in_fp32(tmp_path, options):
    """A Softmax after a MatMul: the MatMul goes FP16, the Softmax (blocked) is fed through a Cast to FP32."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Softmax", ["h"], ["y"], name="sm")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])], [w])
    path = tmp_path / "sm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    src = Artifact(path, "k-softmax", True, 0.0, {})
    out = Fp16OnnxFromOnnx(src, options.cache, "softmax")()
    m = onnx.load(str(out.path))
    sm = next(n for n in m.graph.node if n.op_type == "Softmax")
    producer = {o: n for n in m.graph.node for o in n.output}
    cast = producer[sm.input[0]]
    assert cast.op_type == "Cast" and helper.get_attribute_value(cast.attribute[0]) == TensorProto.FLOAT
    assert out.meta["fp32_kept_ops"] == ["Softmax"]
    narrower = Fp16OnnxFromOnnx(src, options.cache, "softmax", block_list=())()
    assert narrower.key != out.key  # the block list is part of the cache key


def test_int8_static_is_qdq_per_channel_and_the_key_follows_the_calibration_method(options):
    spec = get_model("mlp")
    a = onnx_for_precision(spec, Precision.INT8, dataclasses.replace(options, int8_method="static"))
    r = a.meta["recipe"]
    assert r.startswith("int8: ORT static QDQ, per-channel") and "MinMax calibration on 32 feeds" in r
    assert "3 weight tensors quantised" in r
    m = onnx.load(str(a.path))
    ops = [n.op_type for n in m.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    scales = {i.name: i for i in m.graph.initializer}
    w_dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "net.0.weight_quantized")
    assert list(scales[w_dq.input[1]].dims) == [512]  # one scale per output channel
    b = onnx_for_precision(spec, Precision.INT8, dataclasses.replace(options, int8_method="static",
                                                                     calibration_method="percentile"))
    assert b.key != a.key and "Percentile calibration" in b.meta["recipe"]
    feed = make_feed(spec, {"batch": 4}, 0)
    ref = _run(onnx_for_model(spec, options.cache).path, feed)
    got = _run(a.path, feed)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.1


def test_int8_dynamic_rewrites_gemm_and_uses_matmulinteger(options):
    spec = get_model("mlp")
    a = onnx_for_precision(spec, Precision.INT8, dataclasses.replace(options, int8_method="dynamic"))
    assert "ORT dynamic" in a.meta["recipe"] and "3 Gemm rewritten" in a.meta["recipe"]
    assert [n.op_type for n in onnx.load(str(a.path)).graph.node].count("MatMulInteger") == 3


def test_gemm_to_matmul_is_exact(options):
    spec = get_model("mlp")
    fp32 = onnx_for_model(spec, options.cache).path
    m = onnx.load(str(fp32))
    assert gemm_to_matmul(m) == 3
    feed = make_feed(spec, {"batch": 3}, 0)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(s.run(None, feed)[0], _run(fp32, feed), rtol=1e-5, atol=1e-6)


def test_model_calibration_source_is_used_and_auto_chooses_by_graph(options, tmp_path):
    base = get_model("mlp")
    seen = []

    def calibration():
        for i in range(5):
            seen.append(i)
            yield make_feed(base, {"batch": 2}, 100 + i)

    spec = dataclasses.replace(base, name="mlp-calibrated", calibration=calibration)
    a = onnx_for_precision(spec, Precision.INT8, options)  # auto + calibration data -> static
    assert "static QDQ" in a.meta["recipe"] and "on 5 feeds (mlp-calibrated.calibration)" in a.meta["recipe"]
    assert seen == [0, 1, 2, 3, 4]
    fp32 = onnx_for_model(base, options.cache).path
    assert choose_method(fp32, has_calibration=False) == "static"  # Gemm MLP: static QDQ
    mm = tmp_path / "mm.onnx"
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")])
    onnx.save(helper.make_model(graph), str(mm))
    assert choose_method(mm, has_calibration=False) == "dynamic"
    assert choose_method(mm, has_calibration=True) == "static"


def test_transformer_matmuls_quantise_both_ways(options):
    """A tiny BERT (attention, LayerNorm, GELU): auto picks dynamic; static QDQ calibrates at seq 64."""
    from tinybert import TINY_BERT

    feed = make_feed(TINY_BERT, {"batch": 2, "seq": 16}, 0)
    ref = _run(onnx_for_model(TINY_BERT, options.cache).path, feed)
    dyn = onnx_for_precision(TINY_BERT, Precision.INT8, options)
    assert "ORT dynamic" in dyn.meta["recipe"] and "12 MatMulInteger nodes" in dyn.meta["recipe"]
    st = onnx_for_precision(TINY_BERT, Precision.INT8, dataclasses.replace(options, int8_method="static"))
    assert "static QDQ" in st.meta["recipe"] and "seq 64" in st.meta["recipe"]
    for a in (dyn, st):
        got = _run(a.path, feed)
        cos = float(np.sum(got * ref) / (np.linalg.norm(got) * np.linalg.norm(ref)))
        assert cos > 0.98, (a.meta["recipe"], cos)


def _io_types(model):
    return [(v.name, v.type.tensor_type.elem_type) for v in (*model.graph.input, *model.graph.output)]


def _softmax_graph():
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "sm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _matmul_layernorm_graph():
    """MatMul -> LayerNormalization (kept in FP32) -> output `y`, which an Add inside the graph also reads."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("LayerNormalization", ["h", "s", "b"], ["y"]),
         helper.make_node("Add", ["y", "h"], ["z"])], "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("make", [_softmax_graph, _matmul_layernorm_graph], ids=["softmax", "layernorm"])
def test_fp16_keeps_the_io_types_when_the_graph_ends_in_a_kept_op(make):
    """onnxconverter-common retypes an output written by an op it keeps in FP32 as FP16 despite keep_io_types;
    convert_to_fp16 gives it back its type (and the unnamed nodes do not collide in its Cast names)."""
    from onnxconverter_common import float16

    from harness.artifacts.fp16 import convert_to_fp16

    raw = float16.convert_float_to_float16(make(), keep_io_types=True,
                                           op_block_list=["Softmax", "LayerNormalization"])
    assert _io_types(raw) != _io_types(make())  # the converter's fault this works around, still there
    model = make()
    converted = convert_to_fp16(make())
    assert _io_types(converted) == _io_types(model)
    x = np.random.default_rng(1).standard_normal((2, model.graph.input[0].type.tensor_type.shape.dim[1].dim_value))
    feed = {"x": x.astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    got = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)


def test_fp16_drops_initializer_inputs_of_ir3_models():
    """IR 3 lists weights as graph inputs: the converter would declare one name FP32 and FP16 at once."""
    from harness.artifacts.fp16 import convert_to_fp16

    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]
    graph = helper.make_graph(nodes, "ir3", inputs, outputs, [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)
    converted = convert_to_fp16(model)
    assert [i.name for i in converted.graph.input] == ["x"] and converted.ir_version == 4
    assert converted.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    feed = {"x": np.arange(4, dtype=np.float32).reshape(1, 4)}
    got = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, np.exp(feed["x"]) / np.exp(feed["x"]).sum(), rtol=1e-2)


def test_fp16_points_the_models_own_casts_to_fp32_at_fp16():
    """A Cast to FLOAT inside the graph (a Llama export's rotary embedding has one): the converter retypes its
    output FP16 and leaves `to` at FLOAT, which failed ONNX's check ("Inferred elem type differs")."""
    from onnx import shape_inference

    from harness.artifacts.fp16 import convert_to_fp16

    w = numpy_helper.from_array(np.full((4, 4), 0.5, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Cast", ["h"], ["c"], to=1),
             helper.make_node("Add", ["c", "h"], ["y"])]
    graph = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                           ir_version=9))
    converted = convert_to_fp16(model)
    cast = next(n for n in converted.graph.node if n.name == "fp16_node_1" or n.output == ["c"])
    assert helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) == TensorProto.FLOAT16
    feed = {"x": np.arange(4, dtype=np.float32).reshape(1, 4)}
    got = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, 2 * feed["x"] @ np.full((4, 4), 0.5), rtol=1e-2)
