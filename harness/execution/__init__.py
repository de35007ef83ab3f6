"""Running cases: in this process (CaseRunner) or in a supervised worker process (IsolatedExecutor)."""

from harness.execution.worker import CaseRunner, InProcessExecutor
from harness.execution.supervisor import IsolatedExecutor

__all__ = ["CaseRunner", "InProcessExecutor", "IsolatedExecutor"]
