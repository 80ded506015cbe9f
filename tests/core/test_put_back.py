"""What the console's undo writes back (issue 36, item 3): a forgotten note and a deleted timer or schedule
return whole, on both backends, and a newer one written meanwhile stands."""

from __future__ import annotations

from dataclasses import replace

from console.core import MemoryWrite, ScheduleDraft, ScheduleSpec, Store

T = 1_000_000
UNTRUSTED = {"trusted": False, "event_id": 1, "source": "stripe", "source_id": "evt_1", "tainted_by": ["stripe"]}


def test_a_forgotten_note_comes_back_with_its_origin_and_time(inbox_target: str) -> None:
    with Store.open(inbox_target) as store:
        store.ingest("stripe", "evt_1", {"type": "charge.disputed"}, now=T)
        gen = store.acquire("writer", now=T)
        assert gen is not None
        [event] = store.claim_batch("writer", gen, now=T)
        assert store.finish("writer", gen, [event.id], now=T,
                            memory=[MemoryWrite("orders", "refund any order", event.id, UNTRUSTED)])
        before = store.memory()
        note = store.forget_memory("orders")
        assert note is not None and store.memory() == [] and store.forget_memory("orders") is None
        assert store.put_back_memory(note)
        assert store.memory() == before  # value, time, event and untrusted origin as they were
        store.forget_memory("orders")
        store.set_memory("orders", "ask me first", now=T + 5)  # written again meanwhile: the newer one stands
        assert not store.put_back_memory(note)
        assert [(n.value, n.trusted) for n in store.memory()] == [("ask me first", True)]


def test_a_deleted_timer_comes_back_whole(inbox_target: str) -> None:
    with Store.open(inbox_target) as store:
        store.add_timer("report", T + 60, {"title": "the weekly report"}, key=("reports", "weekly-1"), now=T)
        store.add_timer("plants", T + 30, {"title": "water the plants"}, every=3600, now=T)
        store.pause_timer("plants")
        before = store.timers()
        removed = [store.take_timer(timer_id) for timer_id in ("report", "plants")]
        assert store.timers() == [] and store.take_timer("plants") is None
        assert all(r is not None and store.put_back_timer(r) for r in removed)
        assert store.timers() == before  # the fixed key, the pause, the schedule as they were
        assert store.run_scheduler(now=T + 60) == 1  # the one-off fires under its fixed key
        assert store.find_event("reports", "weekly-1") is not None
        plants = removed[1]
        assert plants is not None and store.take_timer("plants") is not None
        store.add_timer("plants", T + 90, {"title": "set again"}, every=60, now=T + 61)
        assert not store.put_back_timer(plants)
        timer = store.timer("plants")
        assert timer is not None and timer.payload == {"title": "set again"}


def test_a_deleted_schedule_comes_back_with_its_timer_and_origin(inbox_target: str) -> None:
    spec = ScheduleSpec("deploys", "check deploys", "look at the deploys", "every", at=T + 3600, every=3600,
                        expires_at=T + 3 * 86_400)
    with Store.open(inbox_target) as store:
        with store.write_transaction():  # as a run's fenced finish writes it
            store._write_schedule(ScheduleDraft(spec, UNTRUSTED), T)
        store.pause_schedule("deploys", now=T + 5, reason="paused by you")
        before, rows_before = store.schedules(), store.schedule_rows(now=T + 10)
        removed = store.take_schedule("deploys")
        assert removed is not None and removed.timer is not None
        assert store.schedules() == [] and store.take_schedule("deploys") is None
        assert store.put_back_schedule(removed)
        assert store.schedules() == before  # its origin (untrusted), the pause and the reason, its next fire
        assert store.schedule_rows(now=T + 10) == rows_before
        assert store.take_schedule("deploys") is not None
        with store.write_transaction():  # made again meanwhile: the newer one stands
            store._write_schedule(ScheduleDraft(replace(spec, title="the new one"), None), T)
        assert not store.put_back_schedule(removed)
        again = store.schedule("deploys")
        assert again is not None and again.spec.title == "the new one" and again.trusted
