"""Finds models and runtimes that packages add: entry points and the HARNESS_PLUGINS variable."""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

MODEL_GROUP = "harness.models"
RUNTIME_GROUP = "harness.runtimes"
ENV_VAR = "HARNESS_PLUGINS"

_loaded = False


def load_plugins() -> None:
    """Load every plugin once per process.

    - entry points in group `harness.models`: a callable returning ModelSpecs (or a module that registers them);
    - entry points in group `harness.runtimes`: a Runtime subclass (registered under its `name`);
    - HARNESS_PLUGINS=mod1,mod2: modules imported for their registration side effects (tests, local experiments).
    """
    global _loaded
    if _loaded:
        return
    _loaded = True
    from harness.model import register_model
    from harness.runtimes import register_runtime

    for ep in entry_points(group=MODEL_GROUP):
        obj = ep.load()
        specs = obj() if callable(obj) else ()
        for spec in specs or ():
            register_model(spec, replace=True)
    for ep in entry_points(group=RUNTIME_GROUP):
        register_runtime(ep.load(), replace=True)
    for name in filter(None, (m.strip() for m in os.environ.get(ENV_VAR, "").split(","))):
        importlib.import_module(name)
