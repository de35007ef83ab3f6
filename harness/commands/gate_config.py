"""What `harness gate` and `gate-check --nightly` share (not a command module): the gate's option groups, and the
baseline read, checked and turned into the run configuration and plans before anything is measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from harness.errors import UsageError
from harness.options import (
    AB,
    BUILD,
    INPUTS,
    MODELS,
    OUTPUTS,
    PROCESS,
    RUNTIMES,
    TIMING,
    parse_run_options,
)

GATE_GROUPS = (MODELS.only("models", "model"), RUNTIMES.only("runtimes"),
               AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence", "ab_seed", "ab_activations",
                       "ab_budget", "ab_detect"),
               TIMING.only("warmup", "contention_limit"), PROCESS, BUILD, OUTPUTS)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def auto_threads(wanted: int, look: Any = None) -> int:
    """--threads auto: the baseline's thread count, or as many as the cores free of other processes now (one
    look of 0.25 s at the machine), at least 1."""
    from harness.measure.contention import wait_quiet

    seen = (look or wait_quiet)(wanted, 0.0)
    free = seen.get("cores_free")
    return wanted if free is None else max(1, min(wanted, int(float(free) + 0.05)))


def check_stored_config(run: Any, file: Path, index: int) -> None:
    """The baseline's stored configuration, checked before anything is measured: its user models (an ONNX file
    that passes the model-file checks, or a `module:factory`), seed, threads and repeats (as their options parse
    them), feeds (a path), and every gated case's model known tonight. A ResultsError names the baseline file, the
    field and the problem."""
    from harness.errors import HarnessError, ResultsError
    from harness.model import model_names
    from harness.model_files import check_model_path, is_factory_ref, user_model_name

    where = f"{file}: runs[{index}].config"
    config = run.config if isinstance(run.config, dict) else {}

    def refuse(field: str, value: Any, why: str) -> ResultsError:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        return ResultsError(f"{where}.{field}: {shown}: {why} (the baseline's stored configuration; save the "
                            "baseline again from a good run)")

    refs = config.get("user_models")
    if refs is not None and not isinstance(refs, list):
        raise refuse("user_models", refs, "not a list of model references")
    names = set()
    for i, ref in enumerate(refs or []):
        if not isinstance(ref, str) or not ref or "\x00" in ref:
            raise refuse(f"user_models[{i}]", ref, "not a model reference")
        if not is_factory_ref(ref):
            if not ref.endswith(".onnx"):
                raise refuse(f"user_models[{i}]", ref, "neither an .onnx file nor a `module:factory` reference")
            try:
                check_model_path(ref)
            except HarnessError as exc:
                raise refuse(f"user_models[{i}]", ref, str(exc)) from None
        names.add(user_model_name(ref))
    parsers = {"seed": INPUTS.only("seed").options[0].parse, "threads": PROCESS.only("threads").options[0].parse}
    for field, parse in parsers.items():
        value = config.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse(field, value, "not an integer")
        try:
            assert parse is not None
            parse(str(value), field)
        except HarnessError as exc:
            raise refuse(field, value, str(exc).split(": ", 1)[-1]) from None
    repeats = config.get("repeats")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= 10**6):
        raise refuse("repeats", repeats, "not a count of rounds (an integer from 1)")
    feeds = config.get("feeds")
    if feeds is not None and (not isinstance(feeds, str) or "\x00" in feeds):
        raise refuse("feeds", feeds, "not a path")
    from harness.plugins import load_plugins

    load_plugins()
    known = set(model_names()) | names
    for i, c in enumerate(run.cases):
        if c.measured and c.case.model not in known:
            raise ResultsError(f"{file}: runs[{index}].cases[{i}].case.model: {c.case.model!r} is neither a model of "
                               "the zoo or a plugin here nor one of the baseline's stored user models "
                               f"({', '.join(sorted(names)) or 'none'})")


def gate_setup(options: Mapping[str, Any], groups: tuple[Any, ...] = GATE_GROUPS) -> tuple[Any, Any, Any, Any, Any]:
    """(baseline runs, replay, gate config, plans, gates) of `harness gate` (and of `gate-check --nightly`), from
    the gate's option values by name (`vars(args)` of `harness gate`; gate-check --nightly passes its own): the
    baseline and its --dir, --models/--runtimes (a filter of the baseline's cases), --gate/--gate-config,
    --inject, and the run options of `groups` (GATE_GROUPS, and `harness gate`'s --ray group; absent ones take their
    defaults)."""
    from harness.execution.gate_run import plan_gate
    from harness.gating import load_gate_config
    from harness.gating.baseline import load_baseline_runs, load_replay, resolve_baseline

    baseline, folder = options["baseline"], options.get("dir")
    runs = load_baseline_runs(baseline, folder)
    replay = load_replay(baseline, folder)
    newest = runs[-1]
    check_stored_config(newest, resolve_baseline(baseline, folder), len(runs) - 1)
    gates = load_gate_config(options.get("gate_config"), options.get("gate") or ())
    raw = dict(options)
    raw.pop("models", None)  # a filter of the baseline's cases here, not a matrix
    raw.pop("runtimes", None)
    stored = newest.config
    # the baseline's own user models are registered tonight too (a --model file's cases are gated by name)
    user = [str(p) for p in stored.get("user_models") or []]
    raw["model"] = list(dict.fromkeys([*user, *(raw.get("model") or [])])) or None
    if raw.get("threads") is None and stored.get("threads"):
        raw["threads"] = str(stored["threads"])  # side A as the baseline ran it: its thread count
    elif str(raw.get("threads") or "").strip().lower() == "auto":
        raw["threads"] = str(auto_threads(int(stored.get("threads") or os.cpu_count() or 1)))
    config = parse_run_options(raw, groups, out_prefix="gate-", workload="gate")
    seed = stored.get("seed")
    config = config.replace(repeats=1, ab_inject=float(options.get("inject") or 0.0) / 100.0,
                            **({"seed": int(seed)} if isinstance(seed, int) else {}))
    models, runtimes = options.get("models"), options.get("runtimes")
    plans = plan_gate(newest, replay, _names(models), _names(runtimes))
    if not plans:
        raise UsageError(f"{resolve_baseline(baseline, folder)}: no measured case of the baseline matches "
                         f"--models {models or '(all)'} --runtimes {runtimes or '(all)'}: nothing to gate")
    return runs, replay, config, plans, gates
