"""Fixtures for the history tests: a SQLite file, and a real PostgreSQL server started in a temporary folder."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gating"))  # gating_synth: synthetic runs


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """initdb + pg_ctl start in a temporary folder, on a free 127.0.0.1 port, trust authentication; yields the
    server's base URL. PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user."""
    pytest.importorskip("psycopg")
    bindir = _pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    user: dict[str, str] = {}
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run the server as")
        user = {"user": "postgres", "group": "postgres"}
    tmp = Path(tempfile.mkdtemp(prefix="harness-pg-"))
    if user:
        shutil.chown(tmp, "postgres", "postgres")
    data, port = tmp / "data", _free_port()
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                    "--no-sync"], check=True, capture_output=True, **user)
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {tmp} -c fsync=off"
    subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(tmp / "log"), "-w", "start"],
                   check=True, capture_output=True, **user)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                       check=False, **user)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A new, empty database on the session's server."""
    import psycopg

    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.replace("+psycopg", "") + "/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{pg_server}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each history test runs on SQLite and on a real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("pg_url")
