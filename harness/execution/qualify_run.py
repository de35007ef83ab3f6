"""Runs a qualification spec's cases through a HarnessSession; harness.gating.qualify judges what they stored."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.execution.session import HarnessSession
from harness.gating.qualify import QualifySpec
from harness.matrix import case_ids
from harness.measure.memory import default_case_memory_gb
from harness.measure.timer import TimingPolicy
from harness.precision import Precision
from harness.report.progress import RunProgress
from harness.results.schema import CaseId
from harness.runtimes.pinned import canonical_dist, same_release


def spec_case(model: str, runtime: str, precision: Precision, batch: int, seq: int | None) -> CaseId:
    """A spec case's identity by `harness run`'s rule (harness.matrix.case_ids): load_spec's case rule."""
    (case,) = case_ids((model,), (runtime,), (precision,), (batch,), () if seq is None else (seq,))
    return case


def spec_run_config(spec: QualifySpec, out_dir: Path) -> RunConfig:
    """The run configuration covering the spec's cases, with its [measure] settings."""
    def uniq(values: list[Any]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(values))

    cs = [s.case for s in spec.cases]
    given = spec.measure  # RunConfig field values, parsed by the run options' definitions (load_spec)
    timing = {dest.removeprefix("timing."): v for dest, v in given.items() if dest.startswith("timing.")}
    settings = {dest: v for dest, v in given.items() if not dest.startswith("timing.")}
    settings.setdefault("case_memory_gb", default_case_memory_gb())
    settings["audit"] = True  # qualification audits every case inside its timed run
    return RunConfig.build(models=uniq([c.model for c in cs]), runtimes=uniq([c.runtime for c in cs]),
                           precisions=uniq([c.precision for c in cs]), batch_sizes=uniq([c.batch for c in cs]),
                           seq_lens=uniq([c.seq for c in cs if c.seq is not None]) or (128,), out_dir=Path(out_dir),
                           run_id=_dt.datetime.now().strftime("%Y%m%d-%H%M%S"), timing=TimingPolicy(**timing),
                           **settings)


def run_spec(spec: QualifySpec, out_dir: Path, progress: Any = None, golden_dir: Path | None = None,
             record_golden: bool = False) -> Path:
    """Run the spec's cases through a HarnessSession (the machinery of `harness run`); returns results.json.
    `progress`: a harness.report.progress.RunProgress (default: one on stdout); `golden_dir`: the golden store
    the cases record into (`record_golden`) or are compared with."""
    config = spec_run_config(spec, out_dir)
    if golden_dir is not None:
        config = config.replace(golden_dir=str(Path(golden_dir).resolve()), record_golden=record_golden)
    session = HarnessSession(config, progress=progress or RunProgress())
    if not session.run_cases([sc.case for sc in spec.cases]):
        raise session.interrupt()  # stopped: what finished is written, and no certificate of part of the spec
    return out_dir / "results.json"


# ------------------------------------------------------------------ --reproduce: each release in its own environment
@dataclass(frozen=True)
class ReleasePlan:
    """How `harness qualify --reproduce` runs one of a certificate's cases: `run_as` is the case itself (this
    interpreter's release) or the case with its runtime pinned to the certificate's release (`NAME@VERSION`,
    `NAME@DIST==VERSION`, in an environment of its own, as the nightly gate runs side A); `release` says which
    release ran it, in words, and `pinned` whether it is the certified one in its own environment."""

    case: CaseId
    run_as: CaseId
    release: str
    pinned: bool = False
    fallback: str = ""  # why the certified release could not run here ("" when it did, or was not needed)


def _label(release: Mapping[str, str] | None) -> str:
    return f"{release['distribution']} {release['version']}" if release else "an unknown release"


def _release_here(cls: Any, config: RunConfig, note: Callable[[str], None]) -> tuple[dict[str, str] | None, str]:
    """The release of `cls`'s module a plain case of it runs here: this interpreter's, or that of the environment
    `harness run` would build for it (built now, kept in the cache for the run). (release, why unknown)."""
    from harness.envs import EnvBuildError, EnvStore, environment_for
    from harness.errors import HarnessError
    from harness.results.environment import module_provider

    module = cls.module or ""
    env_spec = environment_for(cls, config.process.envs)
    if env_spec is None:
        return module_provider(module), ""
    wheels = config.process.env_wheels
    try:
        env = EnvStore(config.artifacts.cache_dir).ensure(env_spec, wheels=Path(wheels) if wheels else None,
                                                           progress=note, who=cls.name)
    except (EnvBuildError, HarnessError) as exc:
        return None, str(exc)
    got = (env.record().providers or {}).get(module)
    return (got if got is not None else module_provider(module)), ""


def release_plans(cases: Sequence[CaseId], certified: Mapping[str, Mapping[str, Any]], config: RunConfig,
                  note: Callable[[str], None] = lambda line: None) -> list[ReleasePlan]:
    """Per case of a certificate, the release it is reproduced on. `certified`: the certificate's environment
    lock, case id -> {module: {"distribution", "version"}} (the providers each case ran with). Where this
    interpreter's release of the runtime's module differs from the certified one, the case runs pinned to the
    certified release in its own environment (built first, from --env-wheels where given); a release that cannot
    be installed here falls back to this interpreter's, labelled with the reason."""
    from harness.envs import EnvBuildError, EnvStore, environment_for
    from harness.errors import HarnessError
    from harness.runtimes import get_runtime
    from harness.runtimes.pinned import split_pin

    plans = []
    for case in cases:
        try:
            cls = get_runtime(case.runtime)
        except HarnessError as exc:  # an unknown runtime: the case's own row reports it
            plans.append(ReleasePlan(case, case, f"not known here ({exc})"))
            continue
        module = cls.module
        if module is None or cls.distribution is None:
            plans.append(ReleasePlan(case, case, "the harness's own environment (no runtime package to pin)"))
            continue
        was = (certified.get(case.id) or {}).get(module)
        here, why = _release_here(cls, config, note)
        here_text = _label(here) if here else f"this machine's (unknown: {why or 'not installed'})"
        if not isinstance(was, Mapping) or not isinstance(was.get("distribution"), str) or \
                not isinstance(was.get("version"), str):
            plans.append(ReleasePlan(case, case, f"{here_text}, this interpreter's (the certificate records no "
                                                 f"release of {module})"))
            continue
        if here is not None and same_release(was, here):
            plans.append(ReleasePlan(case, case, f"{_label(was)}, as certified"))
            continue
        base = split_pin(case.runtime)[0]
        pin = was["version"] if canonical_dist(was["distribution"]) == canonical_dist(cls.distribution) else \
            f"{was['distribution']}=={was['version']}"
        pinned = dataclasses.replace(case, runtime=f"{base}@{pin}")
        try:
            env_spec = environment_for(get_runtime(pinned.runtime), config.process.envs)
            if env_spec is None:
                raise HarnessError("runtime environments are off (--envs off)")
            wheels = config.process.env_wheels
            EnvStore(config.artifacts.cache_dir).ensure(env_spec, wheels=Path(wheels) if wheels else None,
                                                        progress=note, who=pinned.runtime)
        except (EnvBuildError, HarnessError) as exc:
            fallback = f"the certified {_label(was)} could not be installed here: {exc}"
            plans.append(ReleasePlan(case, case, f"{here_text}, this interpreter's ({fallback})", fallback=fallback))
            continue
        plans.append(ReleasePlan(case, pinned, f"{_label(was)}, the certified release in its own environment (this "
                                               f"interpreter's is {here_text})", pinned=True))
    return plans


def run_releases(spec: QualifySpec, plans: Sequence[ReleasePlan], out_dir: Path, progress: Any = None,
                 golden_dir: Path | None = None, config: RunConfig | None = None) -> Path:
    """The spec's cases as `plans` say (a pinned case in its certified release's environment), in one session;
    results.json is then rewritten under the certificate's case ids (the spec's runtimes), each case saying in
    details.release which runtime and release ran it. `config`: spec_run_config's (with --env-wheels). Returns
    results.json."""
    from harness.results.schema import load_results
    from harness.results.store import write_results

    config = config if config is not None else spec_run_config(spec, out_dir)
    if golden_dir is not None:
        config = config.replace(golden_dir=str(_golden_aliases(Path(golden_dir), plans, out_dir)))
    session = HarnessSession(config, progress=progress or RunProgress())
    if not session.run_cases([p.run_as for p in plans]):
        raise session.interrupt()
    path = out_dir / "results.json"
    run = load_results(path)
    by_run = {p.run_as.id: p for p in plans}
    for c in run.cases:
        p = by_run.get(c.case.id)
        if p is None:
            continue
        c.details = {**(c.details or {}), "release": {"runtime": p.run_as.runtime, "release": p.release,
                                                     "pinned": p.pinned, "fallback": p.fallback}}
        c.case = p.case
    write_results(run, out_dir)
    return path


def _golden_aliases(store: Path, plans: Sequence[ReleasePlan], out_dir: Path) -> Path:
    """The golden store as the pinned cases find it: a copy of its index with each pinned case's id beside the
    certificate's (the same content-addressed files, linked), so a case run in its certified release's
    environment is compared with the same golden outputs."""
    import json
    import os
    import shutil

    index_path = store / "index.json"
    pinned = [p for p in plans if p.pinned]
    if not pinned or not index_path.is_file():
        return store.resolve()
    index = json.loads(index_path.read_text())
    alias = out_dir / "golden-store"
    alias.mkdir(parents=True, exist_ok=True)
    for f in store.glob("*.npz"):
        target = alias / f.name
        if not target.exists():
            try:
                os.link(f, target)
            except OSError:
                shutil.copyfile(f, target)
    for p in pinned:
        if p.case.id in index:
            index[p.run_as.id] = index[p.case.id]
    (alias / "index.json").write_text(json.dumps(index, indent=1))
    return alias.resolve()
