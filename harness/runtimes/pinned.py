"""`NAME@VERSION`: a runtime with its distribution pinned to one release, run in an environment of its own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from harness.errors import UsageError
from harness.runtimes.base import Availability, Runtime

_NAME = re.compile(r"^(?P<base>[^@]+)@(?P<version>[^@]+)$")
_DIST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")


def canonical_dist(name: str) -> str:
    """A distribution's canonical name (PEP 503: onnxruntime_gpu == onnxruntime-gpu)."""
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def same_release(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """The same distribution at the same version (1.30 == 1.30.0): `{"distribution": ..., "version": ...}`, as
    results record a runtime's provider (harness.results.environment)."""
    from packaging.version import InvalidVersion, Version

    if canonical_dist(a["distribution"]) != canonical_dist(b["distribution"]):
        return False
    try:
        return Version(a["version"]) == Version(b["version"])
    except InvalidVersion:
        return a["version"] == b["version"]


def split_pin(name: str) -> tuple[str, str | None]:
    """(`base`, `version`) of `NAME@VERSION`; (name, None) for a plain name."""
    m = _NAME.match(name)
    return (m.group("base"), m.group("version")) if m else (name, None)


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def pinned_runtime(base: type[Runtime], version: str) -> type[Runtime]:
    """`base` with `base.distribution` pinned to `version` (or, for `DIST==VERSION`, the distribution DIST that
    provides the same module: the nightly gate's side A on the build the baseline ran): its requirements say
    `DIST==VERSION`, and it is available only where the interpreter really imports that release (its own
    environment)."""
    from packaging.version import InvalidVersion, Version

    if base.distribution is None:
        raise UsageError(f"runtime {base.name!r} has no package to pin a version of (it runs on the harness's own "
                         f"dependencies); drop @{version}")
    dist = base.distribution
    if "==" in version:  # NAME@DIST==VERSION: another build of the runtime's module (ort-cpu@onnxruntime-gpu==1.30.0)
        dist, version = (part.strip() for part in version.split("==", 1))
        if not _DIST.match(dist):
            raise UsageError(f"runtime {base.name}@{dist}=={version}: {dist!r} is not a distribution name")
    try:
        Version(version)
    except InvalidVersion:
        raise UsageError(f"runtime {base.name}@{version}: {version!r} is not a version (e.g. {base.name}@1.20.0)") \
            from None
    name = f"{base.name}@{version}" if dist == base.distribution else f"{base.name}@{dist}=={version}"

    @classmethod  # type: ignore[misc]
    def availability(cls: type[Runtime]) -> Availability:
        verdict = base.availability.__func__(cls)  # type: ignore[attr-defined]
        if not verdict:
            return verdict
        try:
            have = base.library_version() or metadata.version(dist)
        except metadata.PackageNotFoundError:
            return Availability(False, f"{name}: {dist} is not installed in this interpreter")
        if not _same_version(have, version):
            return Availability(False, f"{name}: this interpreter imports {dist} {have}, not {version} (it runs in "
                                       "an environment of its own: not with --envs off or --no-isolation)")
        return Availability(True)

    return type(f"{base.__name__}At{re.sub(r'[^0-9A-Za-z]', '_', version)}", (base,), {
        "name": name, "pinned_version": version, "availability": availability, "distribution": dist,
        "description": f"{base.description or base.name}; {dist} {version} in its own environment"})


def resolve(name: str, lookup: Any) -> type[Runtime] | None:
    """The pinned runtime `NAME@VERSION` asks for (built on `lookup(NAME)`), else None."""
    base, version = split_pin(name)
    if version is None:
        return None
    return pinned_runtime(lookup(base), version)
