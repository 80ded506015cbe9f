"""An ingest that found the writers' lock taken commits without waiting for the flush and waits for it once the lock
is released (PgConnection.locked_then_flushed). Under synchronous replication a durable commit also waits for the
standby, so that wait must too: an ingest is not answered `stored` before the standby has it.

A throwaway server of its own: the test names a synchronous standby that never connects ('ghost'), a server-wide
setting the session's shared server must not see."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from console.core import Store
from tests.pg_server import PostgresServer, start_server
from tests.support import wait_until

T = 1_700_000_000


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


def _name_standby(admin: psycopg.Connection[tuple[object, ...]], names: str) -> None:
    admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    admin.execute("SELECT pg_reload_conf()")


def _waits_for_the_standby(admin: psycopg.Connection[tuple[object, ...]], pid: int) -> bool:
    row = admin.execute("SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row == (True,)


def _durable_commits_wait_for_the_standby(admin: psycopg.Connection[tuple[object, ...]], url: str) -> bool:
    """A durable commit on a fresh session waits for the standby (the server has taken the setting in). Its wait is
    then cut short (PostgreSQL warns, and the commit stays, locally)."""
    with psycopg.connect(url, autocommit=True) as probe:
        pid = probe.info.backend_pid
        done = threading.Event()
        commit = threading.Thread(target=lambda: (probe.execute("INSERT INTO probe VALUES (1)"), done.set()),
                                  daemon=True)
        commit.start()
        waits = wait_until(lambda: "committed" if done.is_set() else "waits" if _waits_for_the_standby(admin, pid)
                           else None, "the probe to commit or to wait for the standby")
        if waits == "waits":
            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        commit.join(timeout=30)
    return waits == "waits"


def test_a_lock_waiting_ingest_waits_for_the_synchronous_standby(own_server: PostgresServer) -> None:
    store = Store.open(own_server.inbox_url())
    schema = store.connection.target.schema
    key = int(store.connection.target.lock_key)
    waiter = store.connection.raw.info.backend_pid
    admin = psycopg.connect(own_server.url, autocommit=True)
    holder = psycopg.connect(own_server.url, autocommit=True)
    try:
        admin.execute("CREATE TABLE probe (n int)")
        # Stands in for a flush by anybody else that passes the ingest's commit before it asks whether its commit is
        # on disk (a busy server does that at random): a transaction that drops a table it made flushes its commit to
        # the local disk whatever synchronous_commit says, and does not wait for a standby when it is off.
        admin.execute("CREATE FUNCTION public.flush_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "CREATE TABLE public.made_and_dropped (); DROP TABLE public.made_and_dropped; RETURN NULL; "
                      "END $$")
        admin.execute(f'CREATE TRIGGER flush_at_commit AFTER INSERT ON "{schema}".inbox '
                      "FOR EACH ROW EXECUTE FUNCTION public.flush_at_commit()")
        _name_standby(admin, "ghost")
        wait_until(lambda: _durable_commits_wait_for_the_standby(admin, own_server.url),
                   "durable commits to wait for the named standby")
        holder.execute("SET synchronous_commit = local")  # the holder's own commit must not wait for the ghost
        holder.execute(f"BEGIN; SELECT pg_advisory_xact_lock({key})")
        answers: list[bool] = []
        ingest = threading.Thread(target=lambda: answers.append(store.ingest("github", "e-1", {}, now=T)),
                                  daemon=True)
        ingest.start()
        wait_until(lambda: admin.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
            (waiter,)).fetchone() == (1,), "the ingest to wait for the writers' lock")
        holder.execute("COMMIT")
        wait_until(lambda: answers or _waits_for_the_standby(admin, waiter),
                   "the ingest to answer or to wait for the standby")
        assert answers == [], "the ingest answered before any standby confirmed it"
        _name_standby(admin, "")  # synchronous replication off: the waits end
        ingest.join(timeout=30)
        assert answers == [True]
    finally:
        holder.close()
        admin.close()
        store.close()
