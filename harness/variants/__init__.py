"""Deployment variants: named, fingerprinted recipes applied to a case (the matrix's variant axis).

A variant spelling is one or more knobs joined by `+`, each `KIND=VALUE`: `opt=basic`, `int8=static+weights=
per-tensor`. Each kind is a small plug-in, one module each, registered in KINDS below; a kind changes the
model (pruning), the build options (export opset, graph transforms, INT8 recipe) or the runtime's options
(ONNX Runtime session knobs, threads). A kind names the runtime capability it needs
(`Runtime.variant_hooks`); a case whose runtime lacks it is skipped with the reason, never run as if the
variant applied.
"""

from __future__ import annotations

from harness.variants.base import BASE, Knob, Variant, VariantKind
from harness.variants.registry import KINDS, parse_variant, parse_variants

__all__ = ["BASE", "KINDS", "Knob", "Variant", "VariantKind", "parse_variant", "parse_variants"]
