"""A throwaway PostgreSQL server for the tests that run the store on PostgreSQL.

``PgServer.start()`` runs Debian's ``postgresql`` package binaries (``initdb`` and
``pg_ctl``, under ``/usr/lib/postgresql/<version>/bin``; ``scripts/bootstrap.sh`` installs
the package) in a temporary directory: a password for TCP on 127.0.0.1 at a free port (so
a wrong one is refused, as in production), trust on the Unix socket in that directory,
durability off (a test database need not survive a power cut). PostgreSQL refuses to run
as root, so as root the server runs as the package's ``postgres`` user (``runuser``); run
by any other user, under that user's own id. ``stop()`` stops it and removes the directory.
``PgServer(bindir, durable=True)`` keeps PostgreSQL's own defaults instead (``fsync``,
``synchronous_commit``, ``full_page_writes`` on: a commit is on the disk before it returns):
the server a user runs, for the benches that compare the engines; ``settings`` adds
server settings (``{"synchronous_commit": "off"}``: an operator's choice).

``database()`` makes a fresh, empty database per test (``CREATE DATABASE`` from
``template0``: a few milliseconds), ``store_database()`` one with the store's schema built
(a copy of one built once), and each returns its URL,
``postgresql://postgres:<password>@127.0.0.1:<port>/<name>``.

``binaries()`` is None only when the package is truly absent: the fixtures skip then,
saying so; anywhere the package is installed (CI, a bootstrapped machine) the tests run.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 60
SKIP_REASON = ("PostgreSQL is not installed (Debian package postgresql: scripts/bootstrap.sh "
               "installs it as root)")


def binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb and pg_ctl."""
    found = [Path(d) for d in glob.glob("/usr/lib/postgresql/*/bin")
             if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists()]
    found.sort(key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    return found[-1] if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL server in a temporary directory (see the module docstring)."""

    def __init__(self, bindir: Path, *, durable: bool = False,
                 settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir
        self.durable = durable
        self.settings = dict(settings or {})  # more server settings (-c name=value)
        self.root = Path(tempfile.mkdtemp(prefix="argus-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user = "postgres"
        self.password = secrets.token_hex(8)
        self._names = itertools.count(1)
        self._as_root = os.geteuid() == 0
        self._template: str | None = None

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S,
                              check=False)

    def _check(self, what: str, done: subprocess.CompletedProcess[str]) -> None:
        if done.returncode != 0:
            log = (self.root / "server.log")
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"PostgreSQL {what} failed ({done.returncode}): "
                               f"{done.stdout}{done.stderr}{tail}")

    def start(self) -> PgServer:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        self._check("initdb", self._run(
            "initdb", "-D", str(self.data), "-U", self.user, "--auth-local=trust",
            "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync",
            "--locale=C"))
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after ``halt``) on the same port and data."""
        options = f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 "
        if not self.durable:
            options += "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        options += "-c max_connections=200"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._check("start", self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
            "-t", str(START_TIMEOUT_S), "-o", options, "start"))

    def halt(self) -> None:
        """Stop the server (every connection dropped), keeping its data: a fast shutdown,
        which writes what was committed (durability is off: an immediate one would lose
        the last commits)."""
        self._check("stop", self._run("pg_ctl", "-D", str(self.data), "-m", "fast",
                                      "-w", "stop"))

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres", password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{self.user}:{secret}@127.0.0.1:{self.port}/{dbname}"

    def socket_url(self, url: str) -> str:
        """The same database as ``url`` through the server's Unix socket (no TCP, no
        password: trust on the socket)."""
        dbname = url.rsplit("/", 1)[1]
        return f"postgresql://{self.user}@/{dbname}?host={self.root}&port={self.port}"

    def sql(self, statement: str) -> None:
        """One statement as the superuser in the ``postgres`` database (autocommit)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def database(self, template: str = "template0") -> str:
        """A fresh database (empty: a copy of ``template0``); its URL."""
        name = f"t{os.getpid()}_{next(self._names)}_{int(time.time() * 1000) % 100000}"
        self.sql(f"CREATE DATABASE {name} TEMPLATE {template}")
        return self.url(name)

    def store_database(self) -> str:
        """A fresh database with the store's schema already built (a copy of one the
        store built once for the session: copying is faster than building); its URL."""
        if self._template is None:
            from service.store.writer import Store

            url = self.database()
            Store(url).close()
            self._template = url.rsplit("/", 1)[1]
        return self.database(self._template)


@contextlib.contextmanager
def running_server() -> Iterator[PgServer]:
    """A server started for the block and stopped after it; the test is skipped where
    PostgreSQL is not installed."""
    bindir = binaries()
    if bindir is None:
        pytest.skip(SKIP_REASON)
    server = PgServer(bindir).start()
    try:
        yield server
    finally:
        server.stop()
