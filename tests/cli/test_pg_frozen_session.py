"""A PostgreSQL session the server ended while its process was frozen (issue 37 item 2): a CLI write stopped with
Ctrl-Z inside its transaction and resumed after the server's idle-in-transaction timeout (SQLSTATE 25P03) ends in
one line, exit 2, never psycopg's 45-line traceback; nothing of the write is kept.

Real processes and a real server: the test holds a lock on the row the command writes so that its transaction
waits for it, freezes the command (SIGSTOP), lets the lock go (the command's transaction takes it and runs its
statement, then sits idle, its process frozen before its commit), waits until the server has ended that
session, and resumes the command (SIGCONT)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from console.core import Store
from tests.cli.helpers import isolated_env
from tests.pg_server import PostgresServer
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def admin(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


def waiting_for_a_lock(admin: psycopg.Connection[Any]) -> int | None:
    """The backend of an agent-console session waiting for a lock, if one is."""
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'agent-console' "
                         "AND wait_event_type = 'Lock'").fetchall()
    return int(rows[0][0]) if rows else None


def frozen_past_the_idle_timeout(command: subprocess.Popen[str], admin: psycopg.Connection[Any], lock: str) -> None:
    """Freeze `command` inside its write transaction, where `lock` (a statement an admin transaction holds a lock
    with) makes it wait, and wait until the server has ended that session once idle (25P03)."""
    # The lock is held on a connection of its own: a transaction reads pg_stat_activity once, as of its start.
    with psycopg.connect(str(admin.info.dsn), autocommit=True) as locker, locker.transaction():
        locker.execute(lock)
        pid = wait_until(lambda: waiting_for_a_lock(admin), "the command to wait for the lock")
        command.send_signal(signal.SIGSTOP)
    wait_until(lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall(),
               "the server to end the frozen command's idle transaction", limit=60)


def test_a_cli_write_frozen_past_the_idle_timeout_ends_in_one_line(
    tmp_path: Path, postgres_url: str, admin: psycopg.Connection[Any]
) -> None:
    with Store.open(postgres_url) as store:
        store.set_memory("k", "before", now=1)
        schema = store.storage.target.schema  # type: ignore[attr-defined]
    env = isolated_env(tmp_path)
    command = subprocess.Popen([sys.executable, "-m", "console", "--db", postgres_url, "memory", "set", "k", "v"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Frozen after its statement, before its commit: the row lock it waited for taken and its insert done.
        frozen_past_the_idle_timeout(command, admin, f'SELECT 1 FROM "{schema}".memory WHERE key = \'k\' FOR UPDATE')
        command.send_signal(signal.SIGCONT)
        out, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.send_signal(signal.SIGCONT)
            command.kill()
            command.wait()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert command.returncode == 2 and "cannot be" in err and out == ""
    with Store.open(postgres_url) as store:
        assert [(note.key, note.value) for note in store.memory()] == [("k", "before")]
