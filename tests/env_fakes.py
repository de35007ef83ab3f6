"""Test runtime environments: harness-fakert, a package the tests publish as wheels, and its runtimes fakert-cpu (an
ONNX graph) and fakemod-cpu (the torch module)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import shared_exports

from harness.runtimes import register_runtime
from harness.runtimes.base import Availability
from harness.runtimes.onnxruntime import OrtCpu
from harness.runtimes.torch_eager import TorchEager


class _BehindFakert:
    """A runtime whose availability, version and every call go through the harness-fakert package."""

    module: ClassVar[str | None] = "harness_fakert"  # provided by harness-fakert, or by its build harness-fakert-gpu

    @classmethod
    def availability(cls) -> Availability:
        try:
            import harness_fakert  # noqa: F401
        except ImportError as exc:
            return Availability(False, f"harness-fakert is not importable: {exc}")
        return super().availability()  # type: ignore[misc]

    @classmethod
    def library_version(cls) -> str | None:
        import harness_fakert

        return str(harness_fakert.__version__)

    def _infer(self, prepared: Any) -> Any:
        import harness_fakert

        return harness_fakert.run(super()._infer, prepared)  # type: ignore[misc]


class FakeRt(_BehindFakert, OrtCpu):
    name: ClassVar[str] = "fakert-cpu"
    requirements: ClassVar[tuple[str, ...]] = ("harness-fakert",)
    distribution: ClassVar[str | None] = "harness-fakert"
    variant_hooks: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = "TEST ONLY: ONNX Runtime CPU behind the harness-fakert package"


register_runtime(FakeRt, replace=True)

CODE = '''__version__ = {version!r}
DELAY_S = {delay_s!r}
SHIFT = {shift!r}
CALLS = {calls!r}


def run(infer, prepared):
    import time

    for _ in range(CALLS - 1):  # this release's compute: the graph run CALLS times a call
        infer(prepared)
    out = infer(prepared)
    end = time.perf_counter() + DELAY_S
    while time.perf_counter() < end:  # a busy wait: this release's cost per call
        pass
    return {{k: v + SHIFT for k, v in out.items()}} if SHIFT else out
'''


def make_wheel(folder: Path, version: str, delay_s: float, shift: float = 0.0, dist: str = "harness-fakert",
               calls: int = 1) -> Path:
    """A wheel of `dist` (harness-fakert, or another build of it such as harness-fakert-gpu: the same module
    harness_fakert) at `version`, each call `delay_s` slower (a busy wait) and running the graph `calls` times
    (compute: contention slows it as it slows the graph)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        "harness_fakert/__init__.py": CODE.format(version=version, delay_s=delay_s, shift=shift, calls=calls),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: harness-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


class FakeModRt(_BehindFakert, TorchEager):
    """TEST ONLY: runs the model's torch module itself (as torch-cpu does), each call's cost behind harness-fakert:
    a runtime that runs the module, with a distribution of its own to pin (`fakemod-cpu@1.0.0`)."""

    name: ClassVar[str] = "fakemod-cpu"
    requirements: ClassVar[tuple[str, ...]] = ("harness-fakert",)
    distribution: ClassVar[str | None] = "harness-fakert"
    description: ClassVar[str] = "TEST ONLY: PyTorch eager behind the harness-fakert package"


register_runtime(FakeModRt, replace=True)


class FakeRtGpuBuild(FakeRt):
    """TEST ONLY: fakert-cpu installed as the build harness-fakert-gpu (the module harness_fakert under another
    distribution name, as onnxruntime-gpu provides onnxruntime): what the nightly gate must pin by the build."""

    name: ClassVar[str] = "fakertgpu-cpu"
    requirements: ClassVar[tuple[str, ...]] = ("harness-fakert-gpu",)
    description: ClassVar[str] = "TEST ONLY: ONNX Runtime CPU behind the harness-fakert-gpu build"


register_runtime(FakeRtGpuBuild, replace=True)

# a harness process a test started (HARNESS_PLUGINS=env_fakes): the session's torch.onnx exports shared with it
shared_exports.install()
