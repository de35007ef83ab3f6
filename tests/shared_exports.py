"""One torch.onnx export per model and exporter in a test session, for the harness processes the tests start too.

tests/conftest.py keeps the first real export of each key in the session's store folder and copies it into a later
test's private artifact cache on a miss, in the pytest process. A harness subprocess a test starts (`harness run`,
`gate`, `qualify`...; its workers, an environment's worker) paid for the exporter's first call again, seconds each.
Where $HARNESS_TEST_EXPORTS names the store (tests/conftest.py's `fake_env` sets it), a test plugin imported there
(tests/fakes.py, tests/env_fakes.py) installs the same rule in that process: on a miss of its own cache, the stored
export of the same key is copied in through the same `get_or_build` (a miss stays a miss: its meta.json, build_s),
or the export is real and published to the store for the processes after it. Shared only for a registered model's
very spec (never a replaced copy) and never while `torch.onnx.export` is replaced; a test marked fresh_export
starts its processes without the variable."""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

ENV = "HARNESS_TEST_EXPORTS"


def stored(store: Path, key: str) -> tuple[Path, dict[str, Any]] | None:
    """The kept export of `key` (its folder and the meta its export returned), or None."""
    folder, meta = store / key, store / f"{key}.json"
    if not meta.is_file():
        return None
    return folder, json.loads(meta.read_text())


def publish(store: Path, key: str, export_dir: Path, meta: dict[str, Any]) -> None:
    """Keep the files of a real export (`export_dir`) as `key`'s: copied aside, then renamed into place (a process
    that published the same key first keeps its own)."""
    tmp = store / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
    shutil.copytree(export_dir, tmp)
    try:
        os.rename(tmp, store / key)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    meta_tmp = store / f".tmp-{key}-{uuid.uuid4().hex[:8]}.json"
    meta_tmp.write_text(json.dumps(meta, default=str))
    os.replace(meta_tmp, store / f"{key}.json")  # the meta last: a reader never sees half a folder


def copy_into(folder: Path, path: Path) -> None:
    for f in folder.iterdir():
        shutil.copy2(f, path.parent / f.name)


def exporter_replaced() -> bool:
    """A test's stand-in for torch.onnx.export (never shared, never kept). Without torch imported yet, nothing
    replaced it."""
    torch = sys.modules.get("torch")
    return torch is not None and not getattr(torch.onnx.export, "__module__", "").startswith("torch.")


def install() -> None:
    """In a harness process started by a test: share the session's exports (a no-op without $HARNESS_TEST_EXPORTS,
    or where the pytest process's own rule is installed already)."""
    store = os.environ.get(ENV)
    if not store:
        return
    from harness.artifacts.cache import cache_key
    from harness.artifacts.onnx_from_torch import OnnxFromTorch

    if getattr(OnnxFromTorch._export, "shared_exports", False):
        return
    real_export = OnnxFromTorch._export

    def export(self: OnnxFromTorch, path: Path) -> dict:
        from harness.model import get_model

        try:
            registered = get_model(self.spec.name) is self.spec
        except Exception:  # noqa: BLE001 - not a registered model: export for real
            registered = False
        if not registered or exporter_replaced():
            return real_export(self, path)
        key = cache_key(self.key_parts())
        kept = stored(Path(store), key)
        if kept is not None:
            copy_into(kept[0], path)
            return dict(kept[1])
        meta = real_export(self, path)
        publish(Path(store), key, path.parent, meta)
        return meta

    export.shared_exports = True  # type: ignore[attr-defined]
    OnnxFromTorch._export = export
