"""Intra-op threads of a case's runtime (every runtime), as a variant: `threads=1` beside the run's default."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.variants.base import IntKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions


class Threads(IntKind):
    key = "threads"
    title = "intra-op threads of the runtime (default: the run's --threads)"
    values = "a whole number of threads from 1 to 1024"
    lo, hi = 1, 1024

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        return dataclasses.replace(options, threads=int(value))


THREADS = Threads()
