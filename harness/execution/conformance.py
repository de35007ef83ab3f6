"""`harness conform`: ONNX backend cases x runtimes x precisions, each case in a supervised worker process."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.conformance.cases import PRECISION_TOLERANCES, SUITE, CaseFilter, ConformanceCase
from harness.errors import UsageError
from harness.execution.supervisor import IsolatedExecutor
from harness.precision import Precision
from harness.results.schema import MEASURED, CaseId, CaseResult, RunResults
from harness.results.store import write_results
from harness.runtimes import Runtime, get_runtime, runtime_names

TARGET = "harness.conformance.worker:run_case"
# conformance status -> the harness's case status (results schema): unsupported is a skip with the runtime's
# refusal as its reason, an exception at inference an error; crashed and timeout come from the supervisor
HARNESS_STATUS = {"passed": "passed", "failed": "failed", "unsupported": "skipped", "skipped": "skipped",
                  "error": "error", "crashed": "crashed", "timeout": "timeout", "oom": "oom"}


@dataclass
class ConformanceConfig:
    """What `harness conform` runs: runtimes (empty: every one that runs an ONNX model here), precisions,
    the case filter, the per-case time limit and threads."""

    runtimes: tuple[str, ...] = ()
    precisions: tuple[Precision, ...] = (Precision.FP32,)
    selected: CaseFilter = field(default_factory=CaseFilter)
    case_timeout_s: float = 60.0
    threads: int = 1
    case_memory_gb: float | None = None

    def filters(self) -> dict[str, Any]:
        s = self.selected
        return {"ops": list(s.ops), "k": list(s.keywords), "cases": list(s.names), "opset_min": s.opset_min,
                "opset_max": s.opset_max, "expanded": s.expanded, "light": s.light}


def resolve_runtimes(names: Sequence[str], precisions: Sequence[Precision]
                     ) -> tuple[list[type[Runtime]], dict[str, str]]:
    """(runtime classes to run, {name: why not}) for the names asked for; none asked: every registered runtime
    that runs an arbitrary ONNX model and is available here."""
    explicit = bool(names)
    out, left_out = [], {}
    for name in names or runtime_names():
        cls = get_runtime(name)
        if not cls.conformance_precisions:
            if explicit:
                raise UsageError(f"--runtimes {name}: it runs no arbitrary ONNX model (no conformance)")
            continue
        ok = cls.availability()
        if not ok:
            left_out[name] = ok.reason
            continue
        if not set(precisions) & set(cls.conformance_precisions):
            left_out[name] = f"runs none of {', '.join(map(str, precisions))} in conformance"
            continue
        out.append(cls)
    return out, left_out


def case_command(name: str, runtime: str, precision: Precision | str) -> str:
    """The command that re-runs one case (in the failures list of the report)."""
    return f"harness conform --runtimes {runtime} --precisions {precision} --case {name}"


def conformance_result(case: ConformanceCase, cid: CaseId, reply: dict[str, Any] | CaseResult) -> CaseResult:
    """A worker's reply (or the supervisor's crashed / timeout result) as the case's CaseResult; the
    conformance facts (status, operator, opset, errors, tolerance) under details["conformance"]."""
    info: dict[str, Any] = {"suite": SUITE, "op": case.op, "domain": case.domain, "opset": case.opset,
                            "kind": case.kind, "test": case.name,
                            "reproduce": case_command(case.name, cid.runtime, cid.precision)}
    if isinstance(reply, CaseResult):
        info.update(status=reply.status)
        reply.details = {**reply.details, "conformance": info}
        reply.model_fingerprint = case.fingerprint
        return reply
    status = str(reply.get("status", "error"))
    if status not in HARNESS_STATUS:
        status = "error"
    info.update({k: reply[k] for k in ("rtol", "atol", "max_abs", "max_rel", "load_s") if k in reply},
                status=status)
    harness_status = HARNESS_STATUS[status]
    measured = harness_status in MEASURED and reply.get("infer_ns")
    if harness_status in MEASURED and not measured:
        harness_status, info["status"] = "error", "error"
    return CaseResult(cid, harness_status, reason=str(reply.get("reason") or ""), phase=reply.get("phase"),
                      samples_ns=[int(reply["infer_ns"])] if measured else [], timing_scope="host_to_host",
                      model_fingerprint=case.fingerprint, details={"conformance": info},
                      accuracy={"max_abs": info.get("max_abs"), "max_rel": info.get("max_rel"),
                                "rtol": info.get("rtol"), "atol": info.get("atol")} if measured else None)


def run_case(case: ConformanceCase, runtime: type[Runtime], precision: Precision, executor: IsolatedExecutor,
             config: ConformanceConfig) -> CaseResult:
    """One case on one runtime at one precision in `executor`'s worker (started or replaced as needed): a
    crash or hang costs this case only; the next case gets a fresh worker."""
    cid = CaseId(case.name, runtime.name, precision, 1, None, runtime.device)
    rtol, atol = case.tolerance(precision)
    payload = {"runtime": runtime, "precision": str(precision), "model": case.model, "inputs": case.inputs,
               "expected": case.expected, "rtol": rtol, "atol": atol, "threads": config.threads}
    limits = SimpleNamespace(case_timeout_s=config.case_timeout_s, case_memory_gb=config.case_memory_gb)
    return conformance_result(case, cid, executor.call(TARGET, payload, cid, limits))


def run_conformance(cases: Sequence[ConformanceCase], config: ConformanceConfig, out_dir: Path | None = None,
                    on_result: Callable[[CaseResult], None] | None = None,
                    runtimes: Sequence[type[Runtime]] | None = None) -> RunResults:
    """Run every case on every runtime at every precision it runs; results.json written atomically as the run
    goes (every 200 cases) and at its end. `runtimes`: classes to use instead of resolving config.runtimes."""
    import onnx

    from harness import __version__
    from harness.results.environment import snapshot

    left_out: dict[str, str] = {}
    if runtimes is None:
        runtimes, left_out = resolve_runtimes(config.runtimes, config.precisions)
    started = _dt.datetime.now(_dt.timezone.utc)
    run = RunResults(run_id="conform-" + started.strftime("%Y%m%d-%H%M%S"), started_at=started.isoformat(),
                     environment=snapshot(config.threads, quiet_check_s=0.0), harness_version=__version__,
                     config={"kind": "conformance", "suite": SUITE, "onnx": onnx.__version__,
                             "onnx_opset": onnx.defs.onnx_opset_version(), "filters": config.filters(),
                             "precisions": [str(p) for p in config.precisions], "threads": config.threads,
                             "case_timeout_s": config.case_timeout_s, "cases_selected": len(cases),
                             "tolerances": {str(p): {"rtol_at_least": t[0], "atol_at_least": t[1]}
                                            for p, t in PRECISION_TOLERANCES.items()},
                             "runtimes": {cls.name: {"device": cls.device, "version": cls.library_version(),
                                                     "precisions": sorted(str(p) for p in cls.conformance_precisions
                                                                          if p in config.precisions)}
                                          for cls in runtimes},
                             "runtimes_left_out": left_out, "wall_s": {}})
    try:
        for cls in runtimes:
            executor = IsolatedExecutor()
            try:
                for precision in config.precisions:
                    if precision not in cls.conformance_precisions:
                        continue
                    t0 = time.perf_counter()
                    for case in cases:
                        result = run_case(case, cls, precision, executor, config)
                        run.cases.append(result)
                        if on_result is not None:
                            on_result(result)
                        if out_dir is not None and len(run.cases) % 200 == 0:
                            write_results(run, out_dir)
                    run.config["wall_s"][f"{cls.name}/{precision}"] = round(time.perf_counter() - t0, 2)
            finally:
                executor.close()
    except KeyboardInterrupt:
        run.interrupted = True
    run.finished_at = _dt.datetime.now(_dt.timezone.utc).isoformat()
    run.complete = not run.interrupted
    if out_dir is not None and run.cases:
        write_results(run, out_dir)
    return run

