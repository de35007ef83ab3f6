"""The conformance workload: ONNX backend cases x runtimes x precisions, each case run in the supervised worker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.measure.timer import Timer
from harness.precision import Precision
from harness.results.schema import MEASURED, CaseId, CaseResult, RunResults
from harness.runtimes import Runtime, get_runtime, runtime_names
from harness.workloads.base import PhaseCallback, WorkerState, Workload
from harness.workloads.conform.cases import PRECISION_TOLERANCES, SUITE, ConformanceCase, case_by_name, collect

# conformance status -> the harness's case status (results schema): unsupported is a skip with the runtime's
# refusal as its reason, an exception at inference an error; conversion (the harness's own FP16 conversion
# failed) an error of the harness; nondeterministic (a random expected output) a skip; crashed and timeout come
# from the supervisor
HARNESS_STATUS = {"passed": "passed", "failed": "failed", "unsupported": "skipped", "skipped": "skipped",
                  "error": "error", "conversion": "error", "nondeterministic": "skipped", "crashed": "crashed",
                  "timeout": "timeout", "oom": "oom"}


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


def case_info(case: ConformanceCase, cid: CaseId) -> dict[str, Any]:
    return {"suite": SUITE, "op": case.op, "domain": case.domain, "opset": case.opset, "kind": case.kind,
            "test": case.name, "reproduce": case_command(case.name, cid.runtime, cid.precision)}


def conformance_result(info: dict[str, Any], fingerprint: str, cid: CaseId, reply: dict[str, Any] | CaseResult
                       ) -> CaseResult:
    """A worker's reply (or the supervisor's crashed / timeout result) as the case's CaseResult; the
    conformance facts (`info`: operator, opset, ... and then status, errors, tolerance) under
    details["conformance"]."""
    info = dict(info)
    if isinstance(reply, CaseResult):
        info.update(status=reply.status)
        reply.details = {**reply.details, "conformance": info}
        reply.model_fingerprint = fingerprint
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
                      model_fingerprint=fingerprint, details={"conformance": info},
                      accuracy={"max_abs": info.get("max_abs"), "max_rel": info.get("max_rel"),
                                "rtol": info.get("rtol"), "atol": info.get("atol")} if measured else None)


class ConformWorkload(Workload):
    """ONNX's backend test cases (node cases and light models of the installed onnx) on every runtime that runs
    an arbitrary ONNX model (Runtime.onnx_runner), at fp32 and the harness's fp16 conversion. A case's identity
    is CaseId(test name, runtime, precision, batch 1); its model, feeds and expected outputs travel to the
    worker as the case's payload."""

    name = "conform"
    title = "operator conformance"
    option_groups = ("conformance",)
    # one thread and 60 s per case, in `harness conform` and `harness run --workload conform` alike: an operator
    # case is small, and a hang is found in a minute
    option_defaults = MappingProxyType({"threads": "1", "case_timeout": "60"})

    def default_models(self, quick: bool) -> tuple[str, ...]:
        return ()  # the cases are ONNX's backend tests, not models

    def default_runtimes(self, quick: bool) -> tuple[str, ...]:
        return ()  # every runtime that runs an ONNX model here (resolve_runtimes)

    def cases(self, config: RunConfig) -> list[CaseId]:
        precisions = config.matrix.precisions
        runtimes, _ = resolve_runtimes(config.matrix.runtimes, precisions)
        selected = collect(config.conformance)
        return [CaseId(c.name, rt.name, p, 1, None, rt.device)
                for rt in runtimes for p in precisions if p in rt.conformance_precisions for c in selected]

    def payload(self, case: CaseId, config: RunConfig) -> dict[str, Any]:
        c = case_by_name(case.model)
        rtol, atol = c.tolerance(case.precision)
        return {"model": c.model, "inputs": c.inputs, "expected": c.expected, "rtol": rtol, "atol": atol,
                "random": c.random, "info": case_info(c, case), "fingerprint": c.fingerprint}

    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        return ConformState()

    def annotate(self, case: CaseId, result: CaseResult) -> CaseResult:
        if "conformance" in result.details:
            return result
        c = case_by_name(case.model)  # crashed, timeout, oom: the supervisor's row
        return conformance_result(case_info(c, case), c.fingerprint, case, result)

    def run_record(self, config: RunConfig) -> dict[str, Any]:
        import onnx

        precisions = config.matrix.precisions
        runtimes, left_out = resolve_runtimes(config.matrix.runtimes, precisions)
        return {"kind": "conformance", "suite": SUITE, "onnx": onnx.__version__,
                "onnx_opset": onnx.defs.onnx_opset_version(), "filters": config.conformance.filters(),
                "cases_selected": len(collect(config.conformance)),
                "tolerances": {str(p): {"rtol_at_least": t[0], "atol_at_least": t[1]}
                               for p, t in PRECISION_TOLERANCES.items()},
                "runtimes": {cls.name: {"device": cls.device, "version": cls.library_version(),
                                        "precisions": sorted(str(p) for p in cls.conformance_precisions
                                                             if p in precisions)} for cls in runtimes},
                "runtimes_left_out": left_out}

    def render(self, run: RunResults, out_dir: Path, **context: Any) -> dict[str, Path]:
        from harness.report.conformance import conformance_html
        from harness.results.store import atomic_write_text

        wall: dict[str, float] = {}
        for c in run.cases:
            key = f"{c.case.runtime}/{c.case.precision}"
            wall[key] = round(wall.get(key, 0.0) + (c.duration_s or 0.0), 2)
        run.config["wall_s"] = wall
        report = out_dir / "report.html"
        return {"conformance": atomic_write_text(out_dir / "conformance.html", conformance_html(
            run, report_page=report.name if report.exists() else None))}

    def report_pages(self, run: RunResults, out_dir: Path, report_page: str | None) -> dict[str, Path]:
        """conformance.html (harness.report.conformance) of a stored run holding conformance cases: pass rates,
        the operator x runtime matrix, the failures with the commands that re-run them; linked to `report_page`."""
        from harness.report.conformance import conformance_pages

        return conformance_pages(run, out_dir, report_page)

    def terminal_lines(self, run: RunResults) -> list[str]:
        from harness.report.conformance import summary_text

        return summary_text(run).splitlines()


class ConformState(WorkerState):
    """Runs one conformance case in the worker (harness.workloads.conform.worker.run_case)."""

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        from harness.workloads.conform.worker import run_case

        on_phase("run")
        reply = run_case({**payload, "runtime": get_runtime(case.runtime), "precision": str(case.precision),
                          "threads": config.measure.threads})
        return conformance_result(payload["info"], payload["fingerprint"], case, reply)


CONFORM = ConformWorkload()
