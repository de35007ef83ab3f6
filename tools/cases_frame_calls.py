"""cases_frame calls per report on `harness report`'s path (render_report -> write_outputs), every import site counted:
python tools/cases_frame_calls.py RESULTS.json ...   (PYTHONPATH=<an older tree> for that tree's figure)."""

import sys
import tempfile

import harness.report.render  # noqa: F401 - every module of the report path imported before counting
import harness.report.tables as tables
from harness.results.schema import load_results
from harness.workloads import render_report


def main(paths: list[str]) -> int:
    real, calls = tables.cases_frame, []

    def counted(runs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(runs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("harness") and getattr(module, "cases_frame", None) is real:
            module.cases_frame = counted
    for path in paths:
        calls.clear()
        render_report([load_results(path)], tempfile.mkdtemp())
        print(f"{path}: cases_frame called {len(calls)} times")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
