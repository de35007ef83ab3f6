"""The nightly workflow on a pool of runners joined as one Ray cluster (.github/workflows/nightly-gate-ray.yml) is
valid YAML, starts a head and workers, gates with --ray, reports exit 3 as "not judged", and every harness command
line it runs parses with the CLI's own parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.cli import _parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gate-ray.yml"


def _doc() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(WORKFLOW.read_text())


def _runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def test_the_pool_workflow_joins_runners_as_one_cluster_and_gates_on_it():
    doc = _doc()
    worker, gate = doc["jobs"]["worker"], doc["jobs"]["gate"]
    assert "self-hosted" in worker["runs-on"] and "self-hosted" in gate["runs-on"]
    assert len(worker["strategy"]["matrix"]["worker"]) >= 2  # a pool: several workers beside the head
    assert 'ray start --address "${{ vars.RAY_HEAD }}:$RAY_PORT"' in _runs(worker) and "--block" in _runs(worker)
    runs = _runs(gate)
    assert runs.index("ray start --head") < runs.index("harness gate main --ray auto") < runs.index("ray stop")
    steps = {s.get("name", ""): s for s in gate["steps"]}
    upload = next(s for s in gate["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    stop = next(s for s in gate["steps"] if "ray stop" in s.get("run", ""))
    assert stop["if"] == "always()"  # the workers' jobs end with the cluster, whatever the gate did
    last = gate["steps"][-1]
    assert last["if"] == "steps.gate.outputs.status != '0'" and "exit 1" in last["run"]
    assert re.search(r"3\) echo \"::error::harness gate: not judged", last["run"])  # 3 is "not judged", never a pass
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") for s in steps.values())


def test_every_harness_command_line_of_the_pool_workflow_parses():
    doc = _doc()
    parser = _parser()
    lines = [line.strip() for job in doc["jobs"].values() for line in _runs(job).splitlines()
             if line.strip().startswith("harness ")]
    assert lines
    for line in lines:
        argv = shlex.split(re.sub(r"\$\{?(\w+)\}?", r"X_\1", line))[1:]
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # argparse's exit on an unknown command or option
            pytest.fail(f"{WORKFLOW.name}: `{line}` does not parse")
        assert args.ray == "auto", line
