"""Where a case runs (harness.execution's worker): threads, isolation, limits, runtime environments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import MAX_THREADS, choice, float_at_least, int_at_least, switch


def wheel_folder(text: Any, what: str) -> str:
    """An existing folder of wheels (absolute): runtime environments are built from it alone."""
    p = Path(text).expanduser().absolute()
    if not p.is_dir():
        raise UsageError(f"--{what} {text}: not a folder (expected a folder of .whl files)")
    return str(p)


PROCESS = OptionGroup("process", "threads, isolation and limits", (
    OptionDef("threads", "intra-op threads for every runtime (default: the CPUs this process may use)", "N",
              field="threads", parse=int_at_least(1, MAX_THREADS, "more threads than any machine has cores")),
    OptionDef("no-isolation", "run cases in the harness's own process (debugging: a crash ends the run)",
              flag=True, field="isolation", parse=switch(False)),
    OptionDef("case-timeout", "wall-clock limit per case in seconds, covering load/compile, warm-up and "
                              "measurement (default: 600)", "SECONDS",
              field="case_timeout_s", parse=float_at_least(0.001)),
    OptionDef("case-memory", "address-space cap per worker in GiB (default: half the machine's memory)", "GB",
              field="case_memory_gb", parse=float_at_least(0.01)),
    OptionDef("envs", "runtime environments: `auto` runs a runtime whose packages this environment lacks, a "
                      "pinned NAME@VERSION and ort-openvino in a virtual environment of its own, built on first "
                      "use into the cache and reused (`harness envs`); `off`: never (such cases are skipped) "
                      "(default: auto)", "auto|off", field="envs", parse=choice(("auto", "off"), "modes")),
    OptionDef("env-wheels", "build runtime environments from this folder of wheels only (offline machines: pip "
                            "--no-index --find-links DIR)", "DIR", field="env_wheels", parse=wheel_folder),
))

# `harness envs build | clear`: what they take (the runtimes' own environments, harness.envs)
ENVS_BUILD = OptionGroup("envs-build", "envs build", (
    OptionDef("runtimes", "comma-separated runtime names, NAME@VERSION for a release", positional=True),
    *PROCESS.only("env_wheels").narrowed("env_wheels", help="install from this folder of wheels only (offline)")
    .options,
))
ENVS_CLEAR = OptionGroup("envs-clear", "envs clear", (
    OptionDef("keys", "keys or key prefixes (default: every environment)", "KEY", positional=True, nargs="*"),
))

# `harness bisect RUNTIME --versions A..B`: the runtime whose releases are searched (harness.envs), and which
BISECT = OptionGroup("bisect", "releases", (
    OptionDef("runtime", "a runtime with a package to pin, e.g. ort-cpu", "RUNTIME", positional=True),
    OptionDef("versions", "A..B: every release from A to B that pip can install here (either end may be left out); "
                          "or the releases, comma-separated", "A..B|V1,V2,...", required=True),
))
