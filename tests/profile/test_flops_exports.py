"""The counter on a real torch export (a tiny BERT, exported in seconds): every MatMul of the encoder counted,
the shape arithmetic of the export folded, the FP32 and the dynamic-INT8 graph counting the same GEMM work."""

from __future__ import annotations

import pytest

from harness.artifacts import ArtifactCache, Int8OnnxFromOnnx, onnx_for_model
from harness.profile.flops import graph_cost


def _gemm_flops(cost):
    kinds = ("MatMul", "Gemm", "MatMulInteger", "FusedMatMul")
    return sum(n.flops for n in cost.nodes if n.op_type in kinds and n.flops is not None)


@pytest.mark.e2e
@pytest.mark.slow
def test_tiny_bert_matmul_flops_are_the_analytic_ones(tmp_path):
    from tinybert import CONFIG, TINY_BERT

    b, s = 2, 16
    h, i, layers = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["num_hidden_layers"]
    # per layer: Q, K, V, output projections; the two FFN GEMMs; Q @ K^T and P @ V over all heads
    expected = layers * (4 * 2 * b * s * h * h + 2 * 2 * b * s * h * i + 2 * 2 * b * s * s * h)
    cache = ArtifactCache(tmp_path / "cache")
    source = onnx_for_model(TINY_BERT, cache)
    cost = graph_cost(source.path, {"batch": b, "seq": s})
    assert _gemm_flops(cost) == expected
    assert not set(cost.not_counted) - {"Range"}, cost.not_counted  # position ids' Range only
    assert cost.bytes_unknown == {}
    int8 = Int8OnnxFromOnnx(source, cache, TINY_BERT.name, "dynamic")().path
    q = graph_cost(int8, {"batch": b, "seq": s})
    assert any(n.op_type == "MatMulInteger" for n in q.nodes)
    assert _gemm_flops(q) == expected
