"""What every runtime is fed (harness.data, harness.feeds): the seed, real inputs, per-input overrides."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup, Parser
from harness.options.values import int_at_least


def feeds_file(text: Any, what: str) -> str:
    from harness.feeds import load_feeds

    path = Path(str(text)).expanduser().absolute()
    load_feeds(path)  # a file nothing can read is a usage error before the run starts
    return str(path)


def overrides(ranged: bool) -> Parser:
    def parse(text: Any, what: str) -> tuple[Any, ...]:
        from harness.feeds import parse_overrides

        return parse_overrides(text, what, ranged)
    return parse



INPUTS = OptionGroup("inputs", "inputs", (
    OptionDef("seed", "seed of the input feeds, identical for every runtime (default: 0)", "N",
              field="seed", parse=int_at_least(0)),
    OptionDef("feeds", "real inputs for every model: an .npz keyed by input name (samples on axis 0; an array "
                       "'labels' adds task accuracy), or a folder of INPUT.npy files or of one-sample .npz files; "
                       "each case takes its batch from the first samples (repeated when fewer); drift uses the "
                       "same inputs (docs/inputs.md)", "NPZ|DIR", field="feeds", parse=feeds_file),
    OptionDef("input-value", "feed input NAME with the value V everywhere, e.g. sr=16000 (repeatable, "
                             "comma-separated)", "NAME=V", multiple=True, field="input_values",
              parse=overrides(False)),
    OptionDef("input-range", "feed input NAME from [LO, HI): integers uniform in LO..HI-1, floats uniform, e.g. "
                             "token_type_ids=0:2 (repeatable, comma-separated)", "NAME=LO:HI", multiple=True,
              field="input_ranges", parse=overrides(True)),
))


def input_options(values: Mapping[str, Any], models: tuple[str, ...], sequence: tuple[str, bool]
                  ) -> dict[str, Any]:
    """--input-value / --input-range checked against the run's models; the sequence lengths of --feeds for the
    workload's sequence axis (`sequence`: its RunConfig field, e.g. seq_lens or prompt_lens, and whether its
    option was given, which wins)."""
    from harness.feeds import check_overrides, feeds_for_run, seq_lens
    from harness.model import get_model

    specs = [get_model(m) for m in models]
    given = tuple(values.get("input_values", ())) + tuple(values.get("input_ranges", ()))
    both = {o.name for o in values.get("input_values", ())} & {o.name for o in values.get("input_ranges", ())}
    if both:
        raise UsageError(f"--input-value and --input-range both name {', '.join(sorted(both))}; give one")
    check_overrides(given, specs)
    out: dict[str, Any] = {}
    axis, axis_given = sequence
    if values.get("feeds"):
        lens = seq_lens(feeds_for_run(values["feeds"]), specs)
        if lens and not axis_given:
            out[axis] = lens
    return out
