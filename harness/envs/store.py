"""EnvStore: environments under the cache's envs/ folder, one per key, built under a lock, checked on use."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.envs.spec import EnvSpec
from harness.results.stored import EnvironmentRecord

MANIFEST = "harness-env.json"
BASE_PTH = "_harness_base.pth"
BUILD_TIMEOUT_VAR = "HARNESS_ENV_BUILD_TIMEOUT"
DEFAULT_BUILD_TIMEOUT_S = 1800.0


def build_timeout_s() -> float:
    """$HARNESS_ENV_BUILD_TIMEOUT (seconds, default 1800), read where a build runs, never at import: a malformed
    value fails that build with one line naming the variable, not every command."""
    text = os.environ.get(BUILD_TIMEOUT_VAR, "").strip()
    if not text:
        return DEFAULT_BUILD_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise EnvBuildError(f"${BUILD_TIMEOUT_VAR}={text!r}: expected a positive number of seconds "
                            f"(default {DEFAULT_BUILD_TIMEOUT_S:g})")
    return value


HELD = ("torch",)  # packages an environment takes from the base at the base's version (a constraint when built)


def _held(requirements: tuple[str, ...]) -> list[str]:
    """The HELD packages installed in the base and not asked for by `requirements` (torch-cpu@2.12.0's own
    environment asks for torch==2.12.0: that one is not held at the base's release)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    asked = {canonicalize_name(Requirement(r).name) for r in requirements}
    return [name for name in HELD if _installed(name) and canonicalize_name(name) not in asked]


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


class EnvBuildError(Exception):
    """An environment could not be built: one line naming the requirements and the installer's last line."""


@dataclass(frozen=True)
class RuntimeEnv:
    """A built environment: its folder and manifest (what it was built from, every package it installed)."""

    path: Path
    manifest: dict[str, Any]

    @property
    def key(self) -> str:
        return str(self.manifest["key"])

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def packages(self) -> dict[str, str]:
        return dict(self.manifest.get("packages", {}))

    def record(self) -> EnvironmentRecord:
        """What a case's results say of the environment it ran in (CaseResult.environment): with `providers`, the
        distribution this environment installed for each runtime module it provides (its own packages win over
        the harness's; a module it does not provide comes from the harness's environment, as the run records)."""
        m = self.manifest
        return EnvironmentRecord(key=m["key"], requirements=list(m["requirements"]), python=m["python"],
                                 packages=self.packages, providers=_providers(self.path))


_PROVIDERS: dict[Path, dict[str, dict[str, str]]] = {}


def _providers(path: Path) -> dict[str, dict[str, str]]:
    """site_providers of an environment's own site-packages (read once per process and environment)."""
    if path not in _PROVIDERS:
        from harness.results.environment import site_providers

        _PROVIDERS[path] = {k: v for site in sorted(path.glob("lib/python*/site-packages"))
                            for k, v in site_providers(site).items()}
    return _PROVIDERS[path]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[-1][:400]


def _pip_supports_python_option() -> bool:
    """pip >= 22.3 installs into another interpreter (`pip --python`): no pip in each environment."""
    try:
        major, minor = (int(x) for x in metadata.version("pip").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (22, 3)


class EnvStore:
    """The environments of one harness cache (`CACHE/envs/KEY`)."""

    def __init__(self, cache_dir: Path | str) -> None:
        self.root = Path(cache_dir) / "envs"

    # ------------------------------------------------------------------ use
    def ensure(self, spec: EnvSpec, *, wheels: Path | None = None,
               progress: Callable[[str], None] = lambda line: None, who: str = "") -> RuntimeEnv:
        """The environment of `spec`, built first when missing or broken (a deleted interpreter, a half-built
        folder, another base); raises EnvBuildError with the installer's last line when it cannot be built."""
        from harness.artifacts.cache import writable_dir

        writable_dir(self.root)  # CacheDirError naming the folder, before the lock file is opened in it
        build_timeout_s()  # a malformed $HARNESS_ENV_BUILD_TIMEOUT: one line, before anything is built
        path = self.root / spec.key
        label = f"{who} [{spec.label}]" if who else f"[{spec.label}]"
        with open(self.root / f"{spec.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build per key, also across processes (Ray shards, xdist)
            env, problem = self._check(path, spec)
            if env is not None:
                os.utime(path / MANIFEST)  # last used
                progress(f"environment {spec.key} for {label}: reused")
                return env
            if problem:
                progress(f"environment {spec.key} for {label}: {problem}; rebuilding")
            progress(f"environment {spec.key} for {label}: building ...")
            t0 = time.monotonic()
            try:
                env = self._build(spec, path, wheels)
            except EnvBuildError:
                shutil.rmtree(path, ignore_errors=True)
                raise
            took = time.monotonic() - t0
            listed = ", ".join(f"{k} {v}" for k, v in sorted(env.packages.items())[:6])
            more = f" and {len(env.packages) - 6} more" if len(env.packages) > 6 else ""
            progress(f"environment {spec.key} for {label}: built in {took:.1f} s ({listed}{more})")
            return env

    def _check(self, path: Path, spec: EnvSpec) -> tuple[RuntimeEnv | None, str]:
        """(the environment, "") when it is whole; (None, why) when it must be (re)built ("" when absent)."""
        if not path.exists():
            return None, ""
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError):
            return None, "half-built (no manifest)"
        env = RuntimeEnv(path, manifest)
        if manifest.get("base") != spec.base:
            return None, f"built over another base ({manifest.get('base')})"
        if not env.python.exists():
            return None, f"its interpreter {env.python} is gone"
        try:
            ok = subprocess.run([str(env.python), "-c", "pass"], check=False, capture_output=True,
                                timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            return None, f"its interpreter {env.python} does not start"
        return env, ""

    # ------------------------------------------------------------------ build
    def _build(self, spec: EnvSpec, path: Path, wheels: Path | None) -> RuntimeEnv:
        t0 = time.monotonic()
        if path.exists():
            shutil.rmtree(path)
        external_pip = _pip_supports_python_option()
        venv = [sys.executable, "-m", "venv", str(path)] + (["--without-pip"] if external_pip else [])
        self._run(venv, spec, path, "creating the virtual environment")
        python = path / "bin" / "python"
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        # the base comes after the environment's own packages: what is installed here wins, the rest is shared
        (Path(site) / BASE_PTH).write_text(f"import site; site.addsitedir({spec.base!r})\n")
        pip = [sys.executable, "-m", "pip", "--python", str(python)] if external_pip else [str(python), "-m", "pip"]
        source = ["--no-index", "--find-links", str(wheels)] if wheels is not None else []
        held = path / "held-by-base.txt"  # torch stays the base's: a runtime's package never pulls another build
        held.write_text("".join(f"{name}=={metadata.version(name)}\n" for name in _held(spec.requirements)))
        self._run([*pip, "install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                   "-c", str(held), *source, *spec.requirements], spec, path, "installing")
        packages = {str(d.metadata["Name"]): d.version for d in metadata.distributions(path=[site])
                    if d.metadata["Name"] and d.metadata["Name"] != "pip"}
        manifest = {"key": spec.key, "requirements": list(spec.requirements), "python": spec.python,
                    "platform": spec.platform, "base": spec.base, "packages": dict(sorted(packages.items())),
                    "wheels": str(wheels) if wheels is not None else None, "built_at": time.time(),
                    "build_s": round(time.monotonic() - t0, 1)}
        tmp = path / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, path / MANIFEST)  # the manifest, written last, marks the environment whole
        return RuntimeEnv(path, manifest)

    @staticmethod
    def _run(cmd: list[str], spec: EnvSpec, path: Path, what: str) -> None:
        timeout_s = build_timeout_s()
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EnvBuildError(f"the environment for {spec.label} could not be built: {what} took over "
                                f"{timeout_s:g} s") from None
        except OSError as exc:
            raise EnvBuildError(f"the environment for {spec.label} could not be built: {what}: {exc}") from None
        if done.returncode != 0:
            (path.parent / f"{path.name}.failed.log").write_text(done.stdout + done.stderr)
            raise EnvBuildError(f"the environment for {spec.label} could not be built ({what} exited "
                                f"{done.returncode}): {_last_line(done.stderr or done.stdout)}")

    # ------------------------------------------------------------------ inventory
    def list(self) -> list[tuple[Path, dict[str, Any] | None]]:
        """Every environment folder with its manifest (None: half-built or broken)."""
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(p for p in self.root.iterdir() if p.is_dir()):
            try:
                out.append((path, json.loads((path / MANIFEST).read_text())))
            except (OSError, ValueError):
                out.append((path, None))
        return out

    def clear(self, keys: tuple[str, ...] = ()) -> list[str]:
        """Remove the environments whose key starts with one of `keys` (all when empty); their keys."""
        if any(not k.strip() for k in keys):
            raise ValueError("an empty key is a prefix of every key: pass no keys to remove all")
        removed = []
        for path, _ in self.list():
            if not keys or any(path.name.startswith(k) for k in keys):
                with open(self.root / f"{path.name}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        for stale in self.root.glob("*.failed.log") if self.root.is_dir() else ():
            if not keys or any(stale.name.startswith(k) for k in keys):
                stale.unlink(missing_ok=True)
        return removed
