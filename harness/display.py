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


def speed_text(ratio: float | None, always_times: bool = False) -> str:
    """A change of a time (`ratio` = new time / old time; > 1: slower) as a reader says it: "+12.3%" / "-8.0%"
    of the time while the change stays under 2x either way, "7.5x faster" / "79.7x slower" beyond (a "+7873.9%"
    or a "-86.7%" is misread); `always_times`: the "x" form at every ratio ("1.3x slower", "1.0x" when equal to
    one decimal), for columns that compare a runtime with a reference. "" for None, zero or a non-finite ratio."""
    if ratio is None or not ratio > 0 or ratio == float("inf"):
        return ""
    if not always_times and 0.5 < ratio < 2.0:
        return f"{(ratio - 1) * 100:+.1f}%"
    if round(ratio, 1) == 1.0 and round(1 / ratio, 1) == 1.0:
        return "1.0x (same)"
    return f"{1 / ratio:.1f}x faster" if ratio < 1 else f"{ratio:.1f}x slower"
