"""Facts only the PostgreSQL backend has: its query plans, one schema per inbox, the writers' lock a
frozen process cannot keep, and how a URL is read. Behaviour shared with SQLite is tested once, for
both, by the rest of tests/core."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from console.core import Store, StoreError
from console.core.pg import PgConnection
from console.core.pg_target import parse_target
from tests.pg_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
T = 1_000_000


def analysed(store: Store, *, done: int, pending: int) -> None:
    """An inbox shaped like a long-lived one (most events finished), with fresh planner statistics."""
    store.ingest_many([("chat", f"old-{n}", {}) for n in range(done)], now=T)
    store.connection.execute("UPDATE inbox SET status = 'done' WHERE source = 'chat'")
    store.ingest_many([("chat", f"new-{n}", {}) for n in range(pending)], now=T)
    store.connection.execute("ANALYZE")


# A partial index holds only rows of its status; inbox_status_id is searched by status. Either way a
# claim reads the events of the status it claims, never the finished ones that make up most of an inbox.
BOUNDED = {"inbox_fresh": None, "inbox_retry": None, "inbox_alone": None, "inbox_running": None,
           "inbox_status_id": "status = ", "inbox_pkey": "id = "}


def test_claims_read_only_what_they_claim_by_their_indexes(pg_store: Store) -> None:
    analysed(pg_store, done=3_000, pending=5)
    plans = pg_store.explain_claim()
    assert set(plans) == {"lost", "due_retry", "hand_retry", "claim_fresh", "claim_one"}
    for name, lines in plans.items():
        text = " | ".join(lines)
        assert "Seq Scan on inbox" not in text, (name, text)
        used = [index for index in BOUNDED if f"using {index} on inbox" in text]
        assert used, (name, text)
        condition = BOUNDED[used[0]]
        assert condition is None or f"Index Cond: ({condition}" in text or f"Index Cond: (inbox.{condition}" in text, (
            name, text)
    assert "inbox_pkey" in " ".join(plans["claim_one"])


def test_a_batch_is_stored_claimed_finished_and_logged_in_statements_that_do_not_grow_with_it(
    pg_store: Store
) -> None:
    """Each statement is a round trip and a plan on PostgreSQL: a batch of 100 costs what a batch of 2 does."""
    connection = pg_store.connection
    assert isinstance(connection, PgConnection)
    gen = pg_store.acquire("me", now=T)
    assert gen
    cost = {}
    for size in (2, 100):
        before = connection.statements
        assert all(pg_store.ingest_many([("chat", f"{size}-{n}", {"n": n}) for n in range(size)], now=T))
        storing = connection.statements - before
        before = connection.statements
        claimed = pg_store.claim_batch("me", gen, now=T)
        claiming = connection.statements - before
        assert len(claimed) == size
        before = connection.statements
        assert pg_store.finish("me", gen, [e.id for e in claimed], now=T,
                               notes={claimed[0].id: "first"}) is True
        cost[size] = (storing, claiming, connection.statements - before)
    assert cost[100] == cost[2], cost
    assert pg_store.counts()["done"] == 102
    history = pg_store.history(claimed[0].id)
    assert [(a.kind, a.detail) for a in history] == [("claim", "attempt 1"), ("finish", "first")]
    ids = [e.id for e in claimed]
    finishes = [row[0] for row in connection.execute(
        "SELECT event_id FROM attempts WHERE kind = 'finish' AND event_id = ANY(?) ORDER BY id", (ids,))]
    assert finishes == ids  # one history line each, written in the batch's order


def test_status_counts_read_the_kept_counts_not_the_events(pg_store: Store) -> None:
    analysed(pg_store, done=3_000, pending=5)
    plan = pg_store.query_plan("SELECT status, n FROM inbox_counts")
    assert not any(" on inbox " in f"{line} " or line.endswith(" on inbox") for line in plan), plan
    assert pg_store.counts() == {"pending": 5, "running": 0, "done": 3_000, "dead": 0, "discarded": 0}
    assert pg_store.integrity_problems() == []


def test_an_events_replies_are_read_by_their_index(pg_store: Store) -> None:
    pg_store.connection.execute(
        "INSERT INTO outbox (body, created_at, event_id) SELECT 'reply', 1, n % 500 FROM generate_series(1, 20000) n")
    pg_store.connection.execute("ANALYZE")
    plan = " ".join(pg_store.query_plan("SELECT id FROM outbox WHERE event_id = ? ORDER BY id", (7,)))
    assert "outbox_event" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize("page", [{"order": "status", "start": ("m", 10)}, {"order": "source", "start": ("m", 10)},
                                  {"order": "status", "start": ("pending", 10)},
                                  {"order": "id", "status": "pending", "start": (10, 10)}],
                         ids=lambda page: "-".join(map(str, page.values())))
def test_a_sorted_page_reads_through_an_index_without_sorting_the_inbox(pg_store: Store, page: dict[str, Any]) -> None:
    """What events_in_order runs: inbox_status_id holds no fresh event (pg_schema 0018); a page that may hold some
    reads them as a page of their own from inbox_fresh, and only the two pages' rows are put in order."""
    analysed(pg_store, done=3_000, pending=5)
    plan = " | ".join(pg_store.query_plan(*pg_store.in_order_statement(limit=7, **page)))
    used = "inbox_source_id" if page["order"] == "source" else "inbox_status_id"
    assert used in plan and "Seq Scan" not in plan, plan
    nodes = [step.strip() for step in plan.split(" | ") if step.strip().startswith("->")]
    for at, node in enumerate(nodes):  # a sort only of a part's page (under its Limit), never of the inbox
        assert not node.startswith("->  Sort") or nodes[at + 1].startswith("->  Limit"), plan


def test_two_inboxes_share_one_database_in_their_own_schemas(postgres_server: PostgresServer) -> None:
    alice, bob = postgres_server.inbox_url("alice_inbox"), postgres_server.inbox_url("bob_inbox")
    try:
        with Store.open(alice) as a, Store.open(bob) as b:
            assert a.ingest("chat", "m-1", {"to": "alice"}, now=T)
            assert b.ingest("chat", "m-1", {"to": "bob"}, now=T)  # the same key: another inbox
            assert a.acquire("engine-a", now=T) == 1 and b.acquire("engine-b", now=T) == 1
            assert [e.payload for e in a.events()] == [{"to": "alice"}]
            assert [e.payload for e in b.events()] == [{"to": "bob"}]
    finally:
        with psycopg.connect(postgres_server.url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS alice_inbox CASCADE")
            conn.execute("DROP SCHEMA IF EXISTS bob_inbox CASCADE")


def test_a_process_frozen_inside_a_write_cannot_hold_the_inbox(postgres_url: str) -> None:
    """A writer SIGSTOPped between its BEGIN and its COMMIT would keep the writers' lock for as long as it
    stays frozen. The server ends its transaction once idle for a few seconds; the others write again,
    and when the frozen process wakes its commit fails and nothing it wrote is kept."""
    Store.open(postgres_url).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", FROZEN_WRITER, postgres_url], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        holder.send_signal(signal.SIGSTOP)
        with Store.open(postgres_url) as store:
            started = time.monotonic()
            assert store.ingest("chat", "after-the-freeze", {}, now=T)  # waits, at most the lock wait
            assert time.monotonic() - started < 15
            holder.send_signal(signal.SIGCONT)
            out, _ = holder.communicate("go on\n", timeout=30)
            assert "commit failed" in out
            assert [e.source_id for e in store.events()] == ["after-the-freeze"]
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGCONT)
            holder.kill()
            holder.wait(timeout=10)


FROZEN_WRITER = """
import sys
from console.core import Store
store = Store.open(sys.argv[1])
try:
    with store.storage.transaction():
        store.connection.execute("INSERT INTO memory (key, value, updated_at) VALUES ('frozen', 'x', 1)")
        print("holding", flush=True)
        sys.stdin.readline()  # frozen here by the test; woken, it is told to go on
except Exception as exc:
    print("commit failed:", type(exc).__name__, flush=True)
else:
    print("committed", flush=True)
"""


def test_a_url_names_its_schema_and_never_shows_a_password() -> None:
    target = parse_target("postgresql://me:hunter2@db.example:5433/agents?schema=ada&sslmode=require")
    assert target.schema == "ada"
    assert target.display == "postgresql://me@db.example:5433/agents?schema=ada"
    assert "hunter2" not in target.display and "schema" not in target.conninfo
    assert "sslmode=require" in target.conninfo
    assert parse_target("postgresql://db.example/agents").schema == "agent_console"
    assert parse_target("postgresql://db.example/agents", schema="bob").schema == "bob"
    with pytest.raises(StoreError, match="not a plain name"):
        parse_target("postgresql://db.example/agents?schema=x;drop")


def test_a_password_comes_from_the_variable_password_env_names(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_PG_SECRET", raising=False)
    with pytest.raises(StoreError, match="the password variable AGENT_PG_SECRET is not set"):
        Store.open(postgres_url, password_env="AGENT_PG_SECRET")
    monkeypatch.setenv("AGENT_PG_SECRET", "anything")  # the test server trusts local connections
    with Store.open(postgres_url, password_env="AGENT_PG_SECRET") as store:
        assert store.counts()["pending"] == 0


def test_a_server_that_is_not_there_is_one_clear_error() -> None:
    with pytest.raises(StoreError, match=r"cannot reach the inbox database postgresql://127\.0\.0\.1:1/x"):
        Store.open("postgresql://127.0.0.1:1/x")
