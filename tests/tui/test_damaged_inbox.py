"""The console on a damaged inbox: the engine's gate refuses it before the worker claims or a receiver listens,
and the console ends with the one line every other way in gives (exit 2)."""

from __future__ import annotations

import random
from pathlib import Path

from console.clock import ManualClock
from console.core import Store
from tests.support import pilot_until
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
