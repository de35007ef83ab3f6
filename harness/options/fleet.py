"""Sharding the matrix over a Ray cluster (harness.execution.ray_shards): the address and the placement."""

from __future__ import annotations

from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup


def placement_rules(text: Any, what: str) -> tuple[tuple[str, str], ...]:
    """`GLOB=RESOURCE,...` (e.g. `ort-cuda*=GPU`): runtimes matching GLOB run on Ray nodes having RESOURCE."""
    rules = []
    for part in (p.strip() for p in str(text).split(",")):
        glob, sep, resource = part.partition("=")
        if not sep or not glob.strip() or not resource.strip():
            raise UsageError(f"--{what} {part!r}: expected RUNTIME-GLOB=RESOURCE, e.g. ort-cuda*=GPU")
        rules.append((glob.strip(), resource.strip()))
    return tuple(rules)


FLEET = OptionGroup("fleet", "Ray cluster", (
    OptionDef("ray", "shard the matrix over a Ray cluster's nodes (`auto`: the cluster this machine belongs to; "
                     "or HOST:PORT, ray://HOST:PORT), one shard per node under the harness's own isolation, every "
                     "node's run in OUT/NODE/ and one merged report (needs the [ray] extra; docs/fleet.md)",
              "ADDRESS|auto", field="ray", parse=lambda text, _what: str(text)),
    OptionDef("placement", "with --ray: which runtimes need which node resource, RUNTIME-GLOB=RESOURCE,... e.g. "
                           "ort-cuda*=GPU,tensorrt=accelerator_type:H100 (default: GPU for CUDA runtimes, else CPU)",
              "GLOB=RES,...", field="placement", parse=placement_rules),
))
