"""Fixtures of the execution tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): "unreachable" for the cluster clients' probes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
