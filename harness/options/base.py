"""The option primitives: OptionDef (one `--NAME`), OptionGroup (the options of one concern), add_options, and
the old spellings that keep working for one release (OldSpelling, deprecated)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
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
    required: bool = False  # the CLI refuses to run without it (argparse's own message), never for pytest
    # old CLI spellings (`--seed` of `--traffic-seed`): they still work for one release, each use saying the new
    # spelling in one line on stderr (OldSpelling); never for pytest, never in the help
    old: tuple[str, ...] = ()
    # a positional argument of a command (`harness compare BASELINE CURRENT`), `nargs` as argparse's; never for pytest
    positional: bool = False
    nargs: str | None = None

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

    def narrowed(self, dest: str, **changes: Any) -> OptionGroup:
        """The group with one option changed (by dest): a command that takes one value where another takes a list
        (recommend's one --model), or routes it to a field of its own."""
        assert dest in {o.dest for o in self.options}, f"{self.name}: no option {dest}"
        return dataclasses.replace(self, options=tuple(
            dataclasses.replace(o, **changes) if o.dest == dest else o for o in self.options))

    def only(self, *names: str) -> OptionGroup:
        """The group with only these options (by dest), e.g. a command that needs the threads but no timing."""
        unknown = set(names) - {o.dest for o in self.options}
        assert not unknown, f"{self.name}: no options {unknown}"  # an option that moved to another group
        return dataclasses.replace(self, options=tuple(o for o in self.options if o.dest in names))


def add_options(add: Callable[..., Any], groups: tuple[OptionGroup, ...], prefix: str = "--") -> None:
    """Declare the groups' options through `add(group, *flags, **argparse_kwargs)` (argparse or pytest).

    An option with `parse` but no RunConfig field is a command's own (compare's --markdown, history's --last): the
    CLI's parser parses it (argparse `type`; its default text parsed alike), a bad value one line and exit 2.
    Positional arguments, required options and old spellings are the CLI's only."""
    cli = prefix == "--"
    for g in groups:
        for o in g.options:
            typed = {"type": argparse_type(o)} if o.parse is not None and o.field is None and not o.fields else {}
            if o.positional:
                if cli:
                    add(g, o.dest, help=o.argparse_help, **_positional_kwargs(o), **typed)
                continue
            flags = [f"{prefix}{o.name}"] + ([o.short] if o.short and cli else [])
            kw = _kwargs(o)
            if typed and not o.flag:
                kw.update(typed, default=o.default)  # argparse parses a default text with the type too
            if cli and o.required:
                kw["required"] = True
            add(g, *flags, dest=o.dest if cli else f"harness_{o.dest}", help=o.argparse_help, **kw)
            for old in o.old if cli else ():
                kind = "store_true" if o.flag else "append" if o.multiple else "store"
                add(g, old, dest=o.dest, help=argparse.SUPPRESS, action=OldSpelling, new=flags[0], kind=kind,
                    **({"metavar": o.metavar, **typed} if kind != "store_true" else {}))


def _kwargs(o: OptionDef) -> dict[str, Any]:
    if o.flag:
        return {"action": "store_true", "default": False}
    if o.multiple:
        return {"action": "append", "default": None, "metavar": o.metavar}
    if o.bare is not None:
        return {"nargs": "?", "const": o.bare, "default": None, "metavar": (o.metavar or "VALUE").strip("[]")}
    return {"default": None, "metavar": o.metavar}


def _positional_kwargs(o: OptionDef) -> dict[str, Any]:
    kw: dict[str, Any] = {"nargs": o.nargs} if o.nargs else {}
    if o.metavar:
        kw["metavar"] = o.metavar
    if o.default is not None:
        kw["default"] = o.default
    return kw


def argparse_type(o: OptionDef) -> Callable[[str], Any]:
    """`o.parse` as an argparse type: its UsageError becomes argparse's error (one line naming the option, exit 2)."""
    from harness.errors import UsageError

    def convert(text: str) -> Any:
        try:
            return o.parse(text, o.name)  # type: ignore[misc]
        except UsageError as exc:  # it names the option already: the CLI's parser drops argparse's "argument X: "
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = o.metavar or o.name  # argparse's "invalid NAME value" for anything else
    return convert


def deprecated(old: str, new: str) -> None:
    """The one line an old spelling costs: on stderr, naming the new spelling (the old goes in the next release)."""
    print(f"harness: {old} is deprecated and goes in the next release: {new}", file=sys.stderr, flush=True)


class OldSpelling(argparse.Action):
    """An option's old spelling (`compare --json FILE`, now `--json-out FILE`): it sets the new option's value and
    says the new spelling on stderr (deprecated). `kind`: store, store_true or append, as the new option."""

    def __init__(self, option_strings: list[str], dest: str, new: str, kind: str = "store", **kw: Any) -> None:
        if kind == "store_true":
            kw.update(nargs=0, default=kw.get("default", False))
        super().__init__(option_strings, dest, **kw)
        self.new, self.kind = new, kind

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        deprecated(str(option_string), f"use {self.new}")
        if self.kind == "store_true":
            values = True
        elif self.kind == "append":
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)

