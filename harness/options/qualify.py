"""A qualification spec's [measure] table parsed by the run options' own definitions and messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.build import BUILD
from harness.options.inputs import INPUTS
from harness.options.process import PROCESS
from harness.options.timing import TIMING

# the run options a spec may set, by key: the option's dest (`min_time` for --min-time); a switch that turns
# something off is keyed by what it turns off and given as a boolean (`isolation = false` is --no-isolation)
SPEC_OPTIONS: tuple[OptionDef, ...] = (
    TIMING.only("min_time", "min_iters", "warmup", "noise_cv").options
    + PROCESS.only("threads", "no_isolation", "case_timeout", "case_memory").options
    + INPUTS.only("seed").options + BUILD.only("exporter").options)


def spec_key(o: OptionDef) -> str:
    return o.dest.removeprefix("no_") if o.flag else o.dest


def spec_measure(where: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """{key: TOML value} of a spec's [measure] -> {RunConfig field ("timing.X": a TimingPolicy field): value};
    a UsageError naming `where` (the file and the table), the key and the value, then the message `harness run`
    gives for the same value of the option."""
    by_key = {spec_key(o): o for o in SPEC_OPTIONS}
    extra = sorted(set(table) - set(by_key))
    if extra:
        raise UsageError(f"{where}: unknown key {extra[0]!r} (valid: {', '.join(sorted(by_key))})")
    out: dict[str, Any] = {}
    for key, value in table.items():
        o = by_key[key]
        assert o.field is not None and o.parse is not None, o.name
        if o.flag:
            if not isinstance(value, bool):
                raise UsageError(f"{where} {key} = {value!r} must be true or false")
            given = value != (spec_key(o) != o.dest)  # `isolation = false` gives --no-isolation
            if given:
                out[o.field] = o.parse(True, o.name)
            continue
        text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        try:
            out[o.field] = o.parse(text, o.name)
        except UsageError as exc:
            raise UsageError(f"{where} {key} = {value!r}: {exc}") from None
    return out


def _install() -> None:
    from harness.gating.qualify import use_measure_parser

    use_measure_parser(spec_measure)


_install()


# `harness qualify`'s own options (parsed by the CLI's parser)
QUALIFY = OptionGroup("qualify", "qualify", (
    OptionDef("spec", "the spec file, e.g. specs/cpu-2core.toml (not with --verify, --reproduce)", positional=True,
              nargs="?"),
    OptionDef("out", "output folder (default: reports/qualify-NAME-YYYYmmdd-HHMMSS)", "DIR"),
    OptionDef("results", "judge this results.json instead of running the cases", "FILE"),
    OptionDef("ray", "run the spec on every node of this Ray cluster (auto, HOST:PORT, ray://HOST:PORT): a "
                     "certificate per node and a fleet certificate placing each node against its peers "
                     "(docs/qualification.md)", "ADDRESS"),
    OptionDef("nodes", "with --ray: only the nodes these comma-separated globs name (matched against ADDRESS-ID8, "
                       "the address and the node id)", "GLOBS"),
    OptionDef("record-golden", "on a trusted machine: keep each case's outputs on its fixed inputs as golden "
                               "outputs, in the spec's store ([golden] store, default SPEC_DIR/NAME.golden); later "
                               "runs (every node of --ray) compare with them", flag=True),
    OptionDef("verify", "check a certificate.json: its seal (an edited field is named), the spec, results, "
                        "artifact and golden hashes, and its requirements re-judged from its results; exit 0 "
                        "verified, 1 not", "CERT"),
    OptionDef("reproduce", "re-run a certificate's spec (bundled in it) on this machine and say per figure whether "
                           "it falls in its reproducibility band (contended misses said apart)", "CERT"),
    OptionDef("burn-in", "repeat the spec in rounds for DURATION (90s, 30m, 2h; at least 6 rounds): a trend across "
                         "rounds (latency, memory) fails the case, named; CPU clocks and temperatures (NVML's on "
                         "GPUs) recorded per round; the certificate judges the last round", "DURATION"),
    OptionDef("env-wheels", "with --reproduce: build the certified runtime releases' environments from this folder "
                            "of wheels only (offline machines: pip --no-index --find-links DIR)", "DIR"),
    OptionDef("serial", "with --ray: one node at a time (nodes sharing one machine's cores then do not disturb each "
                        "other)", flag=True),
    OptionDef("node-deadline", "with --ray: a node whose shard has not finished within DURATION (90, 90s, 5m) is "
                               "cancelled and reported lost, the others qualified (default: 10x the median time "
                               "of the nodes that finished, at least 300 s, at most cases x repeats x "
                               "--case-timeout + 60 s)", "DURATION"),
))
