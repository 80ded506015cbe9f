"""The audit trail's head reaches the owner with the daily digest (issue 31 item 7), from the runtime whatever the
agent writes: a real engine (the offline agent), a real inbox file, the digest timer's event."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.core import Store
from tests.edges.phone_harness import START, phone_settings, running, stored

DAY = 86_400
PIN = "Audit trail: its head is row"


async def test_the_digest_carries_the_head_when_the_trail_moved_and_stays_quiet_when_not(tmp_path: Path) -> None:
    clock = ManualClock(START)
    settings = phone_settings(tmp_path, {"type": "file", "path": str(tmp_path / "out.txt")})
    with Store.open(settings.db) as store:
        store.request_approval("apr-1", "deploy web", now=START - 100, expires_in=600)
        assert store.answer_approval("apr-1", "no", now=START - 90, via="cli") == "no"
        seq, _ = store.audit_head()
        store.add_timer("daily-digest", START, {"task": "digest"})
    async with running(settings, clock, {}) as engine:
        [pin] = await stored(engine, lambda s: [m.body for m in s.outbox_messages() if m.body.startswith(PIN)],
                             "the digest's pin")
        shown_seq, shown_head = pin.removeprefix(f"{PIN} ").split(". ")[0].split(", hash ")
        assert int(shown_seq) >= seq and f"`agent-console audit --verify --against {shown_head}`" in pin
        assert await engine.read(lambda s: s.audit_pin(shown_head)) is None  # a row of the trail, when it was sent
        clock.advance(2 * DAY)  # a day with no row written: the head the owner has still stands
        with Store.open(settings.db) as other:  # a one-off digest timer due now, written as the CLI would
            other.add_timer("another-digest", START + 2 * DAY, {"task": "digest"})
        engine.wake()
        await stored(engine, lambda s: s.counts()["done"] == 2, "the second digest's run")
        pins = await engine.read(lambda s: [m.body for m in s.outbox_messages() if m.body.startswith(PIN)])
        assert pins == [pin]
