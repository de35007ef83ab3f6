"""The harness's pytest suites (installed as `harness_suites`), run by `harness run` or plain pytest."""

from pathlib import Path

SUITES_DIR = Path(__file__).resolve().parent
