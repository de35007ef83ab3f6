"""Versioned result records, the environment snapshot, and atomic storage."""

from harness.results.schema import (MEASURED, SCHEMA_VERSION, STATUSES, CaseId, CaseResult, RunResults,
                                    load_results)
from harness.results.store import atomic_write_text, write_results

__all__ = ["MEASURED", "SCHEMA_VERSION", "STATUSES", "CaseId", "CaseResult", "RunResults", "atomic_write_text",
           "load_results", "write_results"]
