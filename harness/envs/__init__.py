"""Runtime environments: a runtime's own virtual environment, built on demand into the cache, reused by key."""

from harness.envs.spec import EnvSpec, environment_for
from harness.envs.store import EnvBuildError, EnvStore, RuntimeEnv

__all__ = ["EnvBuildError", "EnvSpec", "EnvStore", "RuntimeEnv", "environment_for"]
