"""A PostgreSQL server of the tests' own, on 127.0.0.1: Debian's binaries
(``/usr/lib/postgresql/*/bin``), ``initdb`` into a temporary folder and ``pg_ctl start`` on a
free port. As root, the server runs as the unprivileged user ``postgres`` (PostgreSQL refuses
to run as root), through ``runuser``.

Where PostgreSQL is not installed, :func:`start` says what is missing and the command that
installs it, in one line (:class:`Missing`); the tests skip with that line, except in CI
(``CI=true``), where they fail.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

INSTALL = "apt-get install postgresql"


class Missing(Exception):
    """PostgreSQL (or what runs it) is not on this machine; the message says what and how to
    install it, in one line."""


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``), where a missing server fails a test."""
    return os.environ.get("CI", "").lower() == "true"


def binaries() -> Path:
    """The folder of the newest PostgreSQL server binaries Debian installed.

    Raises:
        Missing: none is installed.
    """
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit()
                   else 0)
    if not found:
        raise Missing(f"PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/"
                      f"initdb); install it with: {INSTALL}")
    return Path(found[-1]).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A running PostgreSQL server: :attr:`dsn` reaches its database ``postgres`` as the
    superuser ``postgres`` (trust authentication, 127.0.0.1 only)."""

    def __init__(self, folder: Path, port: int, bin_dir: Path, as_user: list[str]) -> None:
        self.folder = folder
        self.port = port
        self.bin_dir = bin_dir
        self._as_user = as_user
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._as_user, *argv], capture_output=True, text=True,
                              check=check, timeout=120)

    def start(self) -> None:
        """Start the server (its data folder made already) and wait until it accepts."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-k {self.folder} -c fsync=off -c full_page_writes=off "
                   "-c max_connections=200")
        self._run(str(self.bin_dir / "pg_ctl"), "start", "-w", "-t", "120",
                  "-D", str(self.data), "-l", str(self.folder / "log"), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: every session ends now; ``immediate``: as a crash)."""
        self._run(str(self.bin_dir / "pg_ctl"), "stop", "-w", "-t", "120", "-m", mode,
                  "-D", str(self.data), check=False)

    def fresh_dsn(self) -> str:
        """The DSN of a new, empty schema of its own (so each test starts from nothing):
        the server's DSN with ``search_path`` set to it."""
        name = "t_" + uuid.uuid4().hex[:12]
        import psycopg  # noqa: PLC0415 - the postgresql extra, where a test needs it

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.dsn}?options=-csearch_path%3D{name}"


@contextlib.contextmanager
def started() -> Iterator[Server]:
    """A PostgreSQL server of its own, started now and stopped (its folder removed) after.

    Raises:
        Missing: PostgreSQL's binaries, or the user ``postgres`` to run them as root, are
            missing (the message says how to install them).
        subprocess.CalledProcessError: initdb or pg_ctl failed.
    """
    bin_dir = binaries()
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="regdev-pg-"))
    try:
        if os.geteuid() == 0:  # PostgreSQL never runs as root
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise Missing(f"no user postgres to run PostgreSQL as (running as root); "
                              f"install PostgreSQL with: {INSTALL}") from None
            if shutil.which("runuser") is None:
                raise Missing("runuser (util-linux) is missing, to run PostgreSQL as the user "
                              "postgres; install it with: apt-get install util-linux")
            os.chown(folder, account.pw_uid, account.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        server = Server(folder, free_port(), bin_dir, as_user)
        server._run(str(bin_dir / "initdb"), "-D", str(server.data), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        for attempt in range(5):  # another process may take the free port meanwhile
            try:
                server.start()
                break
            except subprocess.CalledProcessError:
                if attempt == 4:
                    raise
                server.port = free_port()
                server.dsn = f"postgresql://postgres@127.0.0.1:{server.port}/postgres"
        try:
            _wait_ready(server)
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(server: Server, timeout: float = 120.0) -> None:
    """Wait until the server answers a query (``pg_ctl -w`` waits for the socket)."""
    try:
        import psycopg  # noqa: PLC0415 - the postgresql extra, where a test needs it
    except ModuleNotFoundError:
        raise Missing("psycopg is not installed: pip install 'regdev[postgresql]'") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(server.dsn, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
