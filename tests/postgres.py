"""A private PostgreSQL 15 cluster for the store tests: ``initdb`` into a temporary folder, ``pg_ctl start`` on a
free port of 127.0.0.1 (its socket in that folder too), a database per test copied from one MLflow has migrated,
and the server stopped by its PID at the end.

``initdb`` refuses root, so as root the binaries run as the ``postgres`` user (``runuser -u postgres --``), which
owns the folder. Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``): the cluster is thrown
away, and the tests are about concurrency, not crashes of the machine.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

BINARIES = Path("/usr/lib/postgresql/15/bin")
TEMPLATE = "mlflow_template"


def available() -> bool:
    """The PostgreSQL 15 binaries are installed, and as root the ``postgres`` user to run them exists."""
    if not (BINARIES / "initdb").exists() or not (BINARIES / "pg_ctl").exists():
        return False
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """One started cluster: ``uri(database)`` and :meth:`new_store`; :meth:`stop` ends it by its PID."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ndebench-pg."))
        self.data, self.log = self.folder / "data", self.folder / "server.log"
        self._as = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.pid = 0
        self.port = 0

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self._as, *command], capture_output=True, text=True, timeout=120, cwd=self.folder)
        if done.returncode:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stdout}{done.stderr}{log}")

    def start(self) -> Cluster:
        self._run(str(BINARIES / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync",
                  "--encoding=UTF8", "--locale=C")
        for attempt in range(3):  # a free port taken by another process before the server binds it
            self.port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
            try:
                self._run(str(BINARIES / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                          "-w", "-t", "60", "start")
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        self._template()
        return self

    def uri(self, database: str) -> str:
        """The tracking URI of ``database``, as a user writes it (SQLAlchemy 2.1 reads ``postgresql://`` with
        psycopg 3)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _execute(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(statement)

    def _template(self) -> None:
        """A database MLflow's migrations built once; every store a test asks for is a copy of it."""
        import sqlalchemy
        from mlflow.store.db.utils import _initialize_tables

        self._execute(f"CREATE DATABASE {TEMPLATE}")
        engine = sqlalchemy.create_engine(self.uri(TEMPLATE))
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()  # CREATE DATABASE ... TEMPLATE needs the template without connections

    def new_store(self) -> str:
        """A fresh MLflow store (a new database with the migrated schema); its tracking URI."""
        name = f"store_{uuid.uuid4().hex[:12]}"
        self._execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.uri(name)

    def stop(self) -> None:
        """SIGINT (PostgreSQL's fast shutdown) to the server's PID, SIGKILL after 30 s; the folder removed."""
        if self.pid:
            for sig, wait_s in ((signal.SIGINT, 30.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline and _alive(self.pid):
                    time.sleep(0.1)
                if not _alive(self.pid):
                    break
        shutil.rmtree(self.folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # The postmaster is not this process's child: a zombie of it would be init's to reap.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False


def count_rows(uri: str, sql: str, *args: str) -> int:
    """The count that ``sql`` (a ``select count(...)`` with ``?`` for ``args``, as ``fakes.count_rows``) reads from
    the PostgreSQL store ``uri`` while a sweep writes it."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as connection:
        return connection.execute(sql.replace("?", "%s"), args).fetchone()[0]
