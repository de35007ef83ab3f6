"""The report's overview: what ran where (a column per run), the case counts, the environments, the trend charts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

from harness.model import get_model
from harness.report.progress import noise_lines
from harness.report.tables import env_packages
from harness.results.schema import RunResults


def sources(runs: list[RunResults], labels: list[str]) -> list[dict[str, Any]]:
    """The "What ran" table: a column per run (its environment, configuration, counts, noise and overhead)."""
    out = []
    for run, label in zip(runs, labels):
        noisy = [c.case.id for c in run.cases if c.measured and c.latency is not None and c.latency.noisy]
        # the terminal's words on the machine (CPU busy during the run, contended cases, too many threads); the
        # busy-at-start and noisy lines have rows of their own
        noise = [line for line in noise_lines(run)
                 if not line.startswith(("CPU busy at start", "noisy (", "tail-heavy ("))]
        out.append({"label": label, "run": run, "env": run.environment, "config": run.config,
                    "has_seq": any(c.case.seq is not None for c in run.cases),
                    "counts": run.counts(), "noisy": noisy, "noise": noise,
                    "overhead": run.environment.harness_overhead or {}})
    return out


def env_rows(runs: list[RunResults]) -> list[tuple[str, list[Any]]]:
    """The "Environment" table: (what, its value per run), libraries and runtimes' own environments included."""
    keys = ["machine", "hostname", "cpu_model", "cpu_cores_logical", "cpu_cores_physical", "memory_total_gb",
            "os", "python", "cpu_busy_percent_at_start", "machine_fingerprint"]
    envs = [r.environment.as_dict() for r in runs]  # the fields and the open keys (`os`) alike, as stored
    rows = [(k, [e.get(k) for e in envs]) for k in keys if any(e.get(k) is not None for e in envs)]
    gpu_keys = sorted({k for r in runs for k in (r.environment.gpu or {}) if not isinstance(
        (r.environment.gpu or {}).get(k), (dict, list))})
    rows += [(f"gpu.{k}", [(r.environment.gpu or {}).get(k) for r in runs]) for k in gpu_keys]
    rows.append(("git", [f"{(r.environment.git or {}).get('commit') or '-'}"
                         f"{' (dirty)' if (r.environment.git or {}).get('dirty') else ''}" for r in runs]))
    rows.append(("threads", [" ".join(f"{k}={v}" for k, v in (r.environment.threads or {}).items())
                             for r in runs]))
    libs = sorted({k for r in runs for k, v in (r.environment.libraries or {}).items() if v})
    rows += [(k, [(r.environment.libraries or {}).get(k) for r in runs]) for k in libs]
    # runtimes that ran in an environment of their own (harness.envs): the exact packages installed there
    own = [{c.case.runtime: env_packages(c.environment) for c in r.cases if c.environment} for r in runs]
    rows += [(f"{rt} (own environment)", [o.get(rt) for o in own]) for rt in sorted({k for o in own for k in o})]
    return rows


def onnx_only_model(model: str, cases: list[Any]) -> bool:
    """No PyTorch module: recorded with each measured case; older results fall back to the registry."""
    recorded = [c.details["model_has_torch_module"] for c in cases if "model_has_torch_module" in c.details]
    if recorded:
        return not recorded[0]
    try:
        return get_model(model).build is None
    except Exception:  # noqa: BLE001 - a model not in this installation
        return False


def trend_charts(trends: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    from harness.report.trend import trend_chart

    return [{**t, "svg": Markup(trend_chart(t))} for t in trends or ()]


def models(all_cases: list[tuple[str, Any]]) -> list[str]:
    """The models of the report's cases, in the order they first ran."""
    return list(dict.fromkeys(c.case.model for _, c in all_cases))


def onnx_only(all_cases: list[tuple[str, Any]]) -> set[str]:
    """The models with no PyTorch module (compared against ONNX Runtime CPU FP32 outputs)."""
    return {m for m in models(all_cases) if onnx_only_model(m, [c for _, c in all_cases if c.case.model == m])}


def total_counts(runs: list[RunResults]) -> dict[str, int]:
    total: dict[str, int] = {}
    for run in runs:
        for k, v in run.counts().items():
            total[k] = total.get(k, 0) + v
    return total

