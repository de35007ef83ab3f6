"""Value parsers shared by the option groups: names, sizes, bounded numbers, choices, switches."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import Parser


def names(text: Any, what: str) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    if not out:
        raise UsageError(f"--{what}: empty list")
    return out


MAX_DIM = 1 << 20  # a batch size or sequence length
MAX_THREADS = 4096  # more than any machine's cores: a thread pool that large only waits


def positive_ints(text: Any, what: str) -> tuple[int, ...]:
    out = []
    for part in names(text, what):
        try:
            v = int(part)
        except ValueError:
            raise UsageError(f"--{what}: {part!r} is not an integer") from None
        if v <= 0:
            raise UsageError(f"--{what}: {v} is not a positive size (a shape dimension must be >= 1)")
        if v > MAX_DIM:
            raise UsageError(f"--{what}: {v} is above the maximum {MAX_DIM} (a feed of that many rows or positions "
                             "would not fit in memory; a case is sized for one machine)")
        out.append(v)
    return tuple(out)


def at_least(minimum: float, kind: type = float, maximum: float | None = None, why: str = "") -> Parser:
    """A finite number of `kind` (int or float) not below `minimum` and, when given, not above `maximum` (`why`:
    what a larger value would cost). NaN and the infinities are refused alike, and so are integers spelt as
    floats (1e9 for a count)."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: Any, what: str) -> Any:
        try:
            v = kind(text)
        except (TypeError, ValueError, OverflowError):
            raise UsageError(f"--{what}: {text!r} is not {noun}") from None
        if kind is float and not math.isfinite(v):
            raise UsageError(f"--{what}: {text!r} is not a finite number")
        if not v >= minimum:
            raise UsageError(f"--{what}: {v} is below the minimum {minimum}")
        if maximum is not None and v > maximum:
            shown = v if kind is int else f"{v:g}"
            raise UsageError(f"--{what}: {shown} is above the maximum {maximum:g}{f' ({why})' if why else ''}")
        return v
    parse.bounds = (minimum, maximum)  # type: ignore[attr-defined]  # a number option (tests find them by it)
    return parse


def int_at_least(minimum: int, maximum: int | None = None, why: str = "") -> Parser:
    return at_least(minimum, int, maximum, why)


def float_at_least(minimum: float, maximum: float | None = None, why: str = "") -> Parser:
    return at_least(minimum, float, maximum, why)


def integer(text: Any, what: str) -> int:
    """A whole number, its bounds checked where it is used (baseline save's --keep)."""
    return at_least(-math.inf, int)(text, what)


def fraction(text: Any, what: str) -> float:
    """A number in [0, 1]."""
    v = float_at_least(0.0)(text, what)
    if v > 1.0:
        raise UsageError(f"--{what}: {v:g} is not a fraction in [0, 1]")
    return v


fraction.bounds = (0.0, 1.0)  # type: ignore[attr-defined]


def slowdown(text: Any, what: str) -> float:
    """A slowdown to detect: a percentage ("5%") or a fraction ("0.05"), above 0 and under 1."""
    s = str(text).strip()
    pct = s.endswith("%")
    try:
        v = float(s[:-1] if pct else s) / (100.0 if pct else 1.0)
    except ValueError:
        raise UsageError(f"--{what}: {text!r} is not a slowdown such as 5% or 0.05") from None
    if not math.isfinite(v):
        raise UsageError(f"--{what}: {text!r} is not a finite number")
    if not 0.0 < v < 1.0:
        raise UsageError(f"--{what}: {text!r}: a slowdown to detect lies between 0 and 100% (e.g. 5%)")
    return v


slowdown.bounds = (0.0, 1.0)  # type: ignore[attr-defined]

MIN_DETECT = 0.001  # 0.1%: below the timer's and the machine's own spread on the quietest pairs measured here


def detectable(text: Any, what: str) -> float:
    """--ab-detect / --detect: a slowdown (as `slowdown`) of at least MIN_DETECT, refused at once below it (it used to
    be refused only after a pilot had measured for half a minute)."""
    v = slowdown(text, what)
    if v < MIN_DETECT:
        raise UsageError(f"--{what}: {text!r} is below {MIN_DETECT:.1%}: no case's pairs are that quiet (the "
                         "timer and the machine alone spread more), so no pair budget could detect it; give 0.5% or "
                         "more")
    return v


detectable.bounds = (MIN_DETECT, 1.0)  # type: ignore[attr-defined]


def choice(valid: tuple[str, ...], noun: str, fold: bool = False) -> Parser:
    """One of `valid`; `fold`: spaces stripped and lower-cased first."""
    def parse(text: Any, what: str) -> str:
        v = str(text).strip().lower() if fold else str(text)
        if v not in valid:
            raise UsageError(f"--{what} {v!r}: valid {noun}: {', '.join(valid)}")
        return v
    return parse



def folder(text: Any, what: str) -> Path:
    return Path(text).expanduser()


def pattern_list(text: Any, what: str) -> tuple[str, ...]:
    """A repeatable option's values, each comma-separated: one tuple of stripped, non-empty items."""
    items = text if isinstance(text, (list, tuple)) else [text]
    return tuple(dict.fromkeys(x.strip() for t in items for x in str(t).split(",") if x.strip()))


def switch(on: Any) -> Callable[[Any, str], Any]:
    """A flag's value when given (`--no-isolation` sets isolation=False)."""
    return lambda _text, _what: on

