"""How the report writes a figure in a cell: "-" for a missing one, three significant digits, thousands grouped."""

from __future__ import annotations

from typing import Any

import pandas as pd


def fmt(v: Any, digits: int = 3) -> str:
    """A figure as the report writes it (None, NA and NaN as "-", booleans as yes/no)."""
    if v is None or v is pd.NA or v != v:  # None, NA or NaN
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"

