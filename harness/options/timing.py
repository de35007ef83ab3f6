"""How a case is timed (harness.measure): minimum time and iterations, warm-up, blocks, noise, contention."""

from __future__ import annotations

from harness.options.base import OptionDef, OptionGroup
from harness.options.values import float_at_least, fraction, int_at_least

TIMING = OptionGroup("timing", "timing", (
    OptionDef("min-time", "minimum measured seconds per case (default: 1.0; with --quick: 0.5)", "SECONDS",
              field="timing.min_time_s", parse=float_at_least(0.0), quick="0.5"),
    OptionDef("min-iters", "minimum measured iterations per case (default: 20; with --quick: 10)", "N",
              field="timing.min_iters", parse=int_at_least(1), quick="10"),
    OptionDef("warmup", "warm-up iterations before measuring, at least 0.2 s in all (default: 5)", "N",
              field="timing.warmup_iters", parse=int_at_least(0)),
    OptionDef("repeats", "measure each case in N blocks, each after a fresh activation (session, thread pool, "
                         "buffers): the first when the case runs, the others in rounds over the whole matrix at the "
                         "end (runtimes whose activation is a compile: all N back to back); the gate reads each "
                         "case in its least-disturbed block (default: 3)", "N",
              field="repeats", parse=int_at_least(1)),
    OptionDef("noise-cv", "flag a measurement as noisy above this robust coefficient of variation, 1.4826 x "
                          "MAD / median (default: 0.10)", "FLOAT",
              field="noise_cv", parse=float_at_least(0.0)),
    OptionDef("contention-limit", "call a measurement block contended (and its figures inconclusive for compare, "
                                  "gates and qualify) when the worker's threads waited this share of their "
                                  "runnable time for a CPU (default: 0.10, or $HARNESS_CONTENTION_LIMIT; 1: never); "
                                  "a block is contended too when the hypervisor stole 5% or more of the CPUs' time "
                                  "(steal, /proc/stat)",
              "FRACTION", field="contention_limit", parse=fraction),
))
