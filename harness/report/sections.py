"""The sections of report.html and summary.md by registry: each a function of the report's data (ReportData, with
its one case table) and one line here; render.py renders what it gives (docs/extending.md#a-report-section)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from harness.report import comparison, overview, scenarios, summary
from harness.report.data import ReportData
from harness.report.energy import energy_section
from harness.report.generation import generation_markdown, generation_section
from harness.report.profile import peak_rows, profile_markdown, roofline_chart, where_time_goes
from harness.report.tables import ab_rows, end_to_end_tables, skip_reasons
from harness.results.schema import BROKEN


@dataclass(frozen=True)
class Section:
    """A section of report.html: `build(data)` gives its context (falsy: the section is left out). report.html.j2
    shows it in the block of its name; a section that brings its own `template` (Jinja source, autoescaped, with
    `section` its context, `fmt` and `multi`) is shown in the report's own-sections slot instead, so a new section
    is one module and one line here."""

    build: Callable[[ReportData], Any]
    template: str | None = None


def _roofline(data: ReportData) -> Markup | None:
    peaks = _peaks(data)
    svg = roofline_chart(peaks) if peaks else None
    return Markup(svg) if svg else None


def _peaks(data: ReportData) -> list[dict[str, Any]]:
    return data.shared("peaks", lambda: peak_rows(data.forward, data.labels))


# name -> the section (the template's keyword), in the order they are built
HTML_SECTIONS: dict[str, Section] = {}


def register_section(name: str, section: Section) -> None:
    HTML_SECTIONS[name] = section


register_section("sources", Section(lambda d: overview.sources(d.runs, d.labels)))
register_section("counts", Section(lambda d: overview.total_counts(d.runs)))
register_section("skips", Section(lambda d: skip_reasons(d.runs)))
register_section("generation", Section(lambda d: generation_section(d.runs, d.labels)))
register_section("conclusions", Section(comparison.found))
register_section("tables_by_model", Section(comparison.tables_by_model))
register_section("batch_charts", Section(comparison.batch_charts))
register_section("tradeoff", Section(comparison.tradeoff))
register_section("models", Section(lambda d: overview.models(d.all_cases)))
register_section("onnx_only", Section(lambda d: overview.onnx_only(d.all_cases)))
register_section("scenarios", Section(lambda d: scenarios.scenario_rows(d.all_cases)))
register_section("traffic", Section(lambda d: scenarios.traffic_rows(d.all_cases)))
register_section("batcher", Section(lambda d: scenarios.batcher_sections(d.all_cases, d.multi)))
register_section("end_to_end", Section(lambda d: end_to_end_tables(d.runs)))
register_section("ab", Section(lambda d: ab_rows(d.runs)))
register_section("variants", Section(comparison.variants))
register_section("drift", Section(comparison.drift))
register_section("localized", Section(lambda d: [(label, c) for label, c in d.all_cases if c.localization]))
register_section("peaks", Section(_peaks))
register_section("roofline", Section(_roofline))
register_section("profile_tables", Section(lambda d: where_time_goes(d.forward, d.labels)))
register_section("trends", Section(lambda d: overview.trend_charts(d.trends)))
register_section("energy", Section(lambda d: energy_section(d.all_cases)))
register_section("not_passed", Section(lambda d: [(label, c) for label, c in d.all_cases
                                                  if c.status not in ("passed", "skipped")]))
register_section("broken", Section(lambda d: [c for _, c in d.all_cases if c.status in BROKEN]))
register_section("rows", Section(comparison.rows))
register_section("unbounded", Section(comparison.unbounded))
register_section("env_rows", Section(lambda d: overview.env_rows(d.runs)))

# summary.md: name -> its lines (data, the most rows a table shows), in the file's order
MARKDOWN_SECTIONS: dict[str, Callable[[ReportData, int], list[str]]] = {
    "header": lambda d, n: summary.md_header(d.runs, d.labels, d.verdicts),
    "noise": lambda d, n: summary.md_noise(d.runs, d.labels),
    "conclusions": lambda d, n: summary.md_conclusions(d.runs, d.labels, d.frame),
    "caveats": lambda d, n: summary.md_caveats(d.runs, d.labels),
    "verdicts": lambda d, n: summary.md_verdicts(d.verdicts, n),
    "measured": lambda d, n: summary.md_measured(d.runs, d.frame, n),
    "scenarios": lambda d, n: summary.md_scenarios(d.runs, d.labels, n),
    "traffic": lambda d, n: summary.md_traffic(d.runs, d.labels, n),
    "generation": lambda d, n: generation_markdown(d.runs, d.labels, summary.md_table),
    "profile": lambda d, n: profile_markdown(d.runs, d.labels, summary.md_table),
    "problems": lambda d, n: summary.md_problems(d.frame, n),
    "skipped": lambda d, n: summary.md_skipped(d.runs, n),
}
