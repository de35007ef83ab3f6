"""Runtime registry: one line per runtime; nothing outside an adapter branches on a runtime's name."""

from __future__ import annotations

from collections.abc import Callable

from harness.errors import UsageError, did_you_mean
from harness.artifacts.options import RuntimeOptions
from harness.runtimes.base import Availability, Runtime

_RUNTIMES: dict[str, type[Runtime]] = {}
_RESOLVED: dict[str, type[Runtime]] = {}  # built by a resolver from a name (`NAME@VERSION`, ...): never listed
_RESOLVERS: list[Callable[[str, Callable[[str], type[Runtime]]], type[Runtime] | None]] = []


def register_runtime(cls: type[Runtime], *, replace: bool = False) -> type[Runtime]:
    """Register an adapter under `cls.name` (user packages: the `harness.runtimes` entry point)."""
    if cls.name in _RUNTIMES and not replace and _RUNTIMES[cls.name] is not cls:
        raise ValueError(f"a runtime named {cls.name!r} is already registered")
    _RUNTIMES[cls.name] = cls
    return cls


def register_resolver(resolver: Callable[[str, Callable[[str], type[Runtime]]], type[Runtime] | None]) -> None:
    """A resolver builds a runtime for a name no adapter registered (`resolver(name, get_runtime)`, None when it
    is not its name); what it builds is kept for later lookups but not listed. Self-test wrappers and version
    pins (`NAME@VERSION`) use it, so a worker process rebuilds
    them from their names."""
    _RESOLVERS.append(resolver)


def get_runtime(name: str) -> type[Runtime]:
    """A registered runtime; plugin runtimes count once harness.plugins.load_plugins() ran."""
    if name in _RESOLVED:
        return _RESOLVED[name]
    if name not in _RUNTIMES:
        for resolver in _RESOLVERS:
            built = resolver(name, get_runtime)
            if built is not None:
                _RESOLVED[name] = built
                return built
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise UsageError(f"unknown runtime {name!r}{did_you_mean(name, runtime_names())}; valid runtimes: "
                         f"{', '.join(runtime_names())}") from None


def runtime_names() -> list[str]:
    return list(_RUNTIMES)


# ------------------------------------------------------------------ built-in adapters, one line each
from harness.runtimes.torch_eager import TorchEager  # noqa: E402
from harness.runtimes.onnxruntime import OrtCpu  # noqa: E402
from harness.runtimes.openvino import OpenVinoCpu  # noqa: E402
from harness.runtimes.litert import LiteRtCpu  # noqa: E402
from harness.runtimes.tvm import TvmCpu  # noqa: E402
from harness.runtimes.torch_compile import TorchCompile, TorchCompileCuda  # noqa: E402
from harness.runtimes.torchscript import TorchScript  # noqa: E402
from harness.runtimes.torch_cuda import TorchCuda  # noqa: E402
from harness.runtimes.onnxruntime import OrtCann, OrtCuda, OrtCudaH2H, OrtOpenVino, OrtRocm, OrtTrt  # noqa: E402
from harness.runtimes.tensorrt import TensorRT  # noqa: E402
from harness.runtimes import pinned, selftest  # noqa: E402

register_runtime(TorchEager)
register_runtime(OrtCpu)
register_runtime(OpenVinoCpu)
register_runtime(LiteRtCpu)
register_runtime(TvmCpu)
register_runtime(TorchCompile)
register_runtime(TorchScript)
register_runtime(TorchCuda)
register_runtime(TorchCompileCuda)
register_runtime(OrtCuda)
register_runtime(OrtCudaH2H)
register_runtime(OrtTrt)
register_runtime(TensorRT)
register_runtime(OrtRocm)
register_runtime(OrtCann)
register_runtime(OrtOpenVino)
register_resolver(selftest.resolve)  # gate-check's slowed wrappers, `BASE+delayNNNns`
register_resolver(pinned.resolve)  # a version pin, `NAME@VERSION` (harness.envs)

__all__ = ["Availability", "Runtime", "RuntimeOptions", "get_runtime", "register_resolver", "register_runtime",
           "runtime_names"]
