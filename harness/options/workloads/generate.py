"""The generation workload's options (harness.workloads.generate): prompt and output lengths."""

from __future__ import annotations

from harness.options.base import OptionDef, OptionGroup
from harness.options.values import positive_ints

GENERATION = OptionGroup("generation", "generation workload", (
    OptionDef("prompt-lens", "--workload generate: comma-separated prompt lengths in tokens (default: 128; with "
                             "--quick: 32)", "INTS", field="prompt_lens", parse=positive_ints, quick="32"),
    OptionDef("output-lens", "--workload generate: comma-separated numbers of tokens to generate per sequence "
                             "(default: 64; with --quick: 16)", "INTS", field="output_lens", parse=positive_ints,
              quick="16"),
))
