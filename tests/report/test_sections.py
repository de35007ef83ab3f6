"""The report's sections by registry (harness.report.sections): the case table built once per report, a new section
one module and one registry line, the forward cases' table the same as building it again."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from harness.report import sections as sec
from harness.report import tables
from harness.report.data import ReportData
from harness.report.render import render_html, render_markdown, write_outputs
from harness.results import CaseId, CaseResult, RunResults
from harness.results.stats import summary_ms
from harness.results.records import GenerationRecord, GenerationStats
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency


def _forward(runtime: str, p50: float, batch: int = 1) -> CaseResult:
    return CaseResult(CaseId("mlp", runtime, "fp32", batch, None, "cpu"), "passed",
                      latency=fake_latency(p50, 10, p99_ms=p50 * 1.5),
                      throughput_sps=batch / p50 * 1e3, accuracy={"max_abs": 0.0, "rel_l2": 1e-7, "cosine": 1.0},
                      reference_runtime="torch-cpu", samples_ns=[int(p50 * 1e6)] * 10)


def _mixed_run() -> RunResults:
    """Forward cases and a generation case in one run (the forward table is the full table's forward rows)."""
    gen = CaseResult(CaseId("tiny-lm", "torch-cpu", "fp32", 1, 8, "cpu", gen=4), "passed")
    gen.generation = GenerationRecord(tpot=GenerationStats(**summary_ms([1_000_000 + 1000 * i for i in range(40)],
                                                                        (50, 90, 99))))
    cases = [_forward("torch-cpu", 2.0), gen, _forward("ort-cpu", 1.0), _forward("torch-cpu", 3.0, 4),
             _forward("ort-cpu", 1.5, 4), CaseResult(CaseId("mlp", "tensorrt", "fp32", 1, None, "cuda"), "skipped",
                                                     reason="no GPU")]
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "m"}),
                      config={"models": ["mlp", "tiny-lm"]}, cases=cases, complete=True)


def _count_frames(monkeypatch) -> list[int]:
    """Every call of cases_frame, wherever a module imported it by name."""
    calls: list[int] = []
    real = tables.cases_frame

    def counted(runs):
        calls.append(1)
        return real(runs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("harness.") and getattr(module, "cases_frame", None) is real:
            monkeypatch.setattr(module, "cases_frame", counted)
    return calls


def test_the_case_table_is_built_once_per_report(tmp_path, monkeypatch):
    calls = _count_frames(monkeypatch)
    paths = write_outputs(_mixed_run(), tmp_path)
    assert len(calls) == 1  # results.csv, report.html and summary.md from one table
    html = paths["html"].read_text()
    assert "p50 latency vs batch size, mlp" in html and "tiny-lm" in html


def test_the_forward_table_is_the_full_tables_forward_rows():
    run = _mixed_run()
    data = ReportData.build(run)
    forward = tables.cases_frame(data.forward)
    assert list(data.forward_frame.index) == list(forward.index) and list(data.forward_frame.columns) == list(
        forward.columns)
    assert data.forward_frame.astype(object).where(data.forward_frame.notna(), None).to_dict("records") == \
        forward.astype(object).where(forward.notna(), None).to_dict("records")


def test_a_report_of_one_data_is_the_report_built_from_the_runs():
    run = _mixed_run()
    data = ReportData.build(run)
    assert render_html(run, data=data) == render_html(run)
    assert render_markdown(run, data=data) == render_markdown(run)


class _Tally:
    """A new section, written in this file only: the measured cases per runtime, from the one case table."""

    TEMPLATE = ('<h2 id="tally">Tally</h2><ul>{% for rt, n in section.items() %}<li>{{ rt }}: {{ n }}'
                '{% if multi %} (several runs){% endif %}</li>{% endfor %}</ul>')

    @staticmethod
    def build(data: ReportData) -> dict[str, int]:
        measured = data.frame[data.frame["status"].isin(["passed", "failed"])]
        return {str(k): int(v) for k, v in measured.groupby("runtime", sort=True).size().items()}


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(sec, "HTML_SECTIONS", dict(sec.HTML_SECTIONS))
    import harness.report.render as render

    monkeypatch.setattr(render, "HTML_SECTIONS", sec.HTML_SECTIONS)
    return sec.HTML_SECTIONS


def test_a_new_section_is_one_module_and_one_registry_line(registry):
    sec.register_section("tally", sec.Section(_Tally.build, _Tally.TEMPLATE))  # the one line
    html = render_html(_mixed_run())
    assert '<h2 id="tally">Tally</h2><ul><li>ort-cpu: 2</li><li>torch-cpu: 3</li></ul>' in html
    assert html.index('id="tally"') < html.index('id="problems"')
    evil = RunResults(run_id="r", started_at="t", cases=[_forward("<script>x</script>", 1.0)])
    assert "<script>x</script>" not in render_html(evil)  # autoescaped like every template


def test_a_section_with_nothing_to_show_leaves_the_report_as_it_was(registry):
    before = render_html(RunResults(run_id="r", started_at="t", cases=[]))
    sec.register_section("tally", sec.Section(lambda d: {}, _Tally.TEMPLATE))
    assert render_html(RunResults(run_id="r", started_at="t", cases=[])) == before


def test_every_registered_section_is_a_keyword_of_the_template():
    source = open(sec.__file__.replace("sections.py", "templates/report.html.j2")).read()
    missing = [name for name, s in sec.HTML_SECTIONS.items() if s.template is None and name not in source]
    assert missing == []
    assert isinstance(ReportData.build([]).frame, pd.DataFrame)
