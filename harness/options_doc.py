"""docs/options.md, generated from the run options in harness/options/ (`python -m harness.options_doc`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from harness.options import RUN_GROUPS, OptionDef, OptionGroup

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "docs" / "options.md"

HEADER = """\
# Run options

<!-- Generated from the option groups in harness/options/ by `python -m harness.options_doc`: do not edit by hand
(tests/report/test_options_doc.py fails when this page is stale). -->

`harness run` is a thin wrapper over `pytest` on the bundled suites: every option below has a pytest twin with
the `--harness-` prefix (registered by the plugin through the `pytest11` entry point), parsed and validated by
the same code (`parse_run_options` in `harness/options/parse.py`). An unknown model, runtime or precision is a usage error
that lists the valid names. `harness run --help` and `pytest --help` print the same text.

```bash
harness run --quick --threads 1 --out /tmp/one-thread
pytest suites --harness-quick --harness-threads=1 --harness-out=/tmp/one-thread   # the same run through pytest
```

The options come in groups, one module per concern under `harness/options/`; `harness conform` and
`harness gate-check` compose some of the same groups with their own defaults. A workload owns its groups
(`harness/options/workloads/`): the forward workload the deployment variants, `--settle`, `--profile`,
`--localize` and the LoadGen scenarios; generate, conform and ab theirs. An option of a group that another
workload owns is a usage error (exit 2) naming the option and its workload, e.g. `--workload generate --variants
opt=basic`, never silently ignored.
"""
TABLE = "| `harness run` | pytest | value | meaning |\n| --- | --- | --- | --- |\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def option_row(o: OptionDef) -> str:
    """One table row: CLI spelling, pytest spelling, metavar (or `switch`), help."""
    value = "switch" if o.flag else _cell(o.metavar or "VALUE")
    if o.multiple:
        value += " (repeatable)"
    if o.bare is not None:
        value += " (the value may be left out)"
    return f"| `--{o.name}` | `--harness-{o.name}` | {value} | {_cell(o.help)} |"


def render_options_markdown(groups: Iterable[OptionGroup] = RUN_GROUPS) -> str:
    """The whole options page as Markdown: a table per option group, one row per option in definition order."""
    return HEADER + "".join(f"\n## {g.title[:1].upper()}{g.title[1:]}\n\n" + TABLE
                            + "\n".join(option_row(o) for o in g.options) + "\n" for g in groups)


def main(argv: list[str] | None = None) -> int:
    """Write docs/options.md (or the path given); `--check` exits 1 when the file differs instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    path = Path(args[0]) if args else DEFAULT_PATH
    text = render_options_markdown()
    if check:
        current = path.read_text() if path.is_file() else ""
        if current != text:
            print(f"{path}: stale; regenerate with: python -m harness.options_doc", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
