"""`harness models | runtimes | variants | snapshot | ceilings | cache`: what is here (the zoo, runtimes, variant kinds,
the environment snapshot, the machine's ceilings, the artifact cache)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.commands.common import EXIT_OK, Command, add_groups, age_text, size_text
from harness.options.build import CACHE_DIR, CACHE_KIND
from harness.options.profile import CEILINGS


def add_parser(sub: Any) -> None:
    sub.add_parser("models", help="list the model zoo (and models added by plugins)")
    sub.add_parser("runtimes", help="list runtimes and whether each can run here (with the reason)")
    sub.add_parser("variants", help="list the deployment-variant kinds (--variants KIND=VALUE) and which runtimes "
                                    "take each")
    sub.add_parser("snapshot", help="print the environment snapshot recorded with every run (JSON; `harness envs` "
                                    "is the runtimes' own environments)")
    sub.add_parser("env")  # the old name of `snapshot`, one letter from `envs`: works for one release, not listed
    add_groups(sub.add_parser("ceilings", help="this machine's measured peak FLOP/s per precision and memory "
                                               "bandwidth (measured once per machine and thread count, then cached)"),
               (CEILINGS, CACHE_DIR))
    cache = sub.add_parser("cache", help="list or clear the artifact cache (ONNX exports, trained weights)")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    for action, text in (("ls", "list entries: kind, label, key, size, age, path"),
                         ("clear", "remove entries (safe while another run uses the cache: docs/method.md)")):
        add_groups(cache_sub.add_parser(action, help=text), (CACHE_DIR, CACHE_KIND))


def cmd_models(args: argparse.Namespace) -> int:
    from harness.model import all_models

    for s in all_models():
        inputs = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in s.inputs)
        print(f"{s.name:<14} {s.task:<15} tags={','.join(sorted(s.tags)) or '-':<16} {inputs}")
        if s.description:
            print(f"{'':<14} {s.description}")
        if s.unavailable_reason():
            print(f"{'':<14} unavailable here (its cases are skipped): {s.unavailable_reason()}")
    return EXIT_OK


def cmd_runtimes(args: argparse.Namespace) -> int:
    from harness.envs import environment_for
    from harness.runtimes import get_runtime, runtime_names

    rows = []
    for name in runtime_names():
        cls = get_runtime(name)
        spec = environment_for(cls)
        avail = cls.availability()
        precisions = ",".join(sorted(p.value for p in cls.precisions))
        state = "available" if avail else f"unavailable: {avail.reason}"
        if spec is not None:  # `harness run` builds its environment on first use (harness envs)
            state = f"in an environment of its own ({spec.label}; built on first use)"
        rows.append((name, f"device={cls.device}", f"precisions={precisions}", state))
    widths = [max(len(r[i]) for r in rows) for i in range(3)] if rows else []
    for r in rows:  # columns as wide as their widest cell: every state starts in one column
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[3])
    return EXIT_OK


def cmd_variants(args: argparse.Namespace) -> int:
    from harness.runtimes import get_runtime, runtime_names
    from harness.variants import KINDS

    for kind in KINDS.values():
        takers = [n for n in runtime_names() if kind.needs is None or kind.needs in get_runtime(n).variant_hooks]
        print(f"{kind.key}=  {kind.values}\n    {kind.title}\n    runtimes: "
              f"{'every runtime' if kind.needs is None else ', '.join(takers)}"
              + (f"; precisions: {', '.join(sorted(p.value for p in kind.precisions))}" if kind.precisions else ""))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    from harness.measure.timer import measure_overhead
    from harness.results.environment import default_threads, snapshot

    env = snapshot(threads=default_threads())
    env.harness_overhead = measure_overhead()
    print(json.dumps(env.as_dict(), indent=2, default=str))
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    """`harness env`: the old name of `harness snapshot` (one letter from `harness envs`), for one release."""
    from harness.options import deprecated

    deprecated("`harness env`", "use `harness snapshot` (`harness envs` manages the runtimes' environments)")
    return cmd_snapshot(args)


def cmd_ceilings(args: argparse.Namespace) -> int:
    from harness.profile.ceilings import ceilings_text, machine_ceilings
    from harness.results.environment import default_threads

    ceilings = machine_ceilings(args.threads or default_threads(),
                                Path(args.cache_dir).expanduser() if args.cache_dir else None,
                                remeasure=args.remeasure)
    print(json.dumps(ceilings, indent=2) if args.json else ceilings_text(ceilings))
    return EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    from harness.artifacts.cache import ArtifactCache

    cache = ArtifactCache(Path(args.cache_dir).expanduser() if args.cache_dir else None)
    cache.check_kind(args.kind)
    if args.cache_command == "clear":
        removed, freed = cache.clear(args.kind)
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({size_text(freed)}) from {cache.root}")
        return EXIT_OK
    entries = cache.list(args.kind)
    if not entries:
        print(f"{cache.root}: no cache entries" + (f" of kind {args.kind!r}" if args.kind else ""))
        return EXIT_OK
    print(f"{'KIND':<10} {'LABEL':<22} {'KEY':<16} {'SIZE':>9} {'AGE':>7}  PATH")
    for e in entries:
        print(f"{e.kind:<10} {e.label[:22]:<22} {e.key[:16]:<16} {size_text(e.size_bytes):>9} "
              f"{age_text(e.age_s):>7}  {e.path}")
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {size_text(total)} in {cache.root}")
    return EXIT_OK


COMMANDS = {"models": Command(cmd_models), "runtimes": Command(cmd_runtimes), "variants": Command(cmd_variants),
            "snapshot": Command(cmd_snapshot, plugins=False), "env": Command(cmd_env, plugins=False), "ceilings": Command(cmd_ceilings, plugins=False),
            "cache": Command(cmd_cache, plugins=False)}
