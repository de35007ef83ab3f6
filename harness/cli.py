"""`harness run | report | models | runtimes | env | cache`: thin commands over the library and the suites.

Exit status: 0 every case passed (or was skipped), 1 a case failed its drift check, errored, crashed, timed
out or hit the memory cap, 2 usage error (bad option, unknown name, unreadable results), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Sequence

from harness.config import OPTIONS, RunConfig
from harness.errors import HarnessError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Benchmark and conformance harness for ML inference.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the matrix (pytest on the bundled suites) and write results + report",
                         description="Run the matrix. Arguments after `--` go to pytest unchanged.")
    for o in OPTIONS:
        if o.flag:
            run.add_argument(f"--{o.name}", action="store_true", dest=o.dest, help=o.help)
        elif o.multiple:
            run.add_argument(f"--{o.name}", action="append", dest=o.dest, metavar=o.metavar, help=o.help)
        else:
            run.add_argument(f"--{o.name}", dest=o.dest, metavar=o.metavar, help=o.help)
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then extra pytest arguments")

    rep = sub.add_parser("report", help="render report.html, summary.md, results.csv (and benchmark.json) from "
                                        "stored results; several runs merge side by side",
                         description="Render from stored results. Several results files (other machines, other "
                                     "thread settings) become columns labelled by machine, never averaged.")
    rep.add_argument("results", nargs="+", help="results.json files (or folders holding one)")
    rep.add_argument("-o", "--out", help="output folder (default: the results file's folder; required with "
                                         "several results files)")

    sub.add_parser("models", help="list the model zoo (and models added by plugins)")
    sub.add_parser("runtimes", help="list runtimes and whether each can run here (with the reason)")
    sub.add_parser("env", help="print the environment snapshot recorded with every run (JSON)")

    cache = sub.add_parser("cache", help="list or clear the artifact cache (ONNX exports, trained weights)")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    for action, text in (("ls", "list entries: kind, label, key, size, age, path"),
                         ("clear", "remove entries (safe while another run uses the cache: see the README)")):
        a = cache_sub.add_parser(action, help=text)
        a.add_argument("--cache-dir", help="cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/harness)")
        a.add_argument("--kind", help="only entries of this kind (onnx, weights, ...)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "report": cmd_report, "models": cmd_models, "runtimes": cmd_runtimes,
                "env": cmd_env, "cache": cmd_cache}[args.command](args)
    except UsageError as exc:
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HarnessError as exc:
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def pytest_args_for(args: argparse.Namespace, config: RunConfig) -> list[str]:
    """The pytest command line equivalent to `harness run` options (every option has a --harness- twin)."""
    from harness_suites import SUITES_DIR

    out = [str(SUITES_DIR), "-c", str(SUITES_DIR / "pytest.ini"), "--rootdir", str(SUITES_DIR), "-q"]
    if not any(ep.name == "harness" for ep in entry_points(group="pytest11")):
        out += ["-p", "harness.pytest_plugin"]  # running from a source tree without installing
    for o in OPTIONS:
        value = getattr(args, o.dest)
        if o.flag and value:
            out.append(f"--harness-{o.name}")
        elif o.multiple and value:
            out += [f"--harness-{o.name}={v}" for v in value]
        elif not o.flag and value is not None and o.name != "out":
            out.append(f"--harness-{o.name}={value}")
    out.append(f"--harness-out={config.out_dir}")
    extra = list(args.pytest_args or [])
    return out + (extra[1:] if extra[:1] == ["--"] else extra)


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    config = RunConfig.from_options({o.dest: getattr(args, o.dest) for o in OPTIONS})
    if not config.cases():
        raise UsageError("the matrix is empty: no model matches (check --models / --quick)")
    code = pytest.main(pytest_args_for(args, config))
    if code == pytest.ExitCode.OK:
        return EXIT_OK
    if code == pytest.ExitCode.INTERRUPTED:
        return EXIT_INTERRUPTED
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED):
        return EXIT_USAGE
    return EXIT_FAILED


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import write_outputs
    from harness.results.schema import load_results

    runs = [load_results(p) for p in args.results]
    if args.out:
        out = Path(args.out)
    elif len(runs) > 1:
        raise UsageError("several results files: say where the merged report goes with -o DIR")
    else:
        src = Path(args.results[0])
        out = src if src.is_dir() else src.parent
    for name, path in write_outputs(runs, out).items():
        print(f"{name:>9}: {path}")
    for path, run in zip(args.results, runs):
        if not run.complete:
            print(f"note: {path}: this run is incomplete (interrupted or killed): the report shows the cases "
                  "that finished")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from harness.model import all_models

    for s in all_models():
        inputs = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in s.inputs)
        print(f"{s.name:<14} {s.task:<15} tags={','.join(sorted(s.tags)) or '-':<16} {inputs}")
        if s.description:
            print(f"{'':<14} {s.description}")
        if s.unavailable_reason():
            print(f"{'':<14} unavailable here (its cases are skipped): {s.unavailable_reason()}")
    return EXIT_OK


def cmd_runtimes(args: argparse.Namespace) -> int:
    from harness.runtimes import get_runtime, runtime_names

    for name in runtime_names():
        cls = get_runtime(name)
        avail = cls.availability()
        precisions = ",".join(sorted(p.value for p in cls.precisions))
        state = "available" if avail else f"unavailable: {avail.reason}"
        print(f"{name:<12} device={cls.device:<5} precisions={precisions:<16} {state}")
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from harness.measure.timer import measure_overhead
    from harness.results.environment import default_threads, snapshot

    env = snapshot(threads=default_threads())
    env["harness_overhead"] = measure_overhead()
    print(json.dumps(env, indent=2, default=str))
    return EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    from harness.artifacts.cache import ArtifactCache

    cache = ArtifactCache(Path(args.cache_dir).expanduser() if args.cache_dir else None)
    if args.cache_command == "clear":
        removed, freed = cache.clear(args.kind)
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({_size(freed)}) from {cache.root}")
        return EXIT_OK
    entries = cache.list(args.kind)
    if not entries:
        print(f"{cache.root}: no cache entries" + (f" of kind {args.kind!r}" if args.kind else ""))
        return EXIT_OK
    print(f"{'KIND':<10} {'LABEL':<22} {'KEY':<16} {'SIZE':>9} {'AGE':>7}  PATH")
    for e in entries:
        print(f"{e.kind:<10} {e.label[:22]:<22} {e.key[:16]:<16} {_size(e.size_bytes):>9} "
              f"{_age(e.age_s):>7}  {e.path}")
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {_size(total)} in {cache.root}")
    return EXIT_OK


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"


if __name__ == "__main__":
    sys.exit(main())
