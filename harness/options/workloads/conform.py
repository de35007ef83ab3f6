"""The conformance workload's options (harness.workloads.conform): the case filter."""

from __future__ import annotations

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import names, pattern_list, switch

CONFORMANCE = OptionGroup("conformance", "conformance workload (case filter)", (
    OptionDef("ops", "--workload conform: comma-separated operators (exact, any case), e.g. Conv,Softmax", "OPS",
              field="ops", parse=names),
    OptionDef("match", "--workload conform: test names containing PATTERN (a glob with * ? [): repeatable or "
                       "comma-separated", "PATTERN", multiple=True, field="keywords", parse=pattern_list,
              short="-k"),
    OptionDef("case", "--workload conform: one test by exact name (repeatable)", "NAME", multiple=True,
              field="names", parse=pattern_list),
    OptionDef("opset", "--workload conform: ai.onnx opset of the case's model: N, N:, :M or N:M", "BOUNDS",
              fields=("opset_min", "opset_max"), parse=lambda text, _what: opset_bounds(text)),
    OptionDef("no-expanded", "--workload conform: leave out the *_expanded (function body) cases", flag=True,
              field="expanded", parse=switch(False)),
    OptionDef("no-light", "--workload conform: leave out the light models (data/light)", flag=True,
              field="light", parse=switch(False)),
))


def opset_bounds(text: str | None) -> tuple[int | None, int | None]:
    """`--opset` bounds: "13" (exactly), "13:" (at least), ":17" (at most), "13:17" (between, inclusive)."""
    if not text:
        return None, None
    lo, sep, hi = str(text).partition(":")
    try:
        a = int(lo) if lo.strip() else None
        b = int(hi) if hi.strip() else None
    except ValueError:
        raise UsageError(f"--opset {text!r}: expected N, N:, :M or N:M (integers)") from None
    if not sep:
        b = a
    if a is not None and b is not None and a > b:
        raise UsageError(f"--opset {text!r}: the lower bound is over the upper one")
    return a, b


# `harness conform --list`: the command's own switch (the cases the filters select, none run)
CONFORM_LIST = OptionGroup("conform-list", "listing", (
    OptionDef("list", "list the selected cases (name, operator, opset) only", flag=True),
))
