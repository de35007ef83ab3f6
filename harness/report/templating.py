"""The one Jinja2 environment of every HTML output: autoescape on, StrictUndefined, printed text made `visible`."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, Undefined, select_autoescape

from harness.display import finalize


@cache
def environment(strict: bool = True) -> Environment:
    """The environment over report/templates (trim_blocks and lstrip_blocks: templates end a line's block tag
    with `+%}` to keep its newline). `strict=False`: the same environment, overlaid with Jinja's lenient
    Undefined, for report.html.j2, which reads optional keys of stored results (older runs, other machines)."""
    if not strict:
        return environment().overlay(undefined=Undefined)
    return Environment(loader=PackageLoader("harness", "report/templates"),
                       autoescape=select_autoescape(default=True, default_for_string=True),
                       trim_blocks=True, lstrip_blocks=True, finalize=finalize, undefined=StrictUndefined)


def render_template(name: str, strict: bool = True, **context: Any) -> str:
    """Render report/templates/`name` with `context`."""
    return environment(strict).get_template(name).render(**context)
