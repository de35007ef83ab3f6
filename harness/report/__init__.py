"""Tables (pandas), the HTML report (Jinja2, autoescape), the terminal table and pytest-benchmark JSON."""

from harness.report.render import write_outputs

__all__ = ["write_outputs"]
