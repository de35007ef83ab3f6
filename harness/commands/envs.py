"""`harness envs ls | build | clear`: the runtimes' own environments in the cache (harness.envs)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from harness.commands.common import EXIT_FAILED, EXIT_OK, Command, add_groups, age_text, size_text
from harness.errors import UsageError
from harness.options.build import CACHE_DIR
from harness.options.process import ENVS_BUILD, ENVS_CLEAR


def add_parser(sub: Any) -> None:
    e = sub.add_parser("envs", help="list, build or remove the runtimes' own environments (harness cache envs/)")
    esub = e.add_subparsers(dest="envs_command", required=True, metavar="ACTION")
    for action, text, groups in (
            ("ls", "list environments: key, requirements, packages, size, last used", ()),
            ("build", "build the environments these runtimes need (e.g. ort-openvino,ort-cpu@1.24.4,litert-cpu); "
                      "those already built are checked and kept", (ENVS_BUILD,)),
            ("clear", "remove environments (all, or those whose key starts with KEY)", (ENVS_CLEAR,))):
        add_groups(esub.add_parser(action, help=text), (*groups, CACHE_DIR))


def cmd_envs(args: argparse.Namespace) -> int:
    """`harness envs ls | build | clear`: the runtimes' own environments in the cache."""
    from harness.artifacts.cache import default_cache_dir
    from harness.envs import EnvBuildError, EnvStore, environment_for
    from harness.options import wheel_folder
    from harness.runtimes import get_runtime

    store = EnvStore(Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir())
    if args.envs_command == "clear":
        if any(not k.strip() for k in args.keys):  # '' is a prefix of every key: it would remove them all
            raise UsageError("envs clear: an empty KEY matches every environment; give no KEY to remove all "
                             "(`harness envs clear`), or the keys `harness envs ls` lists")
        removed = store.clear(tuple(args.keys))
        print(f"removed {len(removed)} environment(s) from {store.root}" + (f": {', '.join(removed)}" if removed
                                                                             else ""))
        return EXIT_OK
    if args.envs_command == "build":
        wheels = Path(wheel_folder(args.env_wheels, "env-wheels")) if args.env_wheels else None
        failed = 0
        for name in (n.strip() for n in args.runtimes.split(",") if n.strip()):
            spec = environment_for(get_runtime(name), "auto")
            if spec is None:
                print(f"{name}: runs in the harness's own environment (nothing to build)")
                continue
            t0 = time.perf_counter()
            try:
                env = store.ensure(spec, wheels=wheels, progress=print, who=name)
            except EnvBuildError as exc:
                print(f"{name}: {exc}")
                failed += 1
                continue
            print(f"{name}: {env.path} ready in {time.perf_counter() - t0:.1f} s")
        return EXIT_FAILED if failed else EXIT_OK
    envs = store.list()
    if not envs:
        print(f"{store.root}: no environments")
        return EXIT_OK
    print(f"{'KEY':<16} {'SIZE':>9} {'USED':>6}  REQUIREMENTS -> PACKAGES")
    for path, manifest in envs:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        if manifest is None:
            print(f"{path.name:<16} {size_text(size):>9} {'':>6}  (half-built or broken: rebuilt on next use)")
            continue
        used = age_text(time.time() - (path / "harness-env.json").stat().st_mtime)
        pkgs = ", ".join(f"{k} {v}" for k, v in manifest.get("packages", {}).items())
        print(f"{path.name:<16} {size_text(size):>9} {used:>6}  {', '.join(manifest['requirements'])} -> {pkgs}")
    print(f"{len(envs)} environment(s) in {store.root}")
    return EXIT_OK


COMMANDS = {"envs": Command(cmd_envs)}
