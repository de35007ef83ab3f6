"""The option groups a workload owns, one module per workload package of harness/workloads/ (each workload names
its groups in Workload.option_groups)."""

from __future__ import annotations

from harness.options.workloads.ab import AB
from harness.options.workloads.conform import CONFORMANCE
from harness.options.workloads.forward import FORWARD, SCENARIOS
from harness.options.workloads.generate import GENERATION

WORKLOAD_GROUPS = (FORWARD, SCENARIOS, GENERATION, CONFORMANCE, AB)
