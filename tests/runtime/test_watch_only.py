"""A watch-only engine (issue 21.9, the console's --read-only): it reads and hears every commit, and never takes
the lease, runs, fires a timer, sends or writes anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.notices import Notice
from console.runtime.engine import WatchOnly

NOW = 1_790_000_000


async def test_a_watch_only_engine_hears_commits_and_changes_nothing(inbox_target: str, tmp_path: Path) -> None:
    db = inbox_target
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "hello"}, now=NOW - 10)
        store.add_timer("tick", NOW - 5, {}, every=60, now=NOW - 60)  # due: a scheduler would fire it
        store.queue_message("held news", now=NOW - 10)  # an outbox with no gap used: a dispatcher would send
        before = store.connection.execute("SELECT COUNT(*) FROM attempts").fetchall()
    engine = build_engine(Settings(db=db, instructions=tmp_path / "none.md"), clock=ManualClock(NOW), holder="w",
                          idle_cap=0.1, watch_only=True)
    heard: list[Notice] = []
    engine.subscribe(heard.append)
    await engine.start()
    try:
        assert engine.mode == "watching"
        # The reader thread runs reads in order: once a read queued after the watcher's first look returns, that
        # look has been taken, so the commit below is one it has not seen.
        for _ in range(2):
            await engine.read(lambda s: s.data_version())
        with Store.open(db) as other:  # another process's commit is heard
            other.ingest("chat", "m2", {"text": "again"}, now=NOW)
        deadline = asyncio.get_running_loop().time() + 10
        while not any(n.kind == "events" and n.detail == "the inbox changed" for n in heard):
            assert asyncio.get_running_loop().time() < deadline, "the commit was not heard"
            await asyncio.sleep(0.02)  # polling the notices the watcher publishes
        assert [e.source_id for e in await engine.read(lambda s: s.events())] == ["m2", "m1"]
        with pytest.raises(WatchOnly, match="read-only"):
            await engine.write(lambda s: s.ingest("chat", "m3", {}, now=NOW))
        with pytest.raises(WatchOnly):
            await engine.ingest("chat", "m3", {})
        engine.stall(True)  # nothing to stall: it stays watching
        assert engine.mode == "watching"
    finally:
        await engine.stop()
    with Store.open(db) as store:
        assert store.lease() is None
        assert store.counts()["pending"] == 2
        assert store.outbox_counts()["queued"] == 1
        assert store.timer("tick").due == NOW - 5  # type: ignore[union-attr]
        assert store.timer("digest") is None  # no default timer installed
        assert store.connection.execute("SELECT COUNT(*) FROM attempts").fetchall() == before
