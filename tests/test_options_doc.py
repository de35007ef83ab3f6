"""docs/options.md is generated from OPTIONS and kept in step with it."""

from __future__ import annotations

from harness.options import OPTIONS
from harness.options_doc import DEFAULT_PATH, main, option_row, render_options_markdown


def test_options_page_is_not_stale():
    assert DEFAULT_PATH.read_text() == render_options_markdown(), (
        "docs/options.md is stale: regenerate it with `python -m harness.options_doc`")


def test_every_option_has_one_row_with_both_spellings_metavar_and_help():
    text = render_options_markdown()
    for o in OPTIONS:
        rows = [line for line in text.splitlines() if line.startswith(f"| `--{o.name}` |")]
        assert len(rows) == 1, o.name
        assert f"`--harness-{o.name}`" in rows[0] and o.help.replace("|", "\\|") in rows[0]
        assert ("switch" if o.flag else o.metavar.replace("|", "\\|")) in rows[0]


def test_pipes_in_metavar_or_help_do_not_break_the_table():
    from harness.options import OptionDef

    row = option_row(OptionDef("baseline", "a | b", "NAME|PATH", multiple=True))
    assert row == "| `--baseline` | `--harness-baseline` | NAME\\|PATH (repeatable) | a \\| b |"


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    page = tmp_path / "options.md"
    assert main([str(page), "--check"]) == 1 and "stale" in capsys.readouterr().err
    assert main([str(page)]) == 0 and main([str(page), "--check"]) == 0
    assert page.read_text() == render_options_markdown()
