"""Issue 22: what one event's ingest -> claim -> finish costs on SQLite, counted in statements.

The cycle is fsync-bound on a quiet disk only while its CPU stays small: each statement is a few microseconds,
and the per-write work added since (the move mark read in every write transaction, the caps, the chat
conversation a reply answers) made a finish that queues nothing read the caps' count and the conversation
anyway. These budgets say what each step may run, so the next addition is a decision, not a drift."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from console.core import Store

NOW = 1_700_000_000
HOLDER = "worker:1"


def statements(store: Store, step: Callable[[], Any]) -> list[str]:
    seen: list[str] = []

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        seen.append(" ".join(sql.split()))
        return True

    store.connection.exec_trace = trace
    try:
        step()
    finally:
        store.connection.exec_trace = None
    return seen


def test_one_event_cycle_runs_a_bounded_number_of_statements(sqlite_store: Store) -> None:
    store = sqlite_store
    gen = store.acquire(HOLDER, now=NOW)
    assert gen is not None
    ingest = statements(store, lambda: store.ingest("chat", "c-1", {"text": "hello"}, now=NOW))
    claimed: list[Any] = []
    claim = statements(store, lambda: claimed.extend(store.claim_batch(HOLDER, gen, now=NOW)))
    assert [event.source_id for event in claimed] == ["c-1"]
    finish = statements(store, lambda: store.finish(HOLDER, gen, [claimed[0].id], now=NOW))
    assert store.counts()["done"] == 1
    # ingest: BEGIN, one read (is the key stored, is there a move mark), the INSERT, COMMIT
    assert len(ingest) <= 4, ingest
    # claim (SqliteBackend.try_claim): synchronous=NORMAL, BEGIN, one read (the lease, the mark and the three
    # probes: lost, retry, alone), the fresh pick, the claiming UPDATE, its history line, COMMIT, synchronous=FULL
    assert len(claim) <= 8, claim
    # finish (try_finish): synchronous=NORMAL, BEGIN, one read (the lease and the mark), the UPDATE, its history
    # line, COMMIT, synchronous=FULL
    assert len(finish) <= 7, finish
    assert not any("cap_uses" in sql or "source IN" in sql for sql in finish), finish


def test_a_finish_with_a_message_still_counts_it_and_answers_its_chat(sqlite_store: Store) -> None:
    store = sqlite_store
    gen = store.acquire(HOLDER, now=NOW)
    assert gen is not None
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="1",
                            events=[("42:7", {"kind": "chat", "text": "hello", "owner": True})])
    claimed = store.claim_batch(HOLDER, gen, now=NOW)
    finish = statements(store, lambda: store.finish(HOLDER, gen, [claimed[0].id], now=NOW, messages=["hi"]))
    assert any("cap_uses" in sql for sql in finish)
    assert [m.body for m in store.outbox_messages()] == ["hi"]
    assert store.connection.execute("SELECT reply_to FROM outbox").fetchall() == [("telegram:42:7",)]
