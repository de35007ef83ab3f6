"""Per-case detection settings for `harness history changes --settings FILE` (TOML): defaults, then the entries whose
case-id pattern matches, in file order (as Mozilla's Perfherder sets a detection technique per test)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from harness.history.changes import Settings

# file key -> (Settings field, type, conversion): min_change is in percent, like --min-change
KEYS: dict[str, tuple[str, type, Any]] = {
    "max_pvalue": ("max_pvalue", float, float),
    "min_change": ("min_magnitude", float, lambda v: float(v) / 100.0),
    "min_segment": ("min_size", int, int),
    "noise": ("noise", str, str),
    "drift": ("drift", bool, bool),
    "modes": ("modes", bool, bool),
    "spread": ("spread", bool, bool),
}
EXAMPLE = '''[defaults]            # every case (over the built-in defaults and --max-pvalue / --min-change)
min_change = 2        # percent

[[case]]              # then each entry whose pattern matches the case id, in file order
match = "*-ort-cpu-*" # fnmatch pattern(s): a string or a list
noise = "iid"         # auto (AR(1) + random walk, fitted) | iid
max_pvalue = 1e-5
drift = false
'''


class SettingsError(ValueError):
    """A settings file that cannot be used (the message names the file, the entry and what to do)."""


@dataclass(frozen=True)
class CaseSettings:
    """The settings of each case: `base`, then each (patterns, overrides) rule whose pattern matches, in order."""

    base: Settings = Settings()
    rules: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = ()

    def for_case(self, case: str) -> Settings:
        s = self.base
        for patterns, overrides in self.rules:
            if any(fnmatchcase(case, p) for p in patterns):
                s = replace(s, **overrides)
        return s


def _overrides(table: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key == "match":
            continue
        if key not in KEYS:
            raise SettingsError(f"{where}: unknown setting {key!r} (known: {', '.join(KEYS)})")
        name, kind, convert = KEYS[key]
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise SettingsError(f"{where}: {key} = {value!r}: a {kind.__name__}")
        out[name] = convert(value)
    return out


def load_settings(path: str | Path | None, base: Settings | None = None) -> CaseSettings:
    """The per-case settings of the TOML file at `path` (None: `base` for every case). Its [defaults] table
    applies to every case over `base`; each [[case]] entry (`match`: a pattern or a list of fnmatch patterns
    of case ids) over those, in file order. Keys: max_pvalue, min_change (percent), min_segment, noise ("auto"
    | "iid"), drift, modes, spread. A bad file is a SettingsError naming the file and the entry."""
    base = base or Settings()
    if path is None:
        return CaseSettings(base)
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the settings: {exc}") from None
    unknown = set(data) - {"defaults", "case"}
    if unknown:
        raise SettingsError(f"{path}: unknown table(s) {', '.join(sorted(unknown))} (use [defaults] and [[case]])")
    try:
        base = replace(base, **_overrides(data.get("defaults", {}), f"{path} [defaults]"))
        rules = []
        for i, entry in enumerate(data.get("case", [])):
            where = f"{path} [[case]] #{i + 1}"
            if not isinstance(entry, dict):
                raise SettingsError(f"{where}: a table")
            match = entry.get("match")
            patterns = (match,) if isinstance(match, str) else tuple(match) if isinstance(match, list) else ()
            if not patterns or not all(isinstance(p, str) and p for p in patterns):
                raise SettingsError(f'{where}: needs match = "PATTERN" (or a list of fnmatch patterns of case ids)')
            overrides = _overrides(entry, where)
            replace(base, **overrides)  # validated now, not at the first matching case
            rules.append((patterns, overrides))
    except ValueError as exc:
        if isinstance(exc, SettingsError):
            raise
        raise SettingsError(f"{path}: {exc}") from None
    return CaseSettings(base, tuple(rules))


def describe(settings: Settings) -> dict[str, Any]:
    """The settings as the file spells them (for --json and messages)."""
    out = {}
    for key, (name, _kind, _convert) in KEYS.items():
        value = getattr(settings, name)
        out[key] = value * 100.0 if key == "min_change" else value
    return out

