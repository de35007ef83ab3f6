"""Every rendering: tables (pandas), HTML (one Jinja2 environment, autoescape), Markdown, verdict tables,
certificates, the gate-check page, the terminal table and pytest-benchmark JSON."""

from harness.report.render import write_outputs

__all__ = ["write_outputs"]
