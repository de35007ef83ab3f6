"""tvm-cpu: Apache TVM, the ONNX export imported by Relax, compiled per static shape for the host CPU, on its VM."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.artifacts import onnx_fp32
from harness.errors import install_hint
from harness.model import ModelSpec
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime

INSTALL = install_hint("tvm") + " (apache-tvm; not in the same environment as the litert extra)"


class TvmCpu(Runtime):
    """relax.frontend.onnx.from_onnx -> tvm.compile(llvm, host mcpu) -> relax.VirtualMachine on tvm.cpu().

    One compiled library per static input shape, cached as an artifact (TvmFromOnnx). Untuned by default: the
    default Relax pipeline applies no schedules, so the figures show TVM's floor. The `tune=N` variant (hook
    "tvm-tuning") builds TvmTunedFromOnnx instead: MetaSchedule with N trials, in a child process whose crash
    is a skip with its cause (docs/runtimes.md).
    """

    reactivate_between_repeats: ClassVar[bool] = False  # activation is a compile/build: keep it
    module: ClassVar[str | None] = "tvm"
    name: ClassVar[str] = "tvm-cpu"
    # the extra `tvm` (pyproject.toml says why apache-tvm-ffi is capped)
    requirements: ClassVar[tuple[str, ...]] = ("apache-tvm>=0.20", "apache-tvm-ffi<0.1.15", "xgboost-cpu>=2.1")
    install: ClassVar[str] = INSTALL
    distribution: ClassVar[str | None] = "apache-tvm"
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph", "tvm-tuning"})
    description: ClassVar[str] = "Apache TVM Relax, llvm -mcpu=host, relax.VirtualMachine"
    # checked on apache-tvm 0.27: relax.VirtualMachine takes no profile= argument and has no profile(); no runtime
    # profiling function is registered (the debug executor belonged to Relay's graph executor, removed)
    cannot_profile: ClassVar[str] = ("apache-tvm's Relax VirtualMachine has no per-op profiler in this release (no "
                                     "profile mode, no profiling functions registered), and the Relax ONNX frontend "
                                     "keeps no ONNX node names on what it fuses")


    @classmethod
    def _supports_model(cls, model: ModelSpec) -> Availability:
        return Availability(True)  # anything with an ONNX form; an op TVM lacks is an error row naming it

    conformance_precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32})

    @classmethod
    def library_version(cls) -> str | None:
        import tvm

        return str(tvm.__version__)

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Any:
        """Relax ONNX frontend (the graph's own input shapes and types) -> tvm.compile(llvm, host mcpu) ->
        relax.VirtualMachine, all in memory (no artifact: one-node models are compiled once and dropped). An
        import or compile that raises is TVM refusing the model (unsupported, with TVM's message)."""
        os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before the pool starts
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        config = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if config is not None:
            config(1, threads)
        proto = onnx.load_from_string(model)
        weights = {t.name for t in proto.graph.initializer}
        names = [i.name for i in proto.graph.input if i.name not in weights]
        mod = from_onnx(proto, keep_params_in_input=False)
        target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()})
        device = tvm.cpu(0)
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), device)
        main = vm["main"]

        def run(feeds: Mapping[str, Any]) -> list[Any]:
            out = main(*[tvm.runtime.tensor(np.asarray(feeds[n], order="C"), device) for n in names])  # keeps 0-d
            return [_to_host(out)] if hasattr(out, "numpy") else [_to_host(o) for o in out]
        return run

    def _activate(self) -> None:
        os.environ.setdefault("TVM_NUM_THREADS", str(self.options.threads))  # before the pool starts
        import tvm

        self._tvm = tvm
        config = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if config is not None:
            config(1, self.options.threads)  # kBig affinity mode with the run's thread count
        self._onnx = onnx_fp32(self.model, self.options)
        self._target: dict[str, Any] = {"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()}
        self._device = tvm.cpu(0)
        self._vm: Any = None

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        from tvm import relax

        from harness.artifacts.tvm_from_onnx import TvmFromOnnx

        names = [t.name for t in self.model.inputs]
        shapes = {n: tuple(feed[n].shape) for n in names}
        dtypes = {n: str(feed[n].dtype) for n in names}
        self._vm = None
        if self.options.tuning_trials > 0:
            from harness.artifacts.tvm_tune import TvmTunedFromOnnx

            self._target = {**self._target, "num-cores": self.options.threads}  # the schedules depend on it
            self.artifact = TvmTunedFromOnnx(
                self._onnx, self.options.cache, shapes=shapes, dtypes=dtypes, target=self._target,
                trials=self.options.tuning_trials, tvm_version=str(self._tvm.__version__), label=self.model.name)()
        else:
            self.artifact = TvmFromOnnx(self._onnx, self.options.cache, shapes=shapes, dtypes=dtypes,
                                        target=self._target, label=self.model.name)()
        lib = self._tvm.runtime.load_module(str(self.artifact.path))
        self._vm = relax.VirtualMachine(lib, self._device)
        self._main = self._vm["main"]

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> list[Any]:
        return [self._tvm.runtime.tensor(np.ascontiguousarray(feed[t.name]), self._device)
                for t in self.model.inputs]

    def _infer(self, prepared: list[Any]) -> Mapping[str, Any]:
        out = self._main(*prepared)
        if not isinstance(out, (list, tuple)) and not hasattr(out, "numpy"):
            out = list(out)  # a TVM Array of tensors
        if hasattr(out, "numpy"):
            return {self.model.outputs[0]: out}
        return dict(zip(self.model.outputs, out))

    def _to_numpy(self, value: Any) -> np.ndarray:
        return value.numpy()

    def _deactivate(self) -> None:
        self._vm = self._main = None

    def caveat(self) -> str | None:
        if self.options.tuning_trials > 0:
            return None
        return "untuned: TVM's default Relax pipeline applies no schedule; tune with --variants tune=N"

    def details(self) -> dict[str, Any]:
        out = {**super().details(), "target": getattr(self, "_target", None),
               "tuning": "metaschedule" if self.options.tuning_trials > 0 else "untuned"}
        if self.options.tuning_trials > 0:
            meta = self.artifact.meta if self.artifact is not None else {}
            # the build's own record (on a cache hit too): the budget, what MetaSchedule measured, its time
            out.update({"tuning_trials": self.options.tuning_trials, "tuning_trials_run": meta.get("tuning_trials_run"),
                        "tuning_tasks": meta.get("tuning_tasks"), "tuning_s": meta.get("tuning_s")})
        if hasattr(self, "_tvm"):
            out["tvm"] = self._tvm.__version__
        return out


def _to_host(value: Any) -> Any:
    """A VM result as numpy: a tensor's array, a tuple's (a sequence output) a list of them, a shape a tuple."""
    if hasattr(value, "numpy"):
        return value.numpy()
    if isinstance(value, (int, float, bool, np.generic)):
        return np.asarray(value)
    return [_to_host(v) for v in value]
