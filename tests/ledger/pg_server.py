"""A throwaway PostgreSQL server on a loopback port, for the ledger tests and bench/ledger_postgresql.py.

It runs the distribution's server (``scripts/system-deps.sh`` installs it) from a fresh
``initdb`` in a temporary folder, listening on 127.0.0.1 only (no Unix socket), with a
random password (scram-sha-256), and is stopped and deleted after.  PostgreSQL refuses to
run as root, so under root (as in CI) it runs as the ``postgres`` user the package
creates (``nobody`` where there is none); the folder is made in the system's temporary
directory and handed to that user, because pytest's own folders are private to root.

Every way it can fail to start says what was tried and what the server said.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

SUPERUSER = "hami"
START_TIMEOUT_S = 60.0

# no disk flushes: the tests' data dies with the server (the bench may ask for the real settings).  Commits
# still wait for the WAL to be written as far as they need (synchronous_commit stays on), as the ledger expects.
FAST = ("fsync=off", "full_page_writes=off")


class PostgresServerError(RuntimeError):
    """The test server could not be started; the message says why and what to install."""


def find_bin_dir() -> Path:
    """Where ``initdb`` and ``postgres`` are: on PATH, else Debian's ``/usr/lib/postgresql/<version>/bin``."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).resolve().parent
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists() and (p / "postgres").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise PostgresServerError(
            "PostgreSQL server programs (initdb, postgres) were found neither on PATH nor under "
            "/usr/lib/postgresql/*/bin: run `bash scripts/system-deps.sh` (it installs the distribution's "
            "postgresql package with apt-get), or put a PostgreSQL 13+ bin folder on PATH"
        )
    return versions[-1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_account() -> pwd.struct_passwd | None:
    """The unprivileged account to run as, or None when we are not root (then we run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresServerError("running as root, and there is neither a postgres nor a nobody user to run PostgreSQL as")


@dataclass
class PostgresServer:
    """A running server; ``url(database)`` connects as its superuser with its password."""

    bin_dir: Path
    root: Path
    port: int
    password: str
    process: subprocess.Popen[bytes]
    databases: list[str] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database (ICU en-US collation where the server has ICU); returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            try:
                conn.execute(
                    f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8 LOCALE_PROVIDER icu '
                    "ICU_LOCALE 'en-US' LOCALE 'C'"
                )
            except psycopg.errors.FeatureNotSupported:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8')
        self.databases.append(name)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: roll back the sessions, stop cleanly
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class _RunAs:
    """``subprocess`` keywords that drop root for the server's account (all None: run as ourselves)."""

    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None

    @classmethod
    def of(cls, account: pwd.struct_passwd | None) -> _RunAs:
        return cls() if account is None else cls(account.pw_uid, account.pw_gid, [])


def _initdb(bin_dir: Path, data: Path, password: str, account: pwd.struct_passwd | None) -> None:
    run_as = _RunAs.of(account)
    pwfile = data.parent / "pwfile"
    pwfile.write_text(password + "\n")
    if account is not None:
        os.chown(pwfile, account.pw_uid, account.pw_gid)
    done = subprocess.run(
        [
            str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
            "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync",
        ],
        capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C"}, cwd=data.parent,
        user=run_as.user, group=run_as.group, extra_groups=run_as.extra_groups,
    )
    pwfile.unlink()
    if done.returncode != 0:
        raise PostgresServerError(
            f"initdb ({bin_dir / 'initdb'}) failed with exit status {done.returncode}:\n{done.stderr.strip()}"
        )


def _wait_until_ready(server: PostgresServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise PostgresServerError(
                f"postgres exited with status {server.process.returncode} while starting on 127.0.0.1:"
                f"{server.port}; its log says:\n{server.log_tail()}"
            )
        try:
            psycopg.connect(server.url(), connect_timeout=2).close()
            return
        except psycopg.OperationalError as exc:
            last = str(exc).strip()
            time.sleep(0.1)
    server.stop()
    raise PostgresServerError(
        f"postgres did not accept connections on 127.0.0.1:{server.port} within {START_TIMEOUT_S:g} s "
        f"(last error: {last}); its log says:\n{server.log_tail()}"
    )


def start_server(*, durable: bool = False, settings: tuple[str, ...] = ()) -> PostgresServer:
    """Initialise and start a server; ``durable`` keeps PostgreSQL's own fsync settings (for benchmarks)."""
    bin_dir = find_bin_dir()
    account = _server_account()
    root = Path(tempfile.mkdtemp(prefix="hami-pg-"))
    if account is not None:
        os.chown(root, account.pw_uid, account.pw_gid)
    data = root / "data"
    run_as = _RunAs.of(account)
    password = secrets.token_hex(12)
    try:
        _initdb(bin_dir, data, password, account)
        options = [*(() if durable else FAST), "max_connections=200", "listen_addresses=127.0.0.1",
                   "unix_socket_directories=", *settings]
        for attempt in range(3):  # the free port may be taken between the probe and the bind
            port = free_port()
            log = open(root / "server.log", "ab")  # noqa: SIM115  (the server writes it until it stops)
            command = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port)]
            for option in options:
                command += ["-c", option]
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root,
                env={**os.environ, "LC_ALL": "C"}, user=run_as.user, group=run_as.group,
                extra_groups=run_as.extra_groups,
            )
            log.close()
            server = PostgresServer(bin_dir, root, port, password, process)
            try:
                _wait_until_ready(server)
                return server
            except PostgresServerError:
                if attempt == 2 or "could not bind" not in server.log_tail():
                    raise
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    raise AssertionError("unreachable")
