"""The forward workload's options (harness.workloads.forward): deployment variants, --settle, --profile,
--localize and the LoadGen scenarios."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config import BatcherPolicy
from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import float_at_least, int_at_least, names, switch


def traffic_file(text: Any, what: str) -> str:
    """--traffic FILE: read and checked now (a UsageError naming the file and the problem), stored as its absolute
    path; each worker reads it again for its replays."""
    from harness.traffic.spec import load_traffic

    path = Path(str(text)).absolute()
    load_traffic(path)
    return str(path)

def variants(text: Any, what: str) -> tuple[str | None, ...]:
    from harness.variants import parse_variants

    try:
        return parse_variants(str(text))
    except UsageError as exc:
        raise UsageError(f"--{what}: {exc}") from None


# options only the forward workload honours (the deployment-variant axis, the wait for a quiet machine, the
# profiled pass and layer-wise drift localisation are parts of a forward case)
FORWARD = OptionGroup("forward", "forward workload", (
    OptionDef("variants", "comma-separated deployment variants, each KIND=VALUE or several joined by +, `base` for "
                          "none, e.g. base,opt=basic,int8=dynamic+weights=per-tensor (default: base; `harness "
                          "variants` lists the kinds); a case of a runtime that cannot take a variant is skipped "
                          "with the reason", "SPELLINGS", field="variants", parse=variants),
    OptionDef("settle", "wait up to SECONDS for a quiet machine (as many cores free of other processes as the "
                        "case's threads) before each case, and re-measure a contended block once it is quiet "
                        "again, keeping the contended one in the case's details (default: 0, off)", "SECONDS",
              field="settle_s", parse=float_at_least(0.0)),
    OptionDef("profile", "after each case's timed loop (never inside it), a profiled pass under the runtime's own "
                         "profiler: time per layer of the ONNX graph (fused kernels credited to the nodes they "
                         "cover), FLOPs and bytes, achieved GFLOP/s and GB/s and the percent of this machine's "
                         "measured roofline; a runtime without a profiler says why (docs/profile.md)",
              flag=True, field="profile", parse=switch(True)),
    OptionDef("localize", "localise drift layer by layer for every ONNX low-precision case, not only for cases "
                          "that fail their tolerance", flag=True, field="localize", parse=switch(True)),
))


def scenario_names(text: Any, what: str) -> tuple[str, ...]:
    from harness.results.schema import SCENARIO_NAMES

    given = names(text, what)
    if given == ("all",):
        return SCENARIO_NAMES
    for n in given:
        if n not in SCENARIO_NAMES:
            raise UsageError(f"--{what} {n!r}: valid scenarios: {', '.join(SCENARIO_NAMES)}, or all")
    return given


MAX_BATCHER_BATCH = 1024  # --batcher max: the batcher binds one feed per batch size 1..max before the tests
MAX_BATCHER_WAIT_MS = 10_000.0


def batcher_policy(text: Any, what: str) -> BatcherPolicy:
    """`max=N,wait=MS`: the dynamic batcher's largest batch (1..1024 samples) and the longest the oldest queued
    sample waits (ms, 0..10000) before a batch that is not full goes out."""
    spelling = f"--{what} {str(text)!r}"
    values: dict[str, str] = {}
    for part in str(text).split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in ("max", "wait") or not value.strip():
            raise UsageError(f"{spelling}: expected max=N,wait=MS (e.g. max=8,wait=2), not {part.strip()!r}")
        if key in values:
            raise UsageError(f"{spelling}: {key} given twice")
        values[key] = value.strip()
    missing = [k for k in ("max", "wait") if k not in values]
    if missing:
        raise UsageError(f"{spelling}: {' and '.join(missing)} missing (e.g. max=8,wait=2)")
    try:
        max_batch = int(values["max"])
    except ValueError:
        raise UsageError(f"{spelling}: max {values['max']!r} is not a whole number of samples") from None
    try:
        wait = float(values["wait"])
    except ValueError:
        raise UsageError(f"{spelling}: wait {values['wait']!r} is not a number of ms") from None
    if not 1 <= max_batch <= MAX_BATCHER_BATCH:
        raise UsageError(f"{spelling}: max {max_batch} is outside 1..{MAX_BATCHER_BATCH}")
    if not 0.0 <= wait <= MAX_BATCHER_WAIT_MS:  # also refuses nan and inf
        raise UsageError(f"{spelling}: wait {values['wait']} ms is outside 0..{MAX_BATCHER_WAIT_MS:g}")
    return BatcherPolicy(max_batch, wait)


SCENARIOS = OptionGroup("scenarios", "LoadGen scenarios", (
    OptionDef("scenarios", "MLPerf LoadGen scenarios to run on every measured case after its timed loop: "
                           "single-stream (p90 latency), multi-stream (p99 per 8-sample query), server (Poisson "
                           "arrivals, p99 bound; searches the highest VALID QPS unless --server-qps) and offline "
                           "(samples/s), comma-separated, or all (default: none). See docs/scenarios.md", "NAMES",
              field="scenarios", parse=scenario_names),
    OptionDef("scenario-duration", "LoadGen min duration of each scenario test in seconds (default: 1.0; MLPerf "
                                   "submissions use 600)", "SECONDS",
              field="scenario_duration_s", parse=float_at_least(0.01)),
    OptionDef("scenario-queries", "LoadGen min query count of each scenario test (default: the fewest LoadGen's "
                                  "early stopping can accept: 64 single-stream, 662 multi-stream, 459 server, 1 "
                                  "offline)", "N", field="scenario_queries", parse=int_at_least(1)),
    OptionDef("server-qps", "a fixed Server target QPS (default: search for the highest VALID one); QPS x "
                            "--scenario-duration is at most 1e7 queries (LoadGen schedules them all up front)", "QPS",
              field="server_qps", parse=float_at_least(1e-3)),
    OptionDef("server-latency", "the Server p99 latency bound in ms (default: 5 x the p99 of the case's "
                                "single-stream test, at least 10 x its median call, plus the p99 the harness's "
                                "issuing loop gives a no-op call at each try's rate; the bound's basis is stored "
                                "and printed)", "MS",
              field="server_latency_ms", parse=float_at_least(1e-3)),
    OptionDef("server-tries", "tries of the Server search, bisecting below the case's throughput (default: 4; "
                              "with no VALID try by then, up to 3 more halve the rate)", "N", field="server_tries", parse=int_at_least(1)),
    OptionDef("batcher", "serve the Server and Offline scenarios through a dynamic batcher: queued samples go to "
                         "the runtime as one call of a batch-N feed when max are waiting or the oldest has waited "
                         "wait ms, whichever is first; its batch sizes and queue waits are stored with each test "
                         "(default: none: each call takes what is queued, up to the case's batch). A model with "
                         "a fixed batch cannot batch: those tests are skipped with the reason. See "
                         "docs/scenarios.md", "max=N,wait=MS", field="batcher", parse=batcher_policy),
    OptionDef("traffic", "replay this traffic (a TOML/JSON description or a trace, docs/traffic.md: the replay "
                         "`harness recommend` uses) against every measured case, open-loop: latency from each "
                         "request's intended send time (coordinated-omission correct), the send-time error beside "
                         "it; a request's dimensions come from the traffic's [shapes] where it has them, else from "
                         "the case (its batch rows, its seq); --batcher forms the calls. Stored as each case's "
                         "`traffic` and shown in the report (default: none)", "FILE", field="traffic_file",
              parse=traffic_file),
    OptionDef("rate", "the --traffic replay's mean rate in requests/s (default: the traffic's own rate; a trace is "
                      "sped up or slowed down to it)", "R", field="traffic_rate",
              parse=float_at_least(1e-3, 1e7, "more requests per second than a replay loop can send")),
))




def check_settle(values: Mapping[str, Any]) -> None:
    """--settle waits (before a case, and again per contended block) inside the case's wall-clock limit: one as
    long as --case-timeout would turn every case into a timeout and lose its measurement."""
    from harness.config import ProcessConfig

    settle = values.get("settle_s") or 0.0
    timeout = values.get("case_timeout_s", ProcessConfig.case_timeout_s)
    if settle and settle >= timeout:
        raise UsageError(f"--settle {settle:g} s is not shorter than --case-timeout {timeout:g} s: the wait for a "
                         "quiet machine counts against the case's limit; give a shorter --settle or a longer "
                         "--case-timeout")

