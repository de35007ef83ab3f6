"""Intra-op threads of a case's runtime (every runtime), as a variant: `threads=1` beside the run's default."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.variants.base import VariantKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions


class Threads(VariantKind):
    key = "threads"
    title = "intra-op threads of the runtime (default: the run's --threads)"
    values = "a whole number of threads from 1 to 1024"

    def parse(self, value: str) -> str:
        try:
            n = int(value.strip())
        except ValueError:
            raise self.bad(value) from None
        if not 1 <= n <= 1024:
            raise self.bad(value)
        return str(n)

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, threads=int(value))


THREADS = Threads()
