"""A write transaction commits however long something keeps a statement's cursor alive.

SQLite refuses COMMIT while a statement is still stepping ("cannot commit transaction - SQL statements in
progress"). An insert read by returning from inside its `for row in execute(...)` loop left its statement
unfinished until the cursor was freed, which CPython usually does at once; anything else holding the cursor
(gc.get_objects() in another thread, a debugger, a traceback) turned an ingest into "the inbox is busy". Seen
once in 1,600 ingests while a leak hunt listed every object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.core import Store


class KeepingCursors:
    """The store's connection, keeping every cursor it hands out alive (as a heap walk in another thread does)."""

    def __init__(self, conn: Any) -> None:
        self._real = conn
        self.kept: list[Any] = []

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._real.execute(*args, **kwargs)
        self.kept.append(cursor)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_an_ingest_commits_while_its_insert_cursor_is_still_referenced(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        keeping = KeepingCursors(store._conn)
        store._conn = keeping  # type: ignore[assignment]
        assert store.ingest("chat", "m-1", {"text": "hello"}, now=1_000)
        assert not store.ingest("chat", "m-1", {"text": "hello"}, now=1_001)  # a refused copy: a read only
        assert store.ingest("chat", "m-2", {"text": "again"}, now=1_002)
        assert keeping.kept  # the inserts did go through the connection that keeps their cursors
    with Store.open(tmp_path / "inbox.db") as store:
        assert [event.source_id for event in store.events(limit=10)] == ["m-2", "m-1"]


def test_a_whole_cycle_commits_while_every_cursor_is_still_referenced(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        store._conn = KeepingCursors(store._conn)  # type: ignore[assignment]
        store.ingest("chat", "m-1", {"text": "hello"}, now=1_000)
        gen = store.acquire("worker", now=1_000)
        assert gen is not None
        batch = store.claim_batch("worker", gen, now=1_001)
        assert [event.source_id for event in batch] == ["m-1"]
        store.finish("worker", gen, [event.id for event in batch], now=1_002, messages=["done"])
        assert store.release("worker", gen, now=1_003)
    with Store.open(tmp_path / "inbox.db") as store:
        assert store.counts().get("done") == 1
