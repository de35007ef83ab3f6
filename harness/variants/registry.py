"""The variant kinds' registry (one line per kind) and the parsing of variant spellings."""

from __future__ import annotations

import functools

from harness.errors import UsageError, did_you_mean
from harness.variants.base import BASE, Knob, Variant, VariantKind
from harness.variants.export import AXES, OPSET
from harness.variants.graph import FUSE, SIMPLIFY
from harness.variants.ort_session import EXEC, MEM, OPT, SPIN
from harness.variants.prune import PRUNE
from harness.variants.quant import INT8, WEIGHTS
from harness.variants.threads import THREADS
from harness.variants.tvm_tune import TUNE

# The registry: one line per kind, in the order knobs are spelled in a canonical variant name.
KINDS: dict[str, VariantKind] = {k.key: k for k in (OPT, EXEC, MEM, SPIN, THREADS, OPSET, AXES, SIMPLIFY, FUSE, INT8,
                                                    WEIGHTS, PRUNE, TUNE)}


def _canonical(kind: VariantKind, part: str, value: str) -> str:
    """The knob's canonical value, checked to be one the kind takes as it is: a spelling rounded on the way in
    (prune=0.9999999 written prune=1) is refused here, naming both, rather than by the worker."""
    canonical = kind.parse(value)
    try:
        again = kind.parse(canonical)
    except UsageError:
        again = None
    if again != canonical:
        raise UsageError(f"variant {part!r}: {value.strip()} is written {kind.key}={canonical}, which "
                         f"{'is refused' if again is None else f'reads as {kind.key}={again}'}: give a value "
                         f"that stays {kind.values} when written")
    return canonical


@functools.lru_cache(maxsize=256)  # a case's variant is parsed by the refusal, the apply and the record alike
def parse_variant(spelling: str) -> Variant | None:
    """`opt=basic+exec=parallel` -> Variant (knobs in registry order); `base` or "" -> None (no variant)."""
    text = spelling.strip()
    if text in ("", BASE):
        return None
    knobs: dict[str, Knob] = {}
    for part in text.split("+"):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise UsageError(f"variant {part!r}: spell a knob KIND=VALUE, e.g. opt=basic (kinds: "
                             f"{', '.join(KINDS)}; `harness variants` lists them)")
        if key not in KINDS:
            raise UsageError(f"variant {part!r}: unknown kind {key!r}{did_you_mean(key, KINDS)} (kinds: "
                             f"{', '.join(KINDS)})")
        if key in knobs:
            raise UsageError(f"variant {text!r}: {key} is given twice")
        knobs[key] = Knob(KINDS[key], _canonical(KINDS[key], part, value))
    order = list(KINDS)
    return Variant(tuple(sorted(knobs.values(), key=lambda k: order.index(k.kind.key))))


def parse_variants(spellings: str | list[str] | tuple[str, ...]) -> tuple[str | None, ...]:
    """The variant axis from `--variants`: canonical names (None for base), duplicates dropped, order kept."""
    items = spellings.split(",") if isinstance(spellings, str) else list(spellings)
    out: dict[str | None, None] = {}
    for s in items:
        v = parse_variant(s)
        out[v.name if v is not None else None] = None
    return tuple(out) or (None,)
