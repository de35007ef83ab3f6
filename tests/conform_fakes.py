"""A fake runtime for the conformance tests: ONNX's reference evaluator, wrong on Abs, aborting on Neg, hanging
on Relu and refusing Sigmoid, by test name (the worker imports it by name: it lives beside the tests, on their path)."""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from harness.precision import Precision
from harness.runtimes.base import Runtime


class FakeConform(Runtime):
    name: ClassVar[str] = "fake-conform"
    conformance_precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32})

    def _activate(self) -> None:
        pass

    def _infer(self, prepared: Any) -> dict[str, Any]:
        return {}

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Any:
        import onnx
        from onnx.reference import ReferenceEvaluator

        proto = onnx.load_from_string(model)
        test = proto.graph.name  # ONNX names a case's graph after its test (test_relu, test_relu_expanded...)
        op = next((o for o in ("Abs", "Neg", "Relu", "Sigmoid") if test.startswith(f"test_{o.lower()}")), "")
        if op == "Sigmoid":
            raise NotImplementedError("Could not find an implementation for Sigmoid(13)")
        ref = ReferenceEvaluator(proto)

        def run(feeds: Any) -> list[Any]:
            if op == "Neg":
                os.abort()
            if op == "Relu":
                time.sleep(3600)
            out = ref.run(None, dict(feeds))
            return [o + 1 for o in out] if op == "Abs" else out
        return run


class FakeConformSlow(FakeConform):
    """FakeConform taking SLOW_S more per case (`harness conform --ray`'s killed node: its cases still running);
    $HARNESS_FAKE_CONFORM_SLOW_S sets it (a HARNESS_ variable travels from the driver to every node's shard)."""

    name: ClassVar[str] = "fake-conform-slow"
    SLOW_S: ClassVar[float] = float(os.environ.get("HARNESS_FAKE_CONFORM_SLOW_S") or 0.5)

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Any:
        run = super().onnx_runner(model, threads)

        def slow(feeds: Any) -> list[Any]:
            time.sleep(cls.SLOW_S)
            return run(feeds)
        return slow


def _register() -> None:
    """Registered on import: the worker imports this module through HARNESS_PLUGINS and finds it by name."""
    from harness.runtimes import register_runtime

    register_runtime(FakeConform, replace=True)
    register_runtime(FakeConformSlow, replace=True)


_register()
