"""Names from stored files shown safely: control and bidi characters visible, CSV formula cells defused."""

from __future__ import annotations

import csv
import io
import unicodedata

import pytest
from gating.gating_synth import ENV, case_result, samples

from harness.display import csv_cell, speed_text, visible
from harness.results.schema import CaseId, RunResults
from harness.results.stored import RunEnvironmentRecord

HIDDEN = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\x00": "\\x00", "\x1b": "\\x1b", "\x7f": "\\x7f",
          "\x85": "\\x85", "\x9b": "\\x9b", "\u200e": "\\u200e", "\u200f": "\\u200f", "\u061c": "\\u061c",
          "\u2028": "\\u2028", **{chr(c): f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}}


@pytest.mark.parametrize("char, shown", HIDDEN.items(), ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_visible_shows_every_hidden_character(char, shown):
    assert visible(f"a{char}b") == f"a{shown}b"


@pytest.mark.parametrize("text", ["mlp", "résumé-β", "模型", "a\\b", "emoji 🚀", "-", ""])
def test_visible_leaves_printable_text_alone(text):
    assert visible(text) == text


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_formula_cells_get_an_apostrophe(start):
    cell = csv_cell(f"{start}HYPERLINK(\"http://evil\")")
    assert cell.startswith("'") and visible(start) in cell


@pytest.mark.parametrize("value", [-1.5, -3, 0.0, "-1.5", "-2e-3", "+7", "-inf", 12, None, True])
def test_numbers_are_not_mangled(value):
    assert csv_cell(value) == value


HOSTILE_NAMES = ['=HYPERLINK("http://x","click")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
                 "\tmlp", "mlp\r\ninjected,row", "ml\x00p", "mlp\u202egnp.exe", "\u2066mlp\u2069"]


def _run(name: str) -> RunResults:
    cases = [case_result(CaseId(name, "ort-cpu", "fp32", 1, None, "cpu"), samples(1.0, 20, 1),
                         reason=f"because {name}"),
             case_result(CaseId(name, "torch-cpu", "fp32", 1, None, "cpu"), samples(2.0, 20, 2))]
    cases[1].accuracy["cosine"] = -0.5  # a genuine negative number in a numeric column
    return RunResults(run_id=f"run {name}", started_at="t", environment=RunEnvironmentRecord.from_dict(dict(ENV)), config={}, cases=cases,
                      complete=True)


def _no_raw_hidden(text: str, name: str) -> None:
    for char in set(name) & set(HIDDEN) - {"\n"}:
        assert char not in text, f"{char!r} reached the output"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_model_names_through_every_output(tmp_path, name):
    from harness.report.render import write_outputs
    from harness.report.terminal import terminal_table

    paths = write_outputs(_run(name), tmp_path)
    raw_csv = paths["csv"].read_text()
    rows = list(csv.DictReader(io.StringIO(raw_csv)))
    assert len(rows) == 2  # a CR or LF in a name does not split a row
    for row in rows:
        assert row["model"] == csv_cell(name) and visible(name) in row["model"]
        assert row["model"][0] not in "=+-@\t\r"
    assert [float(r["cosine"]) for r in rows if r["cosine"]] == [-0.5]
    assert not any(v.startswith(("=", "+", "@")) for r in rows for v in r.values())
    _no_raw_hidden(raw_csv, name)

    md = paths["markdown"].read_text()
    _no_raw_hidden(md, name)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") - line.count("\\|") for line in table}) == 1  # every row has the same cells
    assert sum(visible(name).replace("|", "\\|") in line for line in table) == 2

    html = paths["html"].read_text()
    _no_raw_hidden(html, name)
    if "\r" in name:
        assert "mlp\\r\\ninjected" in html

    term = terminal_table(_run(name))
    _no_raw_hidden(term, name)
    assert len(term.splitlines()) == 3  # header + two cases


def test_verdict_markdown_and_the_error_line_show_hidden_characters(tmp_path, capsys):
    from harness.cli import main
    from harness.gating import compare_runs, load_gate_config
    from harness.report.verdicts import verdicts_markdown

    name = "mlp\r\u202e"
    md = verdicts_markdown(compare_runs([_run(name)], _run(name), load_gate_config(None, ())))
    _no_raw_hidden(md, name)
    assert "mlp\\r\\u202e" in md
    bad = tmp_path / "bad\r\u202e.json"
    bad.write_text("{")
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad\\r\\u202e.json" in err and "\u202e" not in err


def test_visible_is_one_line_for_any_string():
    every = "".join(chr(c) for c in range(0x3000))
    shown = visible(every)
    assert len(shown.splitlines()) == 1
    assert not [c for c in shown if unicodedata.category(c) == "Cc" or unicodedata.bidirectional(c) in
                ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "LRM", "RLM", "ALM")]


@pytest.mark.parametrize("ratio, text, times", [
    (1.1, "+10.0%", "1.1x slower"), (0.9, "-10.0%", "1.1x faster"), (1 / 7.5, "7.5x faster", "7.5x faster"),
    (79.739, "79.7x slower", "79.7x slower"), (2.0, "2.0x slower", "2.0x slower"), (1.0, "+0.0%", "1.0x (same)"),
    (None, "", ""), (0.0, "", ""), (float("inf"), "", "")])
def test_speed_text_uses_times_beyond_2x(ratio, text, times):
    assert speed_text(ratio) == text
    assert speed_text(ratio, always_times=True) == times
