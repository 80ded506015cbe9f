"""The console on a damaged inbox: the engine's gate refuses it before the worker claims or a receiver listens,
and the console ends with the one line every other way in gives (exit 2)."""

from __future__ import annotations

import random
from pathlib import Path

from console.clock import ManualClock
from console.core import Store
from tests.support import pilot_until, wait_until
from tests.tui.scenes import START, make_app


async def test_the_console_refuses_a_damaged_inbox_before_it_takes_any_work(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    with Store.open(db) as store:
        store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 300}) for n in range(1_000)], now=START)
        leaves = [int(p) for (p,) in store.connection.execute(
            "SELECT pageno FROM dbstat WHERE name = 'inbox' AND pagetype = 'leaf' ORDER BY pageno")]
        size = store.connection.execute("PRAGMA page_size").fetchall()[0][0]
    with db.open("r+b") as handle:
        handle.seek((leaves[len(leaves) // 2] - 1) * size)
        handle.write(random.Random(11).randbytes(size))
    app = make_app(db, ManualClock(START), settings={"webhooks": {"enabled": True}})
    async with app.run_test() as pilot:
        await pilot_until(pilot, lambda: app.start_error is not None, "the engine's start to be refused")
    assert app.return_code == 2
    assert app.start_error is not None
    assert app.start_error.startswith(f"inbox {db} is damaged: it failed its integrity check (")
    assert app.receiver is None and not app.started  # nothing listened, nothing claimed
    with Store.open(db, read_only=True) as store:
        assert store.lease() is None


def overwrite_pages_of(path: Path, name: str) -> None:
    with Store.open(path, read_only=True) as store:
        pages = [int(p) for (p,) in store.connection.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,))]
        size = store.connection.execute("PRAGMA page_size").fetchall()[0][0]
    garbage = random.Random(13)
    with path.open("r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * size)
            handle.write(garbage.randbytes(size))


async def test_the_console_shows_why_its_engine_stopped_taking_work(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    Store.open(db).close()
    app = make_app(db, ManualClock(START))
    async with app.run_test() as pilot:
        await pilot_until(pilot, lambda: app.started, "the engine to start")
        app.engine.stall(True)  # nothing is claimed while the pages are overwritten
        with Store.open(db) as store:
            store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 200}) for n in range(600)], now=START)
            wait_until(store.shrink_wal, "a checkpoint with no reader in the way")
        overwrite_pages_of(db, "inbox_fresh")  # the index every claim of a fresh event reads
        with Store.open(db) as store:  # another commit: the engine's connections drop what they had cached
            store.set_memory("nudge", "x", now=START)
        app.engine.stall(False)
        await pilot_until(pilot, lambda: app.engine.mode == "halted", "the engine to halt on the damage")
        await pilot_until(pilot, lambda: "halted" in str(app.query_one("#lease-who").render()),
                          "the lease pane to say halted")
        assert app.engine.damaged is not None
        await pilot_until(pilot, lambda: any(app.engine.damaged == n.message for n in app._notifications),
                          "a notice saying why")
        assert app.engine.damaged.startswith(f"inbox {db} is damaged: it failed its integrity check (")
