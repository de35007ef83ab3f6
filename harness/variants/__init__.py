"""Deployment variants: named, fingerprinted recipes applied to a case (the matrix's variant axis), one plug-in
per kind; the method is in docs/variants.md."""

from __future__ import annotations

from harness.variants.base import BASE, Knob, Variant, VariantKind
from harness.variants.registry import KINDS, parse_variant, parse_variants

__all__ = ["BASE", "KINDS", "Knob", "Variant", "VariantKind", "parse_variant", "parse_variants"]
