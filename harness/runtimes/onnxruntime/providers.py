"""Accelerator execution providers: availability by a one-node probe session (onnxruntime-gpu lists providers whose
libraries are absent and falls back to CPU), and the EPs that need no more (ROCm, CANN, OpenVINO)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from harness.runtimes.base import Availability
from harness.runtimes.onnxruntime.session import OnnxRuntime

# ---------------------------------------------------------------------------------------------------------
# Accelerator execution providers. onnxruntime-gpu lists CUDA/TensorRT even where their libraries are absent
# and silently falls back to CPU, so availability creates a one-node session once per process and reports
# what the session said (the library it could not load).




_PROBES: dict[tuple[str, str], Availability] = {}
_PRELOADED = False
_MISSING_LIB = re.compile(r"([\w.+-]+\.so(?:\.[\w]+)*): cannot open shared object file")
_REQUIRES = re.compile(r"Require (cuDNN \d+(?:\.(?:\d+|\*))* and CUDA \d+(?:\.(?:\d+|\*))*)")


def _probe_model_bytes() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "harness-probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@contextlib.contextmanager
def _captured_output() -> Iterator[list[str]]:
    """Capture what native code and Python print on fds 1 and 2 (onnxruntime logs fallbacks there)."""
    out: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def fallback_reason(provider: str, log: str, active: list[str], ort_version: str) -> str:
    """Why a session asked for `provider` ran on `active` instead, from onnxruntime's log."""
    reason = f"{provider} not available: onnxruntime {ort_version} lists it, but a session with it falls " \
             f"back to {', '.join(active) or 'nothing'}"
    missing = list(dict.fromkeys(_MISSING_LIB.findall(log)))
    if missing:
        reason += f": cannot load {', '.join(missing)}"
    requires = _REQUIRES.search(log)
    if requires:
        reason += f" (the provider requires {requires.group(1)})"
    elif "TensorRT libraries" in log and not missing:
        reason += ": TensorRT libraries not found"
    return reason


def preload_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries of pip's nvidia-* packages before a CUDA or TensorRT session.

    onnxruntime-gpu finds libcublasLt/libcudnn only on the loader's path or where an imported torch loaded them;
    `onnxruntime.preload_dlls()` (1.21+) loads them from the nvidia site packages, which is where a pip-installed
    CUDA stack lives. Once per process; what it prints goes to the caller's capture."""
    global _PRELOADED
    if _PRELOADED:
        return
    _PRELOADED = True
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        with contextlib.suppress(Exception):  # a missing library is the session's reason to give, not ours
            preload()


def probe_provider(provider: str, options: Mapping[str, Any] | None = None) -> Availability:
    """Available only if a session created with `provider` keeps it (cached per process)."""
    key = (provider, repr(sorted((options or {}).items())))
    if key in _PROBES:
        return _PROBES[key]
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    active: list[str] = []
    error = ""
    with _captured_output() as log:
        preload_cuda_libraries()
        try:
            providers = [(provider, dict(options or {}))]
            session = ort.InferenceSession(_probe_model_bytes(), so, providers=providers)
            active = session.get_providers()
        except Exception as exc:  # noqa: BLE001 - a refusal is a reason, never a crash
            error = f"{type(exc).__name__}: {exc}"
    text = "".join(log)
    if active and active[0] == provider:
        verdict = Availability(True)
    elif error:
        first = error.splitlines()[0]
        verdict = Availability(False, f"{provider} not available: session creation failed: {first}")
    else:
        verdict = Availability(False, fallback_reason(provider, text, active, ort.__version__))
    _PROBES[key] = verdict
    return verdict


class OrtAccelerator(OnnxRuntime):
    """An ONNX Runtime execution provider other than CPU: in the build, and a probe session keeps it."""

    install_hint: ClassVar[str] = ""
    decodes: ClassVar[bool] = False  # the generation workload is wired for CPU and CUDA devices only

    @classmethod
    def availability(cls) -> Availability:
        verdict = super().availability()
        if not verdict:
            hint = f"; {cls.install_hint}" if cls.install_hint else ""
            return Availability(False, verdict.reason + hint)
        return probe_provider(cls.provider)



class OrtRocm(OrtAccelerator):
    name: ClassVar[str] = "ort-rocm"
    provider: ClassVar[str] = "ROCMExecutionProvider"
    device: ClassVar[str] = "rocm"
    description: ClassVar[str] = "ONNX Runtime, ROCMExecutionProvider (AMD GPUs)"
    install_hint: ClassVar[str] = "it needs an onnxruntime build with ROCm (AMD's onnxruntime-rocm wheels)"


class OrtCann(OrtAccelerator):
    name: ClassVar[str] = "ort-cann"
    provider: ClassVar[str] = "CANNExecutionProvider"
    device: ClassVar[str] = "npu"
    description: ClassVar[str] = "ONNX Runtime, CANNExecutionProvider (Huawei Ascend NPUs)"
    install_hint: ClassVar[str] = "it needs the onnxruntime-cann build and Huawei's CANN toolkit"


class OrtOpenVino(OrtAccelerator):
    name: ClassVar[str] = "ort-openvino"
    # onnxruntime-openvino provides the onnxruntime module too: it cannot sit beside the harness's onnxruntime-gpu
    requirements: ClassVar[tuple[str, ...]] = ("onnxruntime-openvino>=1.17",)
    distribution: ClassVar[str | None] = "onnxruntime-openvino"
    own_environment: ClassVar[bool] = True
    provider: ClassVar[str] = "OpenVINOExecutionProvider"
    device: ClassVar[str] = "cpu"  # the EP's default device_type is CPU
    description: ClassVar[str] = "ONNX Runtime, OpenVINOExecutionProvider (device_type CPU)"
    install_hint: ClassVar[str] = ("it needs the onnxruntime-openvino build (`pip install onnxruntime-openvino` "
                                   "in an environment without onnxruntime-gpu: both provide the onnxruntime "
                                   "module)")
