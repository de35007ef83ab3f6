"""Both torch.onnx exporters keep the text models' batch and seq axes symbolic; the ONNX matches torch."""

from __future__ import annotations

import numpy as np
import pytest

from harness.artifacts import ArtifactCache, OnnxFromTorch
from harness.data import make_feed
from harness.model import get_model


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("export-cache"))


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.fresh_export
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
@pytest.mark.parametrize("model", ["bert-mini", "deepseek-tiny"])
def test_text_model_exports_with_symbolic_batch_and_seq(model, exporter, cache):
    import onnx
    import onnxruntime as ort
    import torch

    spec = get_model(model)
    artifact = OnnxFromTorch(spec, cache, exporter)()
    graph = onnx.load(str(artifact.path), load_external_data=False).graph
    for gi in graph.input:
        dims = gi.type.tensor_type.shape.dim
        assert [d.dim_param for d in dims[:2]] == ["batch", "seq"], gi
        assert gi.type.tensor_type.elem_type == onnx.TensorProto.INT64
    out0 = graph.output[0].type.tensor_type.shape.dim
    assert out0[0].dim_param and out0[1].dim_param  # batch and seq stay symbolic on the outputs too
    session = ort.InferenceSession(str(artifact.path), providers=["CPUExecutionProvider"])
    module = spec.build()
    for dims in ({"batch": 1, "seq": 7}, {"batch": 3, "seq": 33}):  # neither is the export's example shape
        feed = make_feed(spec, dims, seed=1)
        got = session.run(list(spec.outputs), feed)
        with torch.no_grad():
            want = module(**{k: torch.from_numpy(v) for k, v in feed.items()})
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g, w.numpy(), atol=1e-4, rtol=1e-3)
