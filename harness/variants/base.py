"""Variant, Knob and VariantKind: parsing a spelling, refusing what a case cannot take, applying the rest."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from harness.errors import UsageError
from harness.precision import Precision

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions
    from harness.model import ModelSpec

BASE = "base"  # the spelling of "no variant" on the command line (--variants base,opt=basic)


class VariantKind:
    """One knob a variant may turn. A subclass parses its values and applies them to the model (`apply_model`)
    or the build and runtime options (`apply_options`); `needs` names the `Runtime.variant_hooks` capability a
    runtime must declare to honour it (None: every runtime)."""

    key: ClassVar[str]
    title: ClassVar[str]  # what it varies, for `harness variants` and docs
    values: ClassVar[str]  # the accepted values, in words
    needs: ClassVar[str | None] = None
    precisions: ClassVar[frozenset[Precision] | None] = None  # None: every precision

    def parse(self, value: str) -> str:
        """The canonical value, or a UsageError naming the knob and what it accepts."""
        raise NotImplementedError

    def refusal(self, value: str, spec: ModelSpec, precision: Precision) -> str | None:
        """Why this knob cannot apply to this model at this precision (None: it applies)."""
        if self.precisions is not None and precision not in self.precisions:
            have = ", ".join(sorted(p.value for p in self.precisions))
            return f"variant {self.key}={value} changes {have} cases only (this case is {precision})"
        return None

    def apply_model(self, value: str, spec: ModelSpec) -> ModelSpec:
        return spec

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return options

    def bad(self, value: str) -> UsageError:
        return UsageError(f"variant {self.key}={value!r}: {self.key} takes {self.values}")


class ChoiceKind(VariantKind):
    """A knob with a closed set of values."""

    choices: ClassVar[tuple[str, ...]]

    def parse(self, value: str) -> str:
        v = value.strip().lower()
        if v not in self.choices:
            raise self.bad(value)
        return v


class IntKind(VariantKind):
    """A knob whose value is a whole number in [lo, hi] (named values, e.g. tune=on, map through `aliases`)."""

    lo: ClassVar[int]
    hi: ClassVar[int]
    aliases: ClassVar[dict[str, int]] = {}

    def parse(self, value: str) -> str:
        v = value.strip().lower()
        if v in self.aliases:
            return str(self.aliases[v])
        try:
            n = int(v)
        except ValueError:
            raise self.bad(value) from None
        if not self.lo <= n <= self.hi:
            raise self.bad(value)
        return str(n)


@dataclass(frozen=True)
class Knob:
    kind: VariantKind
    value: str

    @property
    def spelling(self) -> str:
        return f"{self.kind.key}={self.value}"


@dataclass(frozen=True)
class Variant:
    """A named recipe: knobs applied in registry order. `name` is the canonical spelling used in case ids
    (`resnet18-ort-cpu-fp32-b1~opt=basic`) and, through RuntimeOptions.variant, in every artifact's key."""

    knobs: tuple[Knob, ...]

    @property
    def name(self) -> str:
        return "+".join(k.spelling for k in self.knobs)

    def refusal(self, spec: ModelSpec, hooks: frozenset[str], runtime: str, precision: Precision) -> str | None:
        """Why a case of `runtime` (declaring `hooks`) cannot run this variant, else None."""
        for k in self.knobs:
            if k.kind.needs is not None and k.kind.needs not in hooks:
                return f"variant {k.spelling} needs the {k.kind.needs} capability, which {runtime} lacks"
            why = k.kind.refusal(k.value, spec, precision)
            if why:
                return why
        return None

    def apply(self, spec: ModelSpec, options: RuntimeOptions) -> tuple[ModelSpec, RuntimeOptions]:
        for k in self.knobs:
            spec = k.kind.apply_model(k.value, spec)
            options = k.kind.apply_options(k.value, options)
        return spec, dataclasses.replace(options, variant=self.name)
