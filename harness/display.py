"""Text from stored files made safe to show: control and bidi characters visible, CSV formula cells defused."""

from __future__ import annotations

import re
from typing import Any

# C0 controls, DEL, C1 controls; the bidirectional marks, embeddings, overrides and isolates (which reorder what
# a reader sees: "Trojan Source"); the line and paragraph separators.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}
# OWASP CSV injection: a cell beginning with one of these is read as a formula by spreadsheet programs.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan|infinity)", re.IGNORECASE)


def visible(text: Any) -> str:
    """`text` as a string in which every control character (C0, DEL, C1), bidirectional mark, override or
    isolate (U+200E/F, U+202A-E, U+2066-9, U+061C) and line separator is shown as an escape: `\\r`, `\\n`,
    `\\t`, `\\x00`, `\\u202e`. The one helper every renderer (terminal, Markdown, CSV, HTML) uses on names."""
    s = str(text)
    if not _HIDDEN.search(s):
        return s
    return _HIDDEN.sub(lambda m: _NAMED.get(m.group()) or (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                                         else f"\\u{ord(m.group()):04x}"), s)


def csv_cell(value: Any) -> Any:
    """A CSV cell: text made `visible`, then prefixed with an apostrophe when it begins with a formula
    character (= + - @ tab CR); numbers, and text that is a plain number such as "-1.5", pass unchanged."""
    if not isinstance(value, str):
        return value
    s = visible(value)
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + s
    return s


def finalize(value: Any) -> Any:
    """Jinja `finalize` hook: every plain string printed by a template made `visible` (markup passes)."""
    from markupsafe import Markup

    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value
