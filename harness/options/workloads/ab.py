"""The A/B workload's options (harness.workloads.ab; the nightly gate's blocks too): sides, pairs, blocks, the
test's effect and confidence."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import detectable, float_at_least, fraction, int_at_least


def ab_side(text: Any, what: str) -> str:
    """An A/B side: `base`, a variant spelling (canonical name) or a --model file (`model:NAME`)."""
    from harness.model_files import is_factory_ref, is_user_model_ref, user_model_name
    from harness.variants import parse_variant

    t = str(text).strip()
    if is_user_model_ref(t):
        if not is_factory_ref(t) and not os.path.isfile(t):
            raise UsageError(f"--{what} {t}: no such model file")
        return f"model:{user_model_name(t)}"
    try:
        v = parse_variant(t)
    except UsageError as exc:
        raise UsageError(f"--{what}: {exc} (or give an .onnx model file)") from None
    return "base" if v is None else v.name



AB_MAX_PAIRS, AB_MAX_BLOCK_S = 10_000, 60.0
AB = OptionGroup("ab", "A/B workload", (
    OptionDef("ab-a", "--workload ab: side A (the baseline): base, a variant spelling (e.g. opt=basic) or an .onnx "
                      "file also given with --model (default: base)", "SIDE", field="ab_a", parse=ab_side),
    OptionDef("ab-b", "--workload ab: side B (the candidate), as --ab-a (default: base)", "SIDE", field="ab_b",
              parse=ab_side),
    OptionDef("ab-pairs", "--workload ab: pairs of alternating blocks, AB or BA in a balanced random order "
                          "(default: 40)", "N", field="ab_pairs",
              parse=int_at_least(2, AB_MAX_PAIRS, "each pair is two blocks of --ab-block-time; a larger test "
                                                  "gains no power worth its hours")),
    OptionDef("ab-block-time", "--workload ab: measured seconds per block (default: 0.05; at least 5 calls)",
              "SECONDS",
              field="ab_block_time_s",
              parse=float_at_least(0.001, AB_MAX_BLOCK_S, "a block long enough to drift with the machine defeats "
                                                          "the pairing")),
    OptionDef("ab-min-effect", "--workload ab: a B/A change of this fraction or more whose interval excludes 1 is "
                               "regressed or improved; an interval within twice it either side of 1 is pass; "
                               "anything else noise (default: 0.02)", "FRACTION",
              field="ab_min_effect", parse=fraction),
    OptionDef("ab-confidence", "--workload ab: confidence of the interval on B/A (default: 0.99)", "FRACTION",
              field="ab_confidence", parse=fraction),
    OptionDef("ab-seed", "--workload ab: seed of the block order (default: 0)", "N", field="ab_seed",
              parse=int_at_least(0)),
    OptionDef("ab-activations", "--workload ab: activate each side this many times, anew every pairs/N pairs; "
                                "when the activations differ the verdict is judged on them, not on the pairs "
                                "(default: 4; 1: one activation per side)", "N", field="ab_activations",
              parse=int_at_least(1, 50, "an activation needs pairs of its own")),
    OptionDef("ab-budget", "--workload ab: seconds per case it may spend beyond the planned pairs to reach a "
                           "verdict: waiting for quiet cores after a contended pair, then more pairs in new "
                           "activations while the verdict is unjudged (default: 30; 0: the planned pairs only)",
              "SECONDS", field="ab_budget_s", parse=float_at_least(0.0, 3600.0, "an hour per case")),
    OptionDef("ab-detect", "--workload ab: the pair budget as a target: choose the pairs per case so that a "
                           "slowdown of this size (5% or 0.05) is judged regressed with 95% power, from the spread "
                           "of a 10-pair pilot, at most 200 pairs (replaces --ab-pairs; `harness ab --detect`)",
              "PERCENT", field="ab_detect", parse=detectable),
))

# `harness ab A B`: the two sides as positional arguments (the same fields as --ab-a / --ab-b)
AB_SIDES = OptionGroup("ab-sides", "sides", (
    dataclasses.replace(AB.only("ab_a").options[0], positional=True, metavar="A",
                        help="side A (the baseline): base, a variant spelling such as opt=basic (`harness "
                             "variants`), or an .onnx file"),
    dataclasses.replace(AB.only("ab_b").options[0], positional=True, metavar="B", help="side B (the candidate), as A"),
))
