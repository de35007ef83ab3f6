"""The real decoders on a tiny Llama: torch's DynamicCache loop and the ORT KV-cache export stepped through
IO binding generate the same greedy tokens; the export takes an empty past at prefill."""

from __future__ import annotations

import numpy as np
import pytest

from harness.artifacts.cache import ArtifactCache
from harness.workloads.generate.loop import greedy_generate
from harness.runtimes.decoding.ort_kv import OrtDecoder, io_names, kv_decoder_onnx
from harness.runtimes.decoding.torch_kv import TorchDecoder
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec
from harness.precision import Precision

pytest.importorskip("transformers")


def _tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      attn_implementation="eager")
    lm = LlamaForCausalLM(cfg)
    with torch.no_grad():  # a wider spread of logits than the default init: clear argmax margins
        lm.lm_head.weight.mul_(50.0)
    return lm.eval()


SPEC = ModelSpec(name="tiny-llama-gen-test", build=_tiny_llama, inputs=(TensorSpec("input_ids", (BATCH, SEQ),
                 "int64", 0, 300),), outputs=("logits",), task="lm")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def test_ort_kv_decoder_generates_the_torch_tokens(cache):
    prompt = np.random.default_rng(0).integers(0, 300, (2, 7), dtype=np.int64)
    ref = greedy_generate(TorchDecoder(SPEC, Precision.FP32, 1), prompt, 10, keep_logits=True)
    ort = OrtDecoder(SPEC, Precision.FP32, cache, 1, providers=["CPUExecutionProvider"])
    got = greedy_generate(ort, prompt, 10, keep_logits=True)
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_allclose(got.first_logits, ref.first_logits, atol=1e-4)
    assert ort.kv_bytes_per_token == 2 * 2 * 2 * 8 * 4  # layers x (k, v) x kv heads x head dim x fp32
    again = greedy_generate(ort, prompt, 10)  # prefill resets the cache: the same tokens again
    np.testing.assert_array_equal(again.tokens, ref.tokens)


def test_export_has_the_cache_as_inputs_and_outputs_with_symbolic_lengths(cache):
    import onnx

    art = kv_decoder_onnx(SPEC, cache)
    g = onnx.load(str(art.path), load_external_data=False).graph
    past, present, inputs = io_names(2)
    assert [i.name for i in g.input] == inputs and [o.name for o in g.output] == ["logits", *present]
    dims = [d.dim_param or d.dim_value for d in g.input[2].type.tensor_type.shape.dim]
    assert dims == ["batch", 2, "past", 8]


def test_int8_decoder_runs_dynamic_quantisation(cache):
    dec = OrtDecoder(SPEC, Precision.INT8, cache, 1, providers=["CPUExecutionProvider"])
    assert "MatMulInteger" in dec.recipe
    out = greedy_generate(dec, np.zeros((1, 4), np.int64), 3)
    assert out.tokens.shape == (1, 3)


def test_fp16_on_the_cpu_ep_is_a_skip_with_the_reason(cache):
    from harness.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="fp16 generation on the CPU EP is not measured"):
        OrtDecoder(SPEC, Precision.FP16, cache, 1, providers=["CPUExecutionProvider"])
