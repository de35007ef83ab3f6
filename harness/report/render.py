"""Write a run's derived outputs: results.csv, report.html, benchmark.json (pytest-benchmark format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from harness.model import get_model
from harness.results.schema import BROKEN, RunResults
from harness.results.store import atomic_write_text
from harness.report.tables import cases_frame, comparison_tables


def _jinja() -> Environment:
    return Environment(loader=PackageLoader("harness", "report/templates"),
                       autoescape=select_autoescape(default=True, default_for_string=True),
                       trim_blocks=True, lstrip_blocks=True)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or v != v:  # None or NaN
        return "-"
    if isinstance(v, str):
        return v
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def reference_runtimes(run: RunResults) -> dict[str, str]:
    """Model -> the runtime improvements are measured against (recorded in results, else from the zoo)."""
    out: dict[str, str] = {}
    for c in run.cases:
        if c.reference_runtime:
            out.setdefault(c.case.model, c.reference_runtime)
    for c in run.cases:
        if c.case.model not in out:
            try:
                out[c.case.model] = get_model(c.case.model).reference
            except Exception:  # noqa: BLE001 - a model not in this installation's zoo
                pass
    return out


def render_html(run: RunResults) -> str:
    tables = comparison_tables(run, reference_runtimes(run))
    by_model: dict[str, list[dict[str, Any]]] = {}
    for t in tables:
        by_model.setdefault(t["model"], []).append(t)
    df = cases_frame(run)
    rows = [{**row, "id": c.case.id} for row, c in zip(df.to_dict("records"), run.cases)]
    for r in rows:
        for k, v in r.items():
            if v is not None and not isinstance(v, (str, bool)) and v != v:
                r[k] = None
    return _jinja().get_template("report.html.j2").render(
        run=run, env=run.environment, config=run.config, counts=run.counts(),
        tables_by_model=by_model, rows=rows, fmt=_fmt,
        not_passed=[c for c in run.cases if c.status != "passed"],
        broken=[c for c in run.cases if c.status in BROKEN],
    )


def benchmark_json(run: RunResults) -> dict[str, Any]:
    """Our raw samples in pytest-benchmark's JSON format, so `pytest-benchmark compare` works on our runs.

    Statistics are computed by pytest-benchmark's own Stats class from the raw samples (seconds).
    """
    from pytest_benchmark.stats import Stats

    try:
        from importlib.metadata import version

        pb_version = version("pytest-benchmark")
    except Exception:  # noqa: BLE001
        pb_version = "unknown"
    benches = []
    for c in run.cases:
        if not c.measured or not c.samples_ns:
            continue
        stats = Stats()
        for s in c.samples_ns:
            stats.update(s / 1e9)
        d = stats.as_dict()
        d["data"] = [s / 1e9 for s in c.samples_ns]
        d["iterations"] = 1
        benches.append({
            "group": f"{c.case.model}-{c.case.precision}-b{c.case.batch}"
                     + (f"-s{c.case.seq}" if c.case.seq is not None else ""),
            "name": f"test_case[{c.case.id}]",
            "fullname": f"harness_suites/matrix/test_matrix.py::test_case[{c.case.id}]",
            "params": {"harness_case": c.case.id}, "param": c.case.id,
            "extra_info": {"runtime": c.case.runtime, "status": c.status, "timing_scope": c.timing_scope,
                           "throughput_sps": c.throughput_sps, "warmup_iters": c.warmup_iters},
            "options": {"disable_gc": False, "timer": "perf_counter_ns", "min_rounds": run.config.get(
                "timing", {}).get("min_iters"), "max_time": None, "warmup": True},
            "stats": d,
        })
    env = run.environment
    return {
        "machine_info": {"node": env.get("hostname"), "processor": env.get("cpu_model"),
                         "machine": env.get("machine"), "python_version": env.get("python"),
                         "cpu": {"brand_raw": env.get("cpu_model"), "count": env.get("cpu_cores_logical")}},
        "commit_info": {"id": (env.get("git") or {}).get("commit"), "dirty": (env.get("git") or {}).get("dirty")},
        "benchmarks": benches, "datetime": run.started_at, "version": pb_version,
    }


def write_outputs(run: RunResults, out_dir: str | Path) -> dict[str, Path]:
    """results.csv, report.html and benchmark.json in `out_dir` (results.json is written by the caller)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "html": out / "report.html", "benchmark": out / "benchmark.json"}
    atomic_write_text(paths["csv"], cases_frame(run).to_csv(index=False))
    atomic_write_text(paths["html"], render_html(run))
    atomic_write_text(paths["benchmark"], json.dumps(benchmark_json(run), indent=1))
    return paths
