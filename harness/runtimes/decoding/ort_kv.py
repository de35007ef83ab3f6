"""OrtDecoder: a causal LM exported with past/present key-value tensors, stepped through ORT IO binding."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError, UnsupportedModelError
from harness.runtimes.decoding.hf import cache_layout, causal_lm
from harness.model import ModelSpec
from harness.precision import Precision

# Example sizes while tracing: not 0 or 1, which the exporter would specialise into constants.
_EXAMPLE = {"batch": 2, "seq": 5, "past": 3}


def io_names(layers: int) -> tuple[list[str], list[str], list[str]]:
    """(past input names, present output names, all input names) of the exported decoder."""
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, present, ["input_ids", "attention_mask", *past]


def kv_decoder_onnx(spec: ModelSpec, cache: ArtifactCache) -> Artifact:
    """The cached ONNX decoder of `spec`'s causal LM: inputs input_ids [batch, seq], attention_mask [batch,
    past + seq] and past key/values [batch, kv_heads, past, head_dim] per layer; outputs the last position's
    logits [batch, vocab] and the present key/values [batch, kv_heads, past + seq, head_dim]. One graph serves
    prefill (past length 0) and decode (seq 1).

    Exported with torch.onnx's TorchScript exporter over a wrapper that rebuilds a DynamicCache from the flat
    tensors: it traces the model's own attention and cache update once with symbolic axes, and an empty past
    runs through the same graph; optimum-onnx would pin its own transformers/torch range."""
    import onnx
    import torch


    key = {"model_fingerprint": spec.fingerprint(), "torch": torch.__version__, "onnx": onnx.__version__,
           "opset": 17, "step": "KvDecoderOnnx/1"}

    def build(path: Path) -> dict[str, Any]:
        from transformers import DynamicCache

        lm = causal_lm(spec)
        layers, kv_heads, head_dim = cache_layout(lm)
        past_names, present_names, input_names = io_names(layers)

        class Flat(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lm = lm

            def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> tuple[Any, ...]:
                kv = DynamicCache()
                for i in range(layers):
                    kv.update(past[2 * i], past[2 * i + 1], i)
                out = self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=kv,
                              use_cache=True, logits_to_keep=1)
                present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
                return (out.logits[:, -1, :], *present)

        b, s, p = _EXAMPLE["batch"], _EXAMPLE["seq"], _EXAMPLE["past"]
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones(b, p + s, dtype=torch.int64)
        past = [torch.randn(b, kv_heads, p, head_dim) for _ in past_names]
        axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"},
                                           "attention_mask": {0: "batch", 1: "total"}, "logits": {0: "batch"}}
        axes.update({n: {0: "batch", 2: "past"} for n in past_names})
        axes.update({n: {0: "batch", 2: "total"} for n in present_names})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(Flat().eval(), (ids, mask, *past), str(path), input_names=input_names,
                                  output_names=["logits", *present_names], dynamic_axes=axes, opset_version=17,
                                  dynamo=False, do_constant_folding=True)
        except Exception as exc:  # noqa: BLE001 - every exporter failure is one clear error
            raise ModelError(f"model {spec.name!r}: ONNX export of the KV-cache decoder failed: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        onnx.checker.check_model(str(path))
        return {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "exporter": "legacy",
                "inputs": input_names, "outputs": ["logits", *present_names]}

    return cache.get_or_build("onnx", f"{spec.name}-kv-decoder", key, "decoder.onnx", build)


class OrtDecoder:
    """ONNX Runtime over the KV decoder, fed through IO binding.

    Each call binds the previous call's present OrtValues as this call's past inputs, on `io_device`: the
    harness never copies the cache (no numpy round trip, no host<->device transfer on a GPU EP). What is
    copied: the graph's Concat writes past + new into a freshly allocated present each step (ORT's standard
    ops have no in-place cache; the contrib GroupQueryAttention with a shared buffer would avoid it), the
    token ids and attention mask go in (tiny), and the last position's logits come to the host for argmax.
    """

    def __init__(self, spec: ModelSpec, precision: Precision, cache: ArtifactCache, threads: int,
                 providers: list[Any], io_device: str = "cpu", device_id: int = 0) -> None:
        import onnxruntime as ort

        art = fp32 = kv_decoder_onnx(spec, cache)
        self.recipe = "fp32"
        if precision is Precision.INT8:
            from harness.artifacts.int8 import Int8OnnxFromOnnx

            art = Int8OnnxFromOnnx(art, cache, f"{spec.name}-kv-decoder", "dynamic")()
            self.recipe = str(art.meta.get("recipe") or "int8")
        elif precision is Precision.FP16 and io_device == "cpu":
            raise UnsupportedModelError(
                "fp16 generation on the CPU EP is not measured: ONNX Runtime has few FP16 CPU kernels (an FP16 "
                "graph runs through Casts to FP32, slower than FP32), and onnxconverter-common's FP16 conversion "
                "of the KV decoder (keep_io_types) fails ORT's type check on a Cast of the RMSNorm; int8 "
                "(dynamic) is the reduced precision measured here")
        elif precision is Precision.FP16:
            from harness.artifacts.fp16 import Fp16OnnxFromOnnx

            art = Fp16OnnxFromOnnx(art, cache, f"{spec.name}-kv-decoder")()
            self.recipe = str(art.meta.get("recipe") or "fp16")
        elif precision is not Precision.FP32:
            raise UnsupportedModelError(f"ONNX generation does not run {precision}")
        self.artifact = art
        meta = fp32.meta
        self._layers, self._kv_heads, self._head_dim = int(meta["layers"]), int(meta["kv_heads"]), int(meta["head_dim"])
        self._past_names, self._present_names, _ = io_names(self._layers)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self._ort = ort
        self._session = ort.InferenceSession(str(art.path), so, providers=providers)
        wanted = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
        if self._session.get_providers()[0] != wanted:
            raise RuntimeError(f"{wanted} not available: the session fell back to {self._session.get_providers()}")
        self._device, self._device_id = io_device, device_id
        self.kv_bytes_per_token = 2 * self._layers * self._kv_heads * self._head_dim * 4  # FP32 I/O at every precision
        self._past: list[Any] = []
        self._total = 0
        self._batch = 0

    def _value(self, array: np.ndarray) -> Any:
        return self._ort.OrtValue.ortvalue_from_numpy(array, self._device, self._device_id)

    def _run(self, ids: np.ndarray) -> np.ndarray:
        binding = self._session.io_binding()
        binding.bind_ortvalue_input("input_ids", self._value(ids))
        binding.bind_ortvalue_input("attention_mask", self._value(np.ones((self._batch, self._total), np.int64)))
        for name, value in zip(self._past_names, self._past):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output("logits", "cpu")
        for name in self._present_names:  # allocated by ORT on the device; bound as the next past as is
            binding.bind_output(name, self._device, self._device_id)
        self._session.run_with_iobinding(binding)
        outs = binding.get_outputs()
        self._past = list(outs[1:])
        return outs[0].numpy()

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        self._batch, self._total = int(prompt.shape[0]), int(prompt.shape[1])
        empty = np.zeros((self._batch, self._kv_heads, 0, self._head_dim), np.float32)
        self._past = [self._value(empty) for _ in self._past_names]
        return self._run(np.ascontiguousarray(prompt, dtype=np.int64))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        self._total += 1
        return self._run(np.ascontiguousarray(tokens, dtype=np.int64).reshape(-1, 1))

    def details(self) -> dict[str, Any]:
        return {"onnxruntime": self._ort.__version__, "providers": self._session.get_providers(),
                "artifact": str(self.artifact.path), "artifact_cache_hit": self.artifact.cache_hit,
                "kv_cache": f"IO binding on {self._device}: present outputs bound as the next past inputs"}

    def close(self) -> None:
        self._session = None
        self._past = []
