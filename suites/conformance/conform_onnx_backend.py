"""Operator conformance as plain pytest: one test per ONNX backend case x runtime x precision, each in a
supervised worker. Not a test_*.py file, so `harness run` leaves it out: run it by path (docs/conformance.md)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.conformance.cases import CaseFilter, collect, parse_opset
from harness.errors import UsageError
from harness.execution.conformance import ConformanceConfig, resolve_runtimes, run_case
from harness.execution.supervisor import IsolatedExecutor
from harness.gating.conformance import conformance_status
from harness.precision import Precision


def _items(text: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def _config(config: pytest.Config) -> ConformanceConfig:
    try:
        lo, hi = parse_opset(config.getoption("conform_opset"))
        precisions = tuple(Precision(p) for p in _items(config.getoption("conform_precisions")))
    except (UsageError, ValueError) as exc:
        raise pytest.UsageError(f"conformance options: {exc}") from None
    return ConformanceConfig(_items(config.getoption("conform_runtimes")), precisions or (Precision.FP32,),
                             CaseFilter(ops=_items(config.getoption("conform_ops")), opset_min=lo, opset_max=hi),
                             float(config.getoption("conform_case_timeout")))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conform_case" not in metafunc.fixturenames:
        return
    cfg = _config(metafunc.config)
    try:
        runtimes, _ = resolve_runtimes(cfg.runtimes, cfg.precisions)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    cases = collect(cfg.selected)
    params = [(case, rt, p) for rt in runtimes for p in cfg.precisions if p in rt.conformance_precisions
              for case in cases]
    metafunc.parametrize("conform_case", params, ids=[f"{c.name}-{rt.name}-{p}" for c, rt, p in params])


@pytest.fixture(scope="module")
def conform_executor() -> Any:
    executor = IsolatedExecutor()
    yield executor
    executor.close()


def test_conformance(conform_case: Any, conform_executor: IsolatedExecutor, request: pytest.FixtureRequest) -> None:
    case, runtime, precision = conform_case
    result = run_case(case, runtime, precision, conform_executor, _config(request.config))
    status = conformance_status(result)
    if status in ("unsupported", "skipped"):
        pytest.skip(f"{status}: {result.reason}")
    assert status == "passed", f"{case.op}: {status}: {result.reason}"
