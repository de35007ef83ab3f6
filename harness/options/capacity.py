"""`harness recommend`'s options: its own (traffic, SLO, limits, thread counts, batchers, the search's budgets) into
RunConfig's CapacityConfig, and the run's groups where they mean the same, narrowed where it takes less."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup, Parser, deprecated
from harness.options.build import BUILD
from harness.options.fleet import FLEET
from harness.options.matrix import MODELS, RUNTIMES
from harness.options.outputs import OUTPUTS
from harness.options.process import PROCESS
from harness.options.values import MAX_THREADS, float_at_least, int_at_least, switch
from harness.options.workloads.forward import FORWARD

if TYPE_CHECKING:
    from harness.config import RunConfig


def thread_counts(text: Any, what: str) -> tuple[int, ...]:
    """Comma-separated intra-op thread counts, each bounded as run's --threads (a configuration each)."""
    parts = [t.strip() for t in str(text).split(",") if t.strip()]
    bounded = int_at_least(1, MAX_THREADS, "more threads than any machine has cores")
    counts = []
    for part in parts or ["0"]:
        try:
            int(part)
        except ValueError:
            raise UsageError(f"--{what} {text!r}: whole numbers, comma-separated") from None
        counts.append(bounded(part, what))  # a UsageError naming the option, the value and the bound
    return tuple(dict.fromkeys(counts))


def one_thread_count(text: Any, what: str) -> tuple[int, ...]:
    """recommend's --threads N: one count, as run's --threads. A list (its old meaning) still works for one
    release, saying --thread-counts on stderr (once it parsed: a bad list is one line, its error)."""
    counts = thread_counts(text, what)
    if "," in str(text):
        deprecated(f"--{what} {text} (a list)", f"--{what} takes one count, as in `harness run`; search several with "
                   f"--thread-counts {text}")
    return counts


def batchers(text: Any, what: str) -> tuple[str, ...]:
    """Semicolon-separated batcher spellings, each `none` or `max=N,wait=MS` (checked now, kept as spelt: they name
    the configurations in recommend.json)."""
    from harness.workloads.capacity.live import batcher_spelling

    spellings = tuple(dict.fromkeys(t.strip() for t in str(text).split(";") if t.strip()))
    if not spellings:
        raise UsageError(f"--{what}: empty list")
    for s in spellings:
        batcher_spelling(s)
    return spellings


def open_interval(low: float, high: float) -> Parser:
    """A number strictly between `low` and `high` (a percentile, a relative width)."""
    def parse(text: Any, what: str) -> float:
        v = float_at_least(low)(text, what)
        if not low < v < high:
            raise UsageError(f"--{what} {v}: must be in ({low:g}, {high:g})")
        return v
    parse.bounds = (low, high)  # type: ignore[attr-defined]
    return parse


def traffic_path(text: Any, what: str) -> str:
    """--traffic FILE as given (recommend_run reads it with the --traffic-seed; its errors name the file)."""
    return str(text)


def model_ref(text: Any, what: str) -> str:
    """--model: a zoo or plugin name, an ONNX file or pkg.module:factory (resolved with the traffic, which sizes a
    user model's named free axes)."""
    if not str(text).strip():
        raise UsageError(f"--{what}: empty")
    return str(text).strip()


CAPACITY = OptionGroup("capacity", "traffic and SLO", (
    OptionDef("traffic", "traffic spec (TOML or JSON) or a trace (.jsonl, .csv; AIPerf's mooncake and single_turn "
                         "too): docs/traffic.md", "FILE", field="traffic", parse=traffic_path, required=True),
    OptionDef("slo-ms", "the latency bound (ms) at --percentile", "MS", field="slo_ms",
              parse=float_at_least(1e-6, 1e7, "over two hours"), required=True),
    OptionDef("percentile", "the SLO's percentile (default: 99)", "P", field="slo_percentile",
              parse=open_interval(0.0, 100.0)),
    OptionDef("drift-tolerance", "largest rel_l2 drift against the FP32 reference (default: none)", "REL_L2",
              field="drift_limit", parse=float_at_least(0.0, 1e6, "no drift is that large")),
    OptionDef("memory-cap-mb", "largest resident memory growth in MB (default: none)", "MB", field="memory_cap_mb",
              parse=float_at_least(1e-3, 1e9, "a petabyte")),
    OptionDef("traffic-seed", "the traffic's seed (default: the file's)", "N", field="traffic_seed",
              parse=int_at_least(0), old=("--seed",)),
))
SEARCH = OptionGroup("search", "the search", (
    OptionDef("thread-counts", "comma-separated intra-op thread counts, a configuration each (default: 1)", "INTS",
              field="thread_counts", parse=thread_counts),
    OptionDef("batchers", "semicolon-separated: none or max=N,wait=MS each (default: none), e.g. "
                          "'none;max=8,wait=2'", "SPELLINGS", field="batchers", parse=batchers),
    OptionDef("search-tolerance", "the capacity interval's width at which a search stops, relative (default: "
                                  "0.03)", "FRACTION", field="search_tolerance", parse=open_interval(0.0, 1.0),
              old=("--tolerance",)),
    OptionDef("probes", "most probed rates per search (default: 25)", "N", field="probes",
              parse=int_at_least(3, 1000, "a search that needs more rates cannot narrow")),
    OptionDef("requests", "requests per probe (default: 2000; doubled while a probe cannot decide)", "N",
              field="probe_requests", parse=int_at_least(100, 10_000_000, "a probe's schedule is held in memory")),
    OptionDef("max-requests", "most requests per probe (default: 16000)", "N", field="probe_max_requests",
              parse=int_at_least(100, 10_000_000, "a probe's schedule is held in memory")),
    # 5: with 4 pairs the signed-rank test cannot reach p < 0.05
    OptionDef("ab-pairs", "interleaved A/B pairs of the best two (default: 8)", "N", field="capacity_ab_pairs",
              parse=int_at_least(5, 10_000, "harness ab's own maximum")),
    OptionDef("activations", "activations each final capacity is measured over: its search on one, the saturation "
                             "replay on the others, whose spread widens its interval (default: 3; 1: the search's "
                             "activation only)", "N", field="capacity_activations",
              parse=int_at_least(1, 20, "each is a saturation replay of its own")),
    OptionDef("grid", "search every configuration fully (the exhaustive grid) instead of successive halving",
              flag=True, field="grid", parse=switch(True)),
    OptionDef("resume", "go on with the stopped run in --out: the searches its recommend.json holds are taken from "
                        "it, the rest measured (the same model, traffic, constraints, settings, machine, library "
                        "versions and isolation only)", flag=True, field="resume", parse=switch(True)),
))

# `harness recommend`: its own groups and the run's, narrowed where it takes one value (one --model; --threads one
# count, several through --thread-counts) or has its own default (ort-cpu)
RECOMMEND_GROUPS: tuple[OptionGroup, ...] = (
    CAPACITY,
    dataclasses.replace(MODELS, title="model").only("model").narrowed(
        "model", help="one model: of the zoo, a plugin's, an ONNX file or pkg.module:factory (as run's --model)",
        metavar="MODEL", multiple=False, required=True, field="model_ref", parse=model_ref),
    RUNTIMES.with_defaults(runtimes="ort-cpu").narrowed(
        "runtimes", help="comma-separated runtime names (default: ort-cpu; `harness runtimes` lists them)"),
    dataclasses.replace(FORWARD, title="deployment variants").only("variants"),
    PROCESS.only("threads", "no_isolation", "envs", "env_wheels").narrowed(
        "threads", help="intra-op threads of every configuration, one count as in `harness run` (default: 1; "
                        "several: --thread-counts)", field="thread_counts", parse=one_thread_count).narrowed(
        "no_isolation", help="every configuration in this process (default: each in a worker process of its own, "
                             "as the matrix runs its cases; for debugging)"),
    SEARCH,
    BUILD.only("cache_dir"),
    OUTPUTS.only("out").narrowed("out", help="output folder (default: reports/recommend-YYYYmmdd-HHMMSS)"),
    FLEET.narrowed("ray", help="search on a Ray cluster's nodes of one hardware class (auto, HOST:PORT, "
                               "ray://HOST:PORT): each configuration's search whole on one node, the last rung and the "
                               "A/B on one node (needs the [ray] extra; docs/fleet.md)"),
)


def check_capacity(raw: Mapping[str, Any], config: RunConfig) -> None:
    """What one option's parser cannot say: options that go together, or exclude each other."""
    cap = config.capacity
    if raw.get("threads") and raw.get("thread_counts"):
        raise UsageError("--threads and --thread-counts both given: give the counts with --thread-counts")
    if not 100 <= cap.probe_requests <= cap.probe_max_requests:
        raise UsageError(f"--requests {cap.probe_requests} / --max-requests {cap.probe_max_requests}: 100 <= "
                         "requests <= max-requests")
    if cap.resume and not raw.get("out"):
        raise UsageError("--resume needs --out DIR: the folder of the run to go on with")


def parse_capacity_options(raw: Mapping[str, Any]) -> RunConfig:
    """`harness recommend`'s raw option values -> a RunConfig whose `capacity` section is set (and the matrix's
    runtimes, precisions and variants, the process's isolation and environments, the cache, the output folder)."""
    from harness.options.parse import parse_run_options

    config = parse_run_options(raw, RECOMMEND_GROUPS, out_prefix="recommend-")
    check_capacity(raw, config)
    return config

