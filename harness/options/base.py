"""The option primitives: OptionDef (one `--NAME`), OptionGroup (the options of one concern), add_options."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Parser = Callable[[Any, str], Any]  # (raw value, option name) -> typed value; UsageError when invalid


@dataclass(frozen=True)
class OptionDef:
    """One run option: the CLI spells it `--NAME`, pytest `--harness-NAME`.

    `field`: the RunConfig field it sets, by name (RunConfig.replace routes it to its section; "timing.X": a
    TimingPolicy field); `fields`: several fields set in order from the tuple `parse` returns (--opset's bounds);
    `parse(text, name)`: its value, or a UsageError; `quick`: the text used with --quick when the option is not
    given; `default`: the text used when it is not given (a command's own default; None: the RunConfig's). An
    option without `field` or `fields` is read by parse_run_options itself (the matrix, --out and the gating
    options)."""

    name: str
    help: str
    metavar: str | None = None
    flag: bool = False  # a switch without a value
    multiple: bool = False  # may be given several times
    bare: str | None = None  # the value when the option is given without one (`--history` alone); None: required
    field: str | None = None
    fields: tuple[str, ...] = ()
    parse: Parser | None = None
    quick: str | None = None
    default: str | None = None
    short: str | None = None  # a one-letter CLI alias (`-k`), never for pytest

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def argparse_help(self) -> str:
        """The help text escaped for argparse (and so pytest), which %-formats it."""
        return self.help.replace("%", "%%")


@dataclass(frozen=True)
class OptionGroup:
    """The options of one concern (Polygraphy's argument groups): each command and the pytest plugin compose
    the groups they need; `with_defaults` gives a command its own defaults without a copy of the options."""

    name: str
    title: str
    options: tuple[OptionDef, ...]

    def with_defaults(self, **texts: str) -> OptionGroup:
        """The group with other default texts (by option dest), e.g. gate-check's models="mlp"."""
        unknown = set(texts) - {o.dest for o in self.options}
        assert not unknown, f"{self.name}: no options {unknown}"
        return dataclasses.replace(self, options=tuple(
            dataclasses.replace(o, default=texts[o.dest]) if o.dest in texts else o for o in self.options))

    def only(self, *names: str) -> OptionGroup:
        """The group with only these options (by dest), e.g. a command that needs the threads but no timing."""
        unknown = set(names) - {o.dest for o in self.options}
        assert not unknown, f"{self.name}: no options {unknown}"  # an option that moved to another group
        return dataclasses.replace(self, options=tuple(o for o in self.options if o.dest in names))


def add_options(add: Callable[..., Any], groups: tuple[OptionGroup, ...], prefix: str = "--") -> None:
    """Declare the groups' options through `add(group, *flags, **argparse_kwargs)` (argparse or pytest)."""
    for g in groups:
        for o in g.options:
            flags = [f"{prefix}{o.name}"] + ([o.short] if o.short and prefix == "--" else [])
            dest = o.dest if prefix == "--" else f"harness_{o.dest}"
            if o.flag:
                kw: dict[str, Any] = {"action": "store_true", "default": False}
            elif o.multiple:
                kw = {"action": "append", "default": None, "metavar": o.metavar}
            elif o.bare is not None:
                kw = {"nargs": "?", "const": o.bare, "default": None, "metavar": (o.metavar or "VALUE").strip("[]")}
            else:
                kw = {"default": None, "metavar": o.metavar}
            add(g, *flags, dest=dest, help=o.argparse_help, **kw)

