"""Verdicts on a terminal: plain text (no Markdown, no HTML entities), the method paragraph only on request."""

from __future__ import annotations

import dataclasses

from gating.gating_synth import make_run

from harness.gating import compare_runs
from harness.report.verdicts import verdicts_markdown, verdicts_text


def _comparison():
    c = compare_runs(make_run(1), make_run(2, scale={"ort-cpu": 1.25}))
    c.records[0] = dataclasses.replace(c.records[0], reason="p99 < 5 ms | was **fine** & <b>bold</b>\nnext")
    return c


def test_terminal_text_has_no_markdown_nor_entities():
    c = _comparison()
    text = verdicts_text(c)
    assert "p99 < 5 ms | was **fine** & <b>bold</b> next" in text  # the reason as written, on one line
    for markup in ("###", "&lt;", "&amp;", "\\|", "| ---", "❌", "`"):
        assert markup not in text, markup
    assert text.splitlines()[3].split() == ["verdict", "case", "metric", "baseline", "current", "change", "ratio",
                                           "bounds", "reason"]
    assert "&lt;" in verdicts_markdown(c)  # the Markdown file keeps its escaping


def test_method_paragraph_only_with_verbose():
    c = _comparison()
    short, long = verdicts_text(c), verdicts_text(c, verbose=True)
    assert c.method not in short and len(short.splitlines()[1]) < 100  # one pointer line, not the paragraph
    assert f"Method: {c.method}." in long and "This gate: " in long
    assert len(verdicts_text(c, only_changes=True).splitlines()) < len(short.splitlines())


def test_markdown_as_text_for_the_gate_check_terminal():
    from harness.report.terminal import markdown_as_text

    md = ("### Gate check: gates median:10%\n\n- false alarms: **1/30 = 3.3%**\n\n"
          "| injected slowdown | power |\n| ---: | ---: |\n| 5% | 40% |\n| 10% | 100% |\n\n`mlp-ort` 0.012 &lt; 1\n")
    text = markdown_as_text(md)
    assert text.splitlines()[0] == "Gate check: gates median:10%"
    assert "- false alarms: 1/30 = 3.3%" in text and "mlp-ort 0.012 < 1" in text
    assert "injected slowdown  power\n5%                 40%\n10%                100%" in text
    for markup in ("###", "**", "`", "|", "---", "&lt;"):
        assert markup not in text, markup


def test_a_scenario_reason_on_the_terminal_is_cut_at_a_word_never_mid_word():
    from types import SimpleNamespace

    from harness.report.terminal import _verdict

    why = ("no default Server latency bound: the 3 single-stream test(s) it would come from were all contended "
           "(1 thread(s), 0.9 core(s) free: the worker's threads waited 53% of their runnable time); give "
           "--server-latency MS, or rerun on a quiet machine")
    line = _verdict("server", "skipped", "", SimpleNamespace(reasons=[], error=why))
    inner = line[line.index("(") + 1:line.rindex(")")]
    head, hint = inner.split(" ...; ")
    assert why.startswith(head) and why[len(head)] == " " and len(inner) <= 160, line
    assert hint == "give --server-latency MS, or rerun on a quiet machine"  # the remedy is never cut
    plain = _verdict("x", "error", "", SimpleNamespace(reasons=[], error="word " * 60))
    assert plain.endswith("word ...)") and len(plain) < 180
    short = _verdict("server", "skipped", "", SimpleNamespace(reasons=[], error="no bound"))
    assert short == "server skipped (no bound)"
