"""The report asks a run's workload for the pages of its own (Workload.report_pages): the conform workload's
operator page comes through it; the report itself no longer looks into the cases for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any


import harness.workloads as workloads
from harness.report.render import write_outputs
from harness.results.schema import CaseId, RunResults
from harness.workloads import Workload, get_workload, render_report, workload_of
from harness.workloads.conform.workload import ConformWorkload, conformance_result
from harness.results.stored import RunEnvironmentRecord


def conform_run(config: dict[str, Any] | None = None) -> RunResults:
    cases = []
    for name, reply in {"test_relu": {"status": "passed", "infer_ns": 1000, "max_abs": 0.0, "max_rel": 0.0},
                        "test_abs": {"status": "failed", "infer_ns": 1000, "max_abs": 1.0, "max_rel": 1.0,
                                     "reason": "output 0: 3 of 3 values over tolerance"}}.items():
        info = {"suite": "onnx-backend", "op": name.split("_")[1].capitalize(), "domain": "ai.onnx", "opset": 13,
                "kind": "node", "test": name, "reproduce": f"harness conform --case {name}"}
        cases.append(conformance_result(info, "f" * 16, CaseId(name, "ort-cpu", "fp32", 1, None, "cpu"),
                                        {"rtol": 1e-3, "atol": 1e-4, **reply}))
    return RunResults("conform-x", "2026-01-01T00:00:00", RunEnvironmentRecord(), config if config is not None else
                      {"workload": "conform"}, cases, complete=True)


class PagesWorkload(Workload):
    """A workload whose runs have a page of their own: it records what the report asked it."""

    name = "with-pages"
    asked: list[tuple[str, Path, str | None]] = []

    def cases(self, config: Any) -> list[CaseId]:
        return []

    def worker_state(self, timer: Any, defer_blocks: bool) -> Any:
        raise NotImplementedError

    def report_pages(self, run: RunResults, out_dir: Path, report_page: str | None) -> dict[str, Path]:
        self.asked.append((run.run_id, out_dir, report_page))
        page = out_dir / "own.html"
        page.write_text(f"<a href='{report_page}'>{len(run.cases)} cases</a>")
        return {"own": page}


def test_the_report_asks_the_runs_workload_for_its_pages(tmp_path, monkeypatch):
    w = PagesWorkload()
    monkeypatch.setitem(workloads._WORKLOADS, w.name, w)
    run = conform_run({"workload": "with-pages"})
    assert workload_of(run) is w
    paths = render_report(run, tmp_path)
    assert w.asked == [("conform-x", tmp_path, "report.html")]
    assert paths["own"].read_text() == "<a href='report.html'>2 cases</a>" and paths["html"].is_file()
    assert "conformance" not in paths  # its cases hold conformance facts, but its workload renders no such page
    # several runs side by side: one report of them all, no run's own pages
    w.asked.clear()
    assert "own" not in render_report([run, run], tmp_path / "two") and w.asked == []


def test_a_conform_run_gets_its_operator_page_through_the_conform_workload(tmp_path, monkeypatch):
    asked = []
    own = ConformWorkload.report_pages

    def spy(self, run, out_dir, report_page):
        asked.append((self.name, report_page))
        return own(self, run, out_dir, report_page)

    monkeypatch.setattr(ConformWorkload, "report_pages", spy)
    paths = render_report(conform_run(), tmp_path)
    assert asked == [("conform", "report.html")]
    page = paths["conformance"].read_text()
    assert paths["conformance"] == tmp_path / "conformance.html" and page.count('class="cell ') == 2
    assert '<a href="report.html">' in page and '<a href="conformance.html">' in paths["html"].read_text()


def test_the_report_itself_no_longer_looks_into_the_cases_for_pages(tmp_path):
    paths = write_outputs(conform_run(), tmp_path)  # no workload asked: the common outputs only
    assert set(paths) == {"csv", "html", "markdown", "benchmark"} and not (tmp_path / "conformance.html").exists()
    # a run of a workload not installed here, or a forward run: the common outputs only
    assert "conformance" not in render_report(conform_run({"workload": "not-here"}), tmp_path / "a")
    assert workload_of(conform_run({})) is get_workload("forward")


def test_the_pages_are_the_ones_the_run_used_to_get(tmp_path):
    """`harness report` (commands/run.py: render_report) writes the conform run's page as before."""
    render = render_report
    paths = render(conform_run(), tmp_path)
    assert set(paths) == {"csv", "html", "markdown", "benchmark", "conformance"}
