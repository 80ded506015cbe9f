"""retain_days: the lease holder's engine prunes old finished work once a day, on its own thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.assembly import build_engine
from console.clock import ManualClock
from console.core import Store
from tests.runtime.test_engine import START, make_settings
from tests.support import until

DAY = 86_400


def finished_long_ago(db: Path, source_id: str, at: int) -> None:
    with Store.open(db) as store:
        gen = store.acquire("an-earlier-worker", now=at)
        assert gen is not None and store.ingest("chat", source_id, {"text": f"about {source_id}"}, now=at)
        claimed = store.claim_batch("an-earlier-worker", gen, now=at)
        assert store.finish("an-earlier-worker", gen, [e.id for e in claimed], now=at)
        assert store.release("an-earlier-worker", gen, now=at)


async def test_the_engine_prunes_once_a_day_when_retain_days_is_set(tmp_path: Path) -> None:
    clock = ManualClock(START)
    settings = make_settings(tmp_path, retain_days=30)
    finished_long_ago(settings.db, "old", START - 40 * DAY)
    finished_long_ago(settings.db, "recent", START - 10 * DAY)
    engine = build_engine(settings, clock=clock, holder="me", idle_cap=0.05, install_defaults=False)
    await engine.start()
    try:
        await until(lambda: engine.maintenance.last_report is not None, "the first prune")
        report = engine.maintenance.last_report
        assert report is not None and report.payloads_cleared == 1
        old = await engine.read(lambda store: store.find_event("chat", "old"))
        recent = await engine.read(lambda store: store.find_event("chat", "recent"))
        assert old is not None and old.pruned_at == START and old.payload is None
        assert recent is not None and recent.payload == {"text": "about recent"}

        passes = engine.maintenance.passes
        clock.advance(DAY - 1)
        await until(lambda: engine.maintenance.passes >= passes + 3, "three more passes")
        assert engine.maintenance.last_report is report  # a day has not passed: not pruned again
        clock.advance(1)
        await until(lambda: engine.maintenance.last_report is not report, "the next day's prune")
        assert engine.maintenance.last_report.payloads_cleared == 0  # type: ignore[union-attr]

        second = engine.maintenance.last_report
        clock.advance(20 * DAY)  # "recent" is now 31 days old
        await until(lambda: engine.maintenance.last_report is not second, "a later prune")
        recent = await engine.read(lambda store: store.find_event("chat", "recent"))
        assert recent is not None and recent.payload is None
    finally:
        await engine.stop()


async def test_nothing_is_pruned_by_default(tmp_path: Path) -> None:
    clock = ManualClock(START)
    settings = make_settings(tmp_path)
    assert settings.retain_days == 0
    finished_long_ago(settings.db, "old", START - 400 * DAY)
    engine = build_engine(settings, clock=clock, holder="me", idle_cap=0.05, install_defaults=False)
    await engine.start()
    try:
        await until(lambda: engine.mode == "active" and engine.maintenance.passes >= 3, "active passes")
        assert engine.maintenance.last_report is None
        old = await engine.read(lambda store: store.find_event("chat", "old"))
        assert old is not None and old.payload == {"text": "about old"}
    finally:
        await engine.stop()


async def test_a_standby_engine_does_not_prune(tmp_path: Path) -> None:
    clock = ManualClock(START)
    settings = make_settings(tmp_path, retain_days=30)
    finished_long_ago(settings.db, "old", START - 40 * DAY)
    with Store.open(settings.db) as store:
        assert store.acquire("another-console", now=START + 10 * DAY) is not None  # held well past START
    engine = build_engine(settings, clock=clock, holder="me", idle_cap=0.05, install_defaults=False)
    await engine.start()
    try:
        await until(lambda: engine.mode == "standby" and engine.maintenance.passes >= 3, "standby")
        assert engine.maintenance.last_report is None
    finally:
        await engine.stop()


async def test_the_engine_truncates_a_wal_a_long_reader_left_large(tmp_path: Path) -> None:
    import subprocess

    from console.core.backend import WAL_SIZE_LIMIT
    from tests.core.workers import spawn

    clock = ManualClock(START)
    settings = make_settings(tmp_path)
    with Store.open(settings.db) as other:  # another engine holds the lease: this one is on standby and
        other.acquire("elsewhere", now=START)  # writes nothing itself, so only its maintenance can help
    engine = build_engine(settings, clock=clock, holder="me", idle_cap=0.05, install_defaults=False)
    await engine.start()
    wal = Path(f"{settings.db}-wal")
    try:
        # Standing by before the writes start: under load the worker's first acquire could otherwise still be
        # queued behind them when the WAL is cut back, and the engine still "starting".
        await until(lambda: engine.mode == "standby", "the engine to stand by")
        writer = Store.open(settings.db)
        reader = spawn("long-reader", settings.db, stdin=subprocess.PIPE)
        try:
            assert reader.stdout is not None and reader.stdin is not None
            assert reader.stdout.readline().strip() == "reading"
            batch = 0
            while wal.stat().st_size <= 2 * WAL_SIZE_LIMIT:
                writer.ingest_many([("bulk", f"{batch}-{n}", {"text": "x" * 2_000}) for n in range(200)], now=START)
                batch += 1
            # Checked before the reader lets go: from then on the engine's maintenance may cut the WAL at any moment.
            assert wal.stat().st_size > 2 * WAL_SIZE_LIMIT
            await asyncio.to_thread(reader.communicate, "let go\n", 30)
        finally:
            if reader.poll() is None:
                reader.kill()
            writer.close()
        await until(lambda: wal.stat().st_size <= WAL_SIZE_LIMIT, "the engine's maintenance to shrink the WAL")
        assert engine.mode == "standby"
    finally:
        await engine.stop()
