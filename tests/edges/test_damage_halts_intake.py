"""Damage met while running stops intake: a real engine, with the receiver beside it, on a real file whose
pages are overwritten under it. The worker's claim meets the damage; from then on nothing is claimed, the
receiver answers 503 (never 200 "stored"), a keyboard ingest is refused, and the engine says why once."""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import apsw
import pytest

from console.assembly import build_engine, receiver_beside
from console.clock import ManualClock
from console.core import Store
from console.core.errors import InboxDamaged
from console.notices import Notice
from tests.edges.conftest import NOW, webhook_settings
from tests.edges.signing import ENV_NAMES, SECRETS, body_for, sign
from tests.support import until, wait_until

DAMAGE_LINE = "is damaged: it failed its integrity check"


def overwrite_pages_of(path: Path, name: str) -> list[int]:
    """Garbage over every page of one table or index (the file as bytes, SQLite not involved)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        pages = [int(p) for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,))]
        size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    finally:
        conn.close()
    garbage = random.Random(3)
    with path.open("r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * size)
            handle.write(garbage.randbytes(size))
    return pages


def pending_rows(path: Path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # NOT INDEXED: the damaged index is not read
        return int(conn.execute("SELECT COUNT(*) FROM inbox NOT INDEXED WHERE status = 'pending'").fetchall()[0][0])
    finally:
        conn.close()


async def test_a_claim_that_meets_damage_stops_the_engine_and_the_receiver_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    settings = webhook_settings(db)
    settings.webhooks["secrets_file"] = str(tmp_path / "secrets.env")
    (tmp_path / "secrets.env").write_text("".join(f"{ENV_NAMES[k]}={v}\n" for k, v in SECRETS.items()))
    (tmp_path / "secrets.env").chmod(0o600)
    engine = build_engine(settings, clock=ManualClock(NOW), holder="damaged", idle_cap=0.05, install_defaults=False)
    notices: list[Notice] = []
    engine.subscribe(notices.append)
    await engine.start()
    receiver = receiver_beside(settings, engine)
    await receiver.start()
    try:
        engine.stall(True)  # nothing is claimed while the pages are overwritten
        with Store.open(db) as store:
            store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 200}) for n in range(600)], now=NOW)
            wait_until(store.shrink_wal, "a checkpoint with no reader in the way")  # the rows into the file
        overwrite_pages_of(db, "inbox_fresh")  # the index every claim of a fresh event reads
        with Store.open(db) as store:  # another commit: the engine's connections drop what they had cached
            store.set_memory("nudge", "x", now=NOW)
        engine.stall(False)
        await until(lambda: engine.mode == "halted", "the engine to halt on the damage")
        assert engine.damaged is not None and f"inbox {db} {DAMAGE_LINE}" in engine.damaged
        assert engine.last_error == engine.damaged
        assert [n.detail for n in notices if n.kind == "log" and DAMAGE_LINE in n.detail] == [engine.damaged]
        # The receiver beside it refuses every delivery, before touching the file.
        body = body_for("hmac", "after-damage")
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{receiver.url}/hooks/home", data=body,
                                 headers=sign("hmac", body, now=NOW, delivery_id="after-damage")) as response:
                assert response.status == 503
                assert DAMAGE_LINE in (await response.json())["error"]
            async with http.get(f"{receiver.url}/healthz") as response:
                assert response.status == 503
        with pytest.raises(InboxDamaged):
            await engine.ingest("chat", "typed", {"text": "from the keyboard"})
        assert receiver.counts["stored"] == 0 and receiver.writer.stats.transactions == 0
        assert engine.worker.runs == 0  # nothing was claimed, so nothing ran
    finally:
        await receiver.stop()
        await engine.stop()
    assert pending_rows(db) == 600  # no claim committed: every event is still pending, none counted an attempt
