"""The forkserver's first preload: Ctrl-C ignored from here on (the parent decides; worker_prologue says so too)."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
