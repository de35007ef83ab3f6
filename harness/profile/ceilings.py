"""The machine's own ceilings: peak FLOP/s per precision and memory bandwidth, measured once per machine and
cached (the method: measure_ceilings' docstring and docs/method.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from harness.results.stats import median_ns  # the one median (in the values' own unit)

CEILINGS_KIND = "ceilings"
METHOD_VERSION = "ceilings/1"  # bump when a method changes: old entries stop matching
GEMM_N = 1024
REPS = 5
BUDGET_S = 1.5  # per measurement: fewer repetitions (at least MIN_REPS) once spent
MIN_REPS = 3
CONTENDED_PERCENT = 10.0  # other processes' share of the CPUs above which the figures carry a warning
TRIAD_MIN_BYTES = 64 << 20  # per array, at least; and at least 4x the last-level cache
NOT_MEASURED = {"bf16": "no BF16 GEMM kernel in numpy or ONNX Runtime's CPU execution provider is measured"}

Measurer = Callable[[int], dict[str, Any]]


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_key(threads: int) -> dict[str, Any]:
    """What the ceilings depend on: the CPU (model, logical cores, the environment's machine fingerprint), the
    thread count, numpy's and ONNX Runtime's versions, and the method's version."""
    import psutil

    from harness.results.environment import cpu_fingerprint, cpu_model

    return {"cpu_model": cpu_model(), "cpu_cores_logical": psutil.cpu_count(logical=True),
            "machine_fingerprint": cpu_fingerprint(), "threads": int(threads), "numpy": np.__version__,
            "onnxruntime": _version("onnxruntime") or _version("onnxruntime-gpu"), "method": METHOD_VERSION}


def machine_ceilings(threads: int, cache: Path | str | None = None, *, remeasure: bool = False,
                     measure: Measurer | None = None, key: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ceilings at `threads` threads: read from the harness cache (`cache`, default the harness's cache
    folder; kind "ceilings") when this machine's key is there, else measured (`measure`, default
    measure_ceilings: a few seconds) and stored. `remeasure=True` discards the stored entry and measures again.
    The result carries "cache": {"hit", "path"}."""
    import json

    from harness.artifacts.cache import ArtifactCache

    store = ArtifactCache(Path(cache) if cache is not None else None)
    key_parts = dict(key) if key is not None else machine_key(threads)
    label = f"cpu-t{threads}"
    if remeasure:
        store.discard(CEILINGS_KIND, label, key_parts)
    run = measure or measure_ceilings

    def build(path: Path) -> dict[str, Any]:
        result = {"key": key_parts, **run(threads)}
        path.write_text(json.dumps(result, indent=1, sort_keys=True))
        return {}

    art = store.get_or_build(CEILINGS_KIND, label, key_parts, "ceilings.json", build)
    result = json.loads(art.path.read_text())
    result["cache"] = {"hit": art.cache_hit, "path": str(art.path)}
    return result


# ------------------------------------------------------------------------------------------------ measuring
def measure_ceilings(threads: int) -> dict[str, Any]:
    """Measure now (no cache): {"threads", "measured_at", "compute": [entry...], "peak_gflops": {precision:
    best}, "bandwidth": entry, "bandwidth_gbs": best, "not_measured": {precision: why}}.

    Compute: a square GEMM of n x n matrices (2*n^3 FLOPs, a multiply-add counted as 2) through numpy (FP32, its
    BLAS at the run's thread count through threadpoolctl) and through ONNX Runtime's CPU MatMul with
    intra_op_num_threads = threads (FP32, FP16) and MatMulInteger (INT8: uint8 x int8 -> int32, 2*n^3 integer
    ops). Memory: a stream-triad-style a = b + s*c over float64 arrays each at least 4x the last-level cache,
    through numpy in `threads` Python threads over equal slices (numpy's ufuncs release the GIL); numpy does it in
    two passes (a = s*c, then a += b), so 5 arrays' bytes move per repetition and are counted. Each figure keeps
    its method, size, repetitions and the best and median over the repetitions; the ceiling used is the best.
    """
    from harness.measure.cpu import OthersCpu

    others = OthersCpu()
    compute = [_gemm_numpy(threads), _gemm_ort(threads, "fp32"), _gemm_ort(threads, "fp16"),
               _gemm_ort(threads, "int8")]
    peak: dict[str, float] = {}
    not_measured = dict(NOT_MEASURED)
    for e in compute:
        if e.get("best") is None:
            not_measured.setdefault(e["precision"], e["why"])
        else:
            peak[e["precision"]] = max(peak.get(e["precision"], 0.0), e["best"])
    for p in peak:
        not_measured.pop(p, None)
    triad = _triad(threads)
    busy = others.percent()
    result = {"threads": threads, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "compute": compute, "peak_gflops": peak, "bandwidth": triad, "bandwidth_gbs": triad["best"],
              "not_measured": not_measured, "others_cpu_percent": busy}
    if busy is not None and busy > CONTENDED_PERCENT:
        result["warning"] = (f"other processes used {busy:g}% of the CPUs while these were measured: the ceilings "
                             "are low; measure again on a quiet machine (harness ceilings --remeasure)")
    return result


def _timed(fn: Callable[[], Any], reps: int = REPS, budget_s: float = BUDGET_S) -> list[float]:
    """Seconds of each call of `fn` after one warm-up call: `reps` calls, fewer (at least MIN_REPS) once
    `budget_s` is spent."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < MIN_REPS or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _entry(name: str, precision: str, method: str, size: str, work: float, times: list[float],
           unit: str = "GFLOP/s") -> dict[str, Any]:
    rates = [work / t / 1e9 for t in times]
    return {"name": name, "precision": precision, "method": method, "size": size, "work_per_rep": work,
            "repetitions": len(times), "best": round(max(rates), 3), "median": round(median_ns(rates), 3),
            "unit": unit}


def _gemm_numpy(threads: int, n: int | None = None) -> dict[str, Any]:
    n = n or GEMM_N
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    method = f"numpy {np.__version__} matmul (its BLAS)"
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=threads, user_api="blas"):
            times = _timed(lambda: np.matmul(a, b, out=c))
        method += f", BLAS threads limited to {threads} (threadpoolctl)"
    except ImportError:
        times = _timed(lambda: np.matmul(a, b, out=c))
        method += ", BLAS threads as loaded (threadpoolctl not installed)"
    return _entry("gemm-numpy-fp32", "fp32", method, f"n={n}: ({n}x{n}) @ ({n}x{n}) float32", 2.0 * n ** 3,
                  times)


def _gemm_ort(threads: int, precision: str, n: int | None = None) -> dict[str, Any]:
    n = n or GEMM_N
    name = f"gemm-ort-{precision}"
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError as exc:
        return {"name": name, "precision": precision, "best": None, "why": f"onnxruntime not importable: {exc}"}
    rng = np.random.default_rng(0)
    if precision == "int8":
        op, a_type, b_type, y_type = "MatMulInteger", TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
        a = rng.integers(0, 255, (n, n), dtype=np.uint8)
        b = rng.integers(-127, 127, (n, n), dtype=np.int8)
        what = "MatMulInteger uint8 x int8 -> int32"
    else:
        dtype = np.float16 if precision == "fp16" else np.float32
        tp = TensorProto.FLOAT16 if precision == "fp16" else TensorProto.FLOAT
        op, a_type, b_type, y_type = "MatMul", tp, tp, tp
        a, b = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
        what = f"MatMul {np.dtype(dtype).name}"
        if precision == "fp16":  # where the CPU EP lacks an FP16 kernel, ORT computes in FP32 behind Casts
            what += " (as ONNX Runtime runs it: possibly FP32 math behind inserted Casts)"
    graph = helper.make_graph([helper.make_node(op, ["A", "B"], ["Y"])], "gemm",
                              [helper.make_tensor_value_info("A", a_type, [n, n]),
                               helper.make_tensor_value_info("B", b_type, [n, n])],
                              [helper.make_tensor_value_info("Y", y_type, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feed = {"A": a, "B": b}
        times = _timed(lambda: sess.run(None, feed))
    except Exception as exc:  # noqa: BLE001 - no CPU kernel for this type: a reason, not a crash
        return {"name": name, "precision": precision, "best": None,
                "why": f"ONNX Runtime {ort.__version__} CPU {what}: {type(exc).__name__}: {str(exc)[:200]}"}
    unit = "GOP/s" if precision == "int8" else "GFLOP/s"
    return _entry(name, precision, f"ONNX Runtime {ort.__version__} CPUExecutionProvider {what}, "
                  f"intra_op_num_threads={threads}, inputs fed each run", f"n={n}: ({n}x{n}) @ ({n}x{n})",
                  2.0 * n ** 3, times, unit)


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache of cpu0 (sysfs), or None."""
    best = None
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text.rstrip("KkMmGg")
        if digits.isdigit():
            size = int(digits) * mult
            best = max(best or 0, size)
    return best


def _triad(threads: int) -> dict[str, Any]:
    llc = last_level_cache_bytes()
    per_array = max(TRIAD_MIN_BYTES, 4 * (llc or 0))
    n = per_array // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)  # zeros/ones/full touch every page before timing
    s = 3.0
    parts = max(1, threads)
    bounds = [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]

    def chunk(lo: int, hi: int) -> None:
        np.multiply(c[lo:hi], s, out=a[lo:hi])
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    with ThreadPoolExecutor(max_workers=parts) as pool:
        def once() -> None:
            list(pool.map(lambda bd: chunk(*bd), bounds))

        times = _timed(once, reps=REPS + 2)
    moved = 5.0 * n * 8  # pass 1 reads c, writes a; pass 2 reads a and b, writes a
    llc_text = f"{llc / 2**20:g} MiB" if llc else "unknown"
    return _entry("triad-numpy", "fp64", f"numpy {np.__version__} a = s*c; a += b in {parts} thread(s) over "
                  "equal slices; 5 arrays' bytes counted per repetition (write-allocate not counted)",
                  f"3 float64 arrays of {n * 8 / 2**20:g} MiB each (last-level cache {llc_text})", moved, times,
                  "GB/s")


def ceilings_text(c: Mapping[str, Any]) -> str:
    """The ceilings as a few lines for a terminal."""
    lines = [f"machine: {c['key'].get('cpu_model')} ({c['key'].get('cpu_cores_logical')} cpus), threads="
             f"{c['threads']}, measured {c.get('measured_at')}"
             + (f" (cached: {c['cache']['path']})" if c.get("cache", {}).get("hit") else "")]
    for e in [*c["compute"], c["bandwidth"]]:
        if e.get("best") is None:
            lines.append(f"  {e['name']:<18} not measured: {e['why']}")
        else:
            lines.append(f"  {e['name']:<18} best {e['best']:>9.2f} {e['unit']:<7} median {e['median']:>9.2f}  "
                         f"({e['repetitions']} reps, {e['size']}; {e['method']})")
    for p, why in sorted(c.get("not_measured", {}).items()):
        lines.append(f"  {p}: not measured: {why}")
    if c.get("warning"):
        lines.append(f"  warning: {c['warning']}")
    return "\n".join(lines)

