"""Errors translated at the seam (issue 37 item 2): on PostgreSQL every error that means "the inbox's server or
session is gone, or cannot serve now" comes out of the Store as StoreUnavailable, one kind for every caller (the
worker tries again, the receiver answers 503, a command prints one line), never a psycopg error and its traceback.

One test per SQLSTATE class named, each against a real server of this module's own (tests/pg_server.py): the
crash and shutdown tests take the whole server down, so it is not the session's shared one. The last test stops
the server for good."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from console.core import Store, StoreUnavailable
from console.core.pg import session_gone
from tests.pg_server import PostgresServer, start_server
from tests.support import wait_until

T = 1_000_000


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    started = start_server()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def admin(server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(server.url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def store(server: PostgresServer) -> Iterator[Store]:
    with Store.open(server.inbox_url()) as opened:
        yield opened


def backend_pid(store: Store) -> int:
    return int(store.connection.raw.info.backend_pid)


def gone(admin: psycopg.Connection[Any], pid: int) -> bool:
    return not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall()


def interrupted_mid_statement(
    store: Store, admin: psycopg.Connection[Any], interrupt: Callable[[int], object]
) -> list[BaseException]:
    """What the store raised when `interrupt` (given its backend's pid) struck during a long statement."""
    pid = backend_pid(store)
    caught: list[BaseException] = []

    def sleep_on_the_server() -> None:
        try:
            store.connection.execute("SELECT pg_sleep(60)")
        except BaseException as exc:
            caught.append(exc)

    sleeper = threading.Thread(target=sleep_on_the_server)
    sleeper.start()
    wait_until(lambda: admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'PgSleep'",
                                     (pid,)).fetchall(), "the statement to be under way")
    interrupt(pid)
    sleeper.join(timeout=30)
    return caught


def test_25P03_a_transaction_the_server_ended_while_its_process_was_frozen(
    store: Store, admin: psycopg.Connection[Any]
) -> None:
    pid = backend_pid(store)
    with pytest.raises(StoreUnavailable, match="cannot be"), store.write_transaction():
        store.connection.execute("SET LOCAL idle_in_transaction_session_timeout = 100")
        store.connection.execute("INSERT INTO memory (key, value, updated_at) VALUES ('frozen', 'x', 1)")
        wait_until(lambda: gone(admin, pid), "the server to end the idle transaction")
    assert store.memory() == []  # nothing of it was kept, and the next statement has a new session
    assert store.ingest("chat", "after", {}, now=T)


def test_57P01_a_session_terminated_by_the_administrator_idle_and_mid_statement(
    store: Store, admin: psycopg.Connection[Any]
) -> None:
    admin.execute("SELECT pg_terminate_backend(%s)", (backend_pid(store),))
    with pytest.raises(StoreUnavailable, match=r"terminating connection due to administrator command|closed"):
        store.events()
    assert store.ingest("chat", "after", {}, now=T)  # made again at its next statement

    caught = interrupted_mid_statement(store, admin, lambda pid: admin.execute("SELECT pg_terminate_backend(%s)",
                                                                             (pid,)))
    assert [type(exc) for exc in caught] == [StoreUnavailable]


def test_08_a_server_that_is_not_there_and_a_connection_lost_mid_statement(
    server: PostgresServer, store: Store, admin: psycopg.Connection[Any]
) -> None:
    with pytest.raises(StoreUnavailable, match="cannot reach"):
        Store.open(f"postgresql://{server.user}@127.0.0.1:1/postgres?schema=nowhere")
    # The backend killed outright: the client sees the socket close with no SQLSTATE at all.
    # the postmaster then resets every session (crash recovery)
    caught = interrupted_mid_statement(store, admin, lambda pid: os.kill(pid, signal.SIGKILL))
    assert [type(exc) for exc in caught] == [StoreUnavailable]
    assert "server closed the connection" in str(caught[0]) or "terminat" in str(caught[0])
    wait_until(lambda: _answers(server), "the server back from crash recovery")


def test_57P02_a_session_ended_by_the_crash_of_another(server: PostgresServer, store: Store) -> None:
    store.events()
    with psycopg.connect(server.url, autocommit=True) as victim:
        os.kill(int(victim.info.backend_pid), signal.SIGKILL)  # another process's backend crashes
        with pytest.raises(StoreUnavailable):
            wait_until(lambda: store.events() and False, "the crash to reach this session", limit=30)
    wait_until(lambda: _answers(server), "the server back from crash recovery")
    assert store.ingest("chat", "after-the-crash", {}, now=T)


def test_53300_too_many_connections(server: PostgresServer, admin: psycopg.Connection[Any]) -> None:
    admin.execute("DROP ROLE IF EXISTS crowded")
    admin.execute("CREATE ROLE crowded LOGIN CONNECTION LIMIT 0")
    with pytest.raises(StoreUnavailable, match="too many connections"):
        Store.open(f"postgresql://crowded@127.0.0.1:{server.port}/postgres?schema=crowded")


def test_55P03_a_lock_timeout_is_a_busy_inbox(store: Store, admin: psycopg.Connection[Any]) -> None:
    key = int(store.storage.target.lock_key)  # type: ignore[attr-defined]
    admin.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        store.connection.raw.execute("SET lock_timeout = 100")
        with pytest.raises(StoreUnavailable, match="lock timeout"):
            store.set_memory("k", "v", now=T)
    finally:
        admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
    store.set_memory("k", "v", now=T)


def test_the_classes_named_and_nothing_else() -> None:
    """What the tests above meet, and the rest of the list, by SQLSTATE; a constraint or a bug in a statement
    stays what it is."""
    for state in ("08006", "08001", "53100", "53300", "57P01", "57P02", "57P03", "57P04", "57P05", "57014", "58030",
                  "25P03", "25006", "55P03", "40001", "40P01"):
        assert session_gone(psycopg.errors.lookup(state)()), state
    for state in ("23505", "42601", "42P01", "22P02", "25P02"):
        assert not session_gone(psycopg.errors.lookup(state)()), state
    assert session_gone(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert session_gone(psycopg.InterfaceError("the connection is closed"))


def test_57P03_a_server_shutting_down_refuses_new_sessions(
    server: PostgresServer, admin: psycopg.Connection[Any]
) -> None:
    """Last: the server is stopped. A smart shutdown waits for the sessions still open (admin's); meanwhile a new
    one is refused with 57P03."""
    from tests.pg_server import _as_server_user, _binary

    _as_server_user([_binary("pg_ctl"), "stop", "-D", str(server.folder / "data"), "-m", "smart", "-W"])

    def refused() -> str | None:
        try:
            Store.open(server.inbox_url()).close()
        except StoreUnavailable as exc:
            return str(exc) if "shutting down" in str(exc) else None
        return None

    assert "the database system is shutting down" in wait_until(refused, "a new session refused")


def _answers(server: PostgresServer) -> bool:
    try:
        with psycopg.connect(server.url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False
