"""Gate strings and the gate config file: parsing, overrides, clear errors."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.gating import Gate, GateConfig, load_gate_config, parse_gate


@pytest.mark.parametrize("text, gate", [("median:10%", Gate("median", 0.10)), ("p99:20%", Gate("p99", 0.20)),
                                        ("P50:5%", Gate("median", 0.05)), ("p95:0.15", Gate("p95", 0.15)),
                                        (" p90 : 12.5 % ", Gate("p90", 0.125))])
def test_parse_gate(text, gate):
    assert parse_gate(text) == gate
    assert parse_gate(str(gate)) == gate


@pytest.mark.parametrize("text, message", [("median", "expected STATISTIC:PERCENT"),
                                           ("mean:10%", "unknown statistic 'mean'"),
                                           ("median:10", "as a percentage (10%)"),
                                           ("median:0%", "above 0%"), ("median:-5%", "expected")])
def test_bad_gates(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_gate(text)


def test_defaults_and_cli_gates():
    assert [str(g) for g in GateConfig().gates] == ["median:10%"]
    cfg = load_gate_config(None, ["median:5%", "p99:20%"])
    assert [str(g) for g in cfg.gates] == ["median:5%", "p99:20%"]
    with pytest.raises(UsageError, match="median given twice"):
        load_gate_config(None, ["median:5%", "median:10%"])


def test_config_file_with_overrides(tmp_path):
    f = tmp_path / "gates.toml"
    f.write_text('gates = ["median:8%", "p99:30%"]\nconfidence = 0.995\nresamples = 2000\nrun_sigma = 0.04\n'
                 '[models.resnet18]\ngates = ["median:4%"]\n')
    cfg = load_gate_config(f)
    assert [str(g) for g in cfg.gates_for("mlp")] == ["median:8%", "p99:30%"]
    assert [str(g) for g in cfg.gates_for("resnet18")] == ["median:4%"]
    assert cfg.confidence == 0.995 and cfg.resamples == 2000 and cfg.run_sigma == 0.04
    cli = load_gate_config(f, ["median:20%"])  # --gate replaces the file's default gates, keeps overrides
    assert [str(g) for g in cli.gates_for("mlp")] == ["median:20%"]
    assert [str(g) for g in cli.gates_for("resnet18")] == ["median:4%"]


@pytest.mark.parametrize("text, message", [
    ('gate = ["median:10%"]', "unknown key(s) gate"),
    ('gates = "median:10%"', "must be a list of strings"),
    ('confidence = "high"', "confidence = 'high' is not a number"),
    ("confidence = 1.5", "must lie between 0.5 and 1"),
    ("run_sigma = 2", "run_sigma 2.0 must lie between 0 and 1"),
    ('[models.mlp]\nthreshold = 3', "takes exactly one key"),
    ('gates = ["median:10"]', "as a percentage"),
    ("gates = [", "not valid TOML"),
])
def test_bad_config_files_name_the_file(tmp_path, text, message):
    f = tmp_path / "gates.toml"
    f.write_text(text)
    with pytest.raises(UsageError) as info:
        load_gate_config(f)
    assert str(f) in str(info.value) and message in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(UsageError, match="nope.toml: no such gate config"):
        load_gate_config(tmp_path / "nope.toml")
