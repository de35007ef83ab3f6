"""Which environment a runtime runs in: the harness's own, or one built from its declared requirements."""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import sysconfig
from dataclasses import dataclass

from harness.runtimes.base import Runtime

MODES = ("auto", "off")


def base_site() -> str:
    """The harness's own site-packages: every environment is layered over it (a .pth file adds it after the
    environment's own packages, so torch, numpy and the harness itself are not installed again)."""
    return sysconfig.get_paths()["purelib"]


@dataclass(frozen=True)
class EnvSpec:
    """An environment by what defines it: the requirement set, the Python version, the platform and the base it
    is layered over. Equal specs share one environment (its `key`), on this machine and on every Ray node."""

    requirements: tuple[str, ...]
    python: str = platform.python_version()
    platform: str = f"{sys.implementation.name}-{sysconfig.get_platform()}"
    base: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(sorted(dict.fromkeys(self.requirements))))
        if not self.base:
            object.__setattr__(self, "base", base_site())

    @property
    def key(self) -> str:
        text = json.dumps({"requirements": self.requirements, "python": self.python, "platform": self.platform,
                           "base": self.base}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return ", ".join(self.requirements)


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def satisfied(requirement: str) -> bool:
    """Is `requirement` installed in this interpreter at a version it allows (the runtimes' own rule)?"""
    from harness.runtimes.base import requirement_satisfied

    return requirement_satisfied(requirement)


def requirements_of(cls: type[Runtime]) -> tuple[str, ...]:
    """What `cls`'s own environment installs: its requirements, the pinned distribution as `DIST==VERSION`."""
    reqs = list(cls.requirements)
    if cls.pinned_version is not None and cls.distribution is not None:
        from packaging.requirements import Requirement

        dist = _canonical(cls.distribution)
        reqs = [r for r in reqs if _canonical(Requirement(r).name) != dist]
        reqs.append(f"{cls.distribution}=={cls.pinned_version}")
    return tuple(reqs)


def environment_for(cls: type[Runtime], mode: str = "auto") -> EnvSpec | None:
    """The environment `cls` runs in, None for the harness's own. `auto`: a pinned version or a runtime that
    always needs its own gets one; another gets one when this interpreter lacks one of its requirements.
    `off`: never (a runtime the harness's environment cannot run is a skip, as before)."""
    if mode == "off":
        return None
    reqs = requirements_of(cls)
    if not reqs:
        return None
    if cls.pinned_version is None and not cls.own_environment and all(satisfied(r) for r in reqs):
        return None
    return EnvSpec(reqs)


def in_process_refusal(runtime: str, mode: str) -> str | None:
    """Why a case of `runtime` cannot run in the harness's own process (--no-isolation), else None."""
    from harness.runtimes import get_runtime

    try:
        spec = environment_for(get_runtime(runtime), mode)
    except Exception:  # noqa: BLE001 - an unknown runtime is the case's own error to report
        return None
    if spec is None:
        return None
    return (f"{runtime} runs in an environment of its own ({spec.label}), which needs the supervised worker: "
            "drop --no-isolation")
