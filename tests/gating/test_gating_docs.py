"""The nightly workflow and the gating docs (docs/nightly-gating.md, method.md, qualification.md) stay in step
with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import _parser
from harness.gating import load_gate_config

ROOT = Path(__file__).resolve().parents[2]


def test_nightly_workflow_runs_gates_publishes_and_fails():
    yaml = pytest.importorskip("yaml")
    text = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()
    doc = yaml.safe_load(text)
    steps = doc["jobs"]["bench"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    # the gate re-measures the baseline tonight (harness gate), its verdict first in the job summary
    assert "harness run" in runs and "harness gate main" in runs and "GITHUB_STEP_SUMMARY" in runs
    assert "gate.md" in runs and "summary.md" in runs and "harness baseline save" in runs
    assert runs.index("gate/gate.md") < runs.index("summary.md")
    last = steps[-1]
    assert "steps.gate.outputs.status != '0'" in last["if"]  # exit 3 (unjudged) fails the job too
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)
    assert "exit 1" in steps[-1]["run"]
    # every `harness SUBCOMMAND` the workflow calls exists
    commands = set(_parser()._subparsers._group_actions[0].choices)
    for line in runs.splitlines():
        if line.strip().startswith("harness "):
            assert line.split()[1] in commands, line
    cfg = load_gate_config(ROOT / ".github" / "gates.toml")
    assert [str(g) for g in cfg.gates] == ["median:10%", "p99:25%"]


def test_docs_document_gating_and_the_readme_links_them():
    docs = ROOT / "docs"
    pages = {
        "nightly-gating.md": ("harness baseline save", "harness gate main", "harness compare", "harness gate-check",
                              "HARNESS_BASELINE_DIR", "gate-check --nightly",
                              "not_comparable", ".github/workflows/nightly.yml", "method.md#regression-gating"),
        "method.md": ("## Regression gating", "1 + T/2", "least-disturbed block"),
        "qualification.md": ("harness qualify specs/cpu-2core.toml", "certificate.json"),
    }
    readme = (ROOT / "README.md").read_text()
    for page, needles in pages.items():
        text = (docs / page).read_text()
        for needle in needles:
            assert needle in text, f"docs/{page}: {needle}"
        assert f"docs/{page}" in readme, f"README does not link docs/{page}"
