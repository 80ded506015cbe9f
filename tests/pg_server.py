"""A throwaway PostgreSQL server for the tests: initdb into a temporary folder, a free port on
127.0.0.1, removed afterwards. PostgreSQL refuses to run as root, so when the tests run as root the
server runs as the unprivileged `postgres` system user (its files are handed to that user first).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "postgres"


class PostgresMissing(RuntimeError):
    """The PostgreSQL server binaries are not on this machine."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise PostgresMissing(f"{name} not found: install PostgreSQL (the server package) to run these tests")


PORT_TRIES = 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    folder: Path
    port: int
    user: str

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def inbox_url(self, schema: str | None = None) -> str:
        """A URL naming a fresh, unused inbox schema in this server's database."""
        name = schema or f"inbox_{uuid.uuid4().hex[:12]}"
        return f"{self.url}?schema={name}"

    def stop(self) -> None:
        _as_server_user([_binary("pg_ctl"), "stop", "-D", str(self.folder / "data"), "-m", "immediate", "-w"],
                        check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def _as_server_user(command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        command = ["runuser", "-u", SERVER_USER, "--", *command]
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)


def start_server(*, durable: bool = False) -> PostgresServer:
    """A fresh server. The tests' server skips fsync (nothing in a test outlives the machine); durable=True
    keeps PostgreSQL's own defaults (fsync, full_page_writes, synchronous_commit on), as benchmarks need."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    # A durable server is for benchmarks that measure the disk: never on the tests' tmpfs (tests/conftest.py).
    on_tmpfs = tempfile.gettempdir() == "/dev/shm"  # tests.support.RAM_DISK (bench/ imports this file alone)
    folder = Path(tempfile.mkdtemp(prefix="agent-console-pg-", dir="/var/tmp" if durable and on_tmpfs else None))
    data = folder / "data"
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER)
        os.chown(folder, account.pw_uid, account.pw_gid)
        user = SERVER_USER
    else:
        user = pwd.getpwuid(os.geteuid()).pw_name
    os.chmod(folder, 0o700)
    log = folder / "server.log"
    try:
        _as_server_user([initdb, "-D", str(data), "-U", user, "--auth=trust", "--encoding=UTF8",
                         "--no-sync", "--locale=C"])
        # The free port is only free when probed: a test worker running beside this one may take it first
        # (each xdist worker starts its own server), so a port found taken is tried again with another.
        for tries_left in reversed(range(PORT_TRIES)):
            port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={folder} "
                       "-c max_connections=200 -c shared_buffers=64MB")
            if not durable:
                options += " -c fsync=off -c full_page_writes=off"
            try:
                _as_server_user([pg_ctl, "start", "-D", str(data), "-w", "-t", "60", "-o", options,
                                 "-l", str(log)])
                return PostgresServer(folder, port, user)
            except subprocess.CalledProcessError:
                taken = log.exists() and "could not bind" in log.read_text(errors="replace")
                if not taken or not tries_left:
                    raise
                log.unlink()
    except subprocess.CalledProcessError as exc:
        detail = log.read_text(errors="replace") if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{detail}") from exc
    raise AssertionError("unreachable: the last try returns or raises")


def drop_schema(server: PostgresServer, url: str) -> None:
    import psycopg

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
