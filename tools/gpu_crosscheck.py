"""Cross-check the harness's GPU figures against a bare loop (the instrument check of docs/hardware-runs.md).

For each case given, in one process and on the same GPU: the same torch module (CUDA events around each call)
and the same ONNX artifact in a plain onnxruntime session with its inputs on the device (IOBinding, host clock
around a synchronous run), with no harness code in the timed loop. Prints each bare p50 beside the harness's
p50 from RESULTS (host latency, and the CUDA-event device latency where the harness recorded one).

    python tools/gpu_crosscheck.py RESULTS.json resnet18:torch-cuda:fp32:8 resnet18:ort-cuda:fp32:8
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np


def _case(results: dict, model: str, runtime: str, precision: str, batch: int) -> dict:
    for c in results["cases"]:
        k = c["case"]
        if (k["model"], k["runtime"], k["precision"], k["batch"]) == (model, runtime, precision, batch):
            return c
    raise SystemExit(f"no case {model}/{runtime}/{precision}/b{batch} in the results")


def _dims(spec, batch: int, seq: int = 128) -> dict[str, int]:
    return {"batch": batch, "seq": seq} if spec.has_seq else {"batch": batch}


def _feed(spec, batch: int, seq: int = 128, seed: int = 0) -> dict[str, np.ndarray]:
    """The harness's own feed of the case (its default seed 0): the same inputs, so the same kernels."""
    from harness.data import make_feed

    return dict(make_feed(spec, _dims(spec, batch, seq), seed))


def bare_torch(spec, batch: int, precision: str, iters: int = 300, sampler: bool = False) -> float:
    import torch

    from harness.runtimes.torch_cuda import ieee_fp32

    ieee_fp32(torch)  # as the harness runs FP32: TF32 off
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    module = spec.build().eval().to("cuda")
    feed = {k: torch.from_numpy(v).to("cuda") for k, v in _feed(spec, batch).items()}
    if dtype != torch.float32:
        module = module.to(dtype)
        feed = {k: v.to(dtype) if v.is_floating_point() else v for k, v in feed.items()}
    times = []
    beside = None
    if sampler:  # the harness's memory sampler thread (NVML every 10 ms) running beside the loop
        from harness.measure.memory import MemorySampler

        beside = MemorySampler(gpu=True, torch_allocator=True).start()
    with torch.inference_mode():
        for _ in range(50):
            module(**feed)
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            module(**feed)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    if beside is not None:
        beside.stop()
    return statistics.median(times)


def bare_ort(artifact: str, spec, batch: int, iters: int = 300, provider: str = "CUDAExecutionProvider",
             device: str = "cuda") -> float:
    import onnxruntime as ort

    ort.preload_dlls()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    for dim, size in _dims(spec, batch).items():  # the harness fixes the case's free dimensions the same way
        so.add_free_dimension_override_by_name(dim, size)
    options = {"device_id": "0", "use_tf32": "0"} if device == "cuda" else {}
    sess = ort.InferenceSession(artifact, so, providers=[(provider, options)])
    assert sess.get_providers()[0] == provider, sess.get_providers()
    feed = _feed(spec, batch)
    names = {i.name: i for i in sess.get_inputs()}
    binding = sess.io_binding()
    for name, arr in feed.items():
        if name in names:
            want = np.float16 if "float16" in names[name].type else arr.dtype
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(arr.astype(want), device, 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, device, 0)
    for _ in range(50):
        sess.run_with_iobinding(binding)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        sess.run_with_iobinding(binding)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    from harness.model import get_model
    from harness.plugins import load_plugins

    load_plugins()  # the zoo registers itself through its entry point
    with open(argv[0]) as f:
        results = json.load(f)
    print(f"{'case':44s} {'bare p50 ms':>12s} {'harness host':>13s} {'harness device':>15s} {'host/bare':>10s}")
    for arg in argv[1:]:
        model, runtime, precision, batch = arg.split(":")
        case = _case(results, model, runtime, precision, int(batch))
        if case["status"] != "passed":
            print(f"{arg:44s} harness case {case['status']}: {case['reason'][:80]}")
            continue
        spec = get_model(model)
        try:
            if runtime.startswith("ort"):
                artifact = case["artifact"]["path"] if isinstance(case["artifact"], dict) else case["artifact"]
                bare = bare_ort(artifact, spec, int(batch))
            else:
                bare = bare_torch(spec, int(batch), precision)
                with_sampler = bare_torch(spec, int(batch), precision, sampler=True)
                print(f"{arg:44s} bare p50 {bare:.4f} ms; with the NVML sampler thread beside it "
                      f"{with_sampler:.4f} ms ({with_sampler / bare:.3f})")
        except Exception as exc:  # noqa: BLE001 - one row's failure is that row's line, the others still run
            print(f"{arg:44s} bare loop failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        host = case["latency"]["p50_ms"]
        device = (case.get("details") or {}).get("device_latency", {}).get("p50_ms")
        dev = f"{device:.4f}" if device else "-"
        print(f"{arg:44s} {bare:12.4f} {host:13.4f} {dev:>15s} {host / bare:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
