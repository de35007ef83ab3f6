"""How drift is judged (harness.accuracy): tolerance overrides per precision."""

from __future__ import annotations

from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import switch
from harness.precision import parse_tolerance_overrides


def tolerances(text: Any, what: str) -> dict[str, dict[str, float]]:
    try:
        parsed = parse_tolerance_overrides(text)
    except ValueError as exc:
        raise UsageError(f"--{what}: {exc}") from None
    return {p.value: {k: v for k, v in t.as_dict().items() if v is not None} for p, t in parsed.items()}


ACCURACY = OptionGroup("accuracy", "drift", (
    OptionDef("tolerance", "override drift tolerances, e.g. fp16.max_rel_l2=0.05,int8.min_cosine=0.98 (bounds: "
                           "atol, rtol, max_rel_l2, min_cosine, min_top1, floor)", "P.BOUND=V,...",
              field="tolerance_overrides", parse=tolerances),
    OptionDef("audit", "audit each case inside its timed run (--workload forward: the timed loop's last output and "
                       "sampled timed outputs on distinct inputs against untimed ones, and a caching audit, one "
                       "repeated input against distinct inputs; --workload generate: first token, token count and "
                       "timed tokens against the untimed generation); a failed audit fails the case (harness "
                       "qualify always audits)", flag=True, field="audit", parse=switch(True)),
))
