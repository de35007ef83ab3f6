"""`harness ceilings`' options (harness.profile: the machine's measured peak FLOP/s and memory bandwidth)."""

from __future__ import annotations

from harness.options.base import OptionDef, OptionGroup
from harness.options.process import PROCESS

CEILINGS = OptionGroup("ceilings", "ceilings", (
    # run's --threads, parsed by the CLI's parser (ceilings builds no run configuration)
    *PROCESS.only("threads").narrowed("threads", help="threads (default: the CPUs this process may use)",
                                      field=None).options,
    OptionDef("remeasure", "measure again even if this machine's are cached", flag=True),
    OptionDef("json", "print the stored record as JSON", flag=True),
))
