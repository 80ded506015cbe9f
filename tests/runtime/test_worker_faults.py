"""The worker under faults of its own bookkeeping: a finish or a renewal the inbox could not take must
not leave an event `running` forever under a lease the worker keeps renewing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.core import RunOutcome, Store, StoreUnavailable
from console.runtime.engine import Engine
from tests.runtime.test_engine import START, make_settings
from tests.support import read_until


def fail_first_calls(monkeypatch: pytest.MonkeyPatch, name: str, times: int) -> list[int]:
    """Make Store.<name> raise StoreUnavailable (the disk was full, the file busy) on its first calls."""
    original = getattr(Store, name)
    calls: list[int] = []

    def flaky(self: Store, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise StoreUnavailable("the inbox file or its disk is full")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Store, name, flaky)
    return calls


async def test_a_finish_the_inbox_refused_once_is_recorded_when_it_can_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fail_first_calls(monkeypatch, "finish_run", 1)
    clock = ManualClock(START)
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        event = await read_until(engine, lambda s: (e := s.find_event("chat", "m1")).status == "done" and e)
        assert len(calls) >= 2 and event.attempts == 1
        assert await engine.read(lambda s: [m.body for m in s.outbox_messages()]) == ["Noted: hello"]
    finally:
        await engine.stop()


async def test_a_renewal_the_inbox_refused_does_not_abandon_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renewal_tried = threading.Event()
    original_renew = Store.renew

    def flaky_renew(self: Store, *args: Any, **kwargs: Any) -> bool:
        renewal_tried.set()
        raise StoreUnavailable("the inbox is busy")

    monkeypatch.setattr(Store, "renew", flaky_renew)
    assert original_renew is not flaky_renew

    class WaitsForARenewal:
        name = "waits"

        def run(self, ctx: Any) -> None:
            assert renewal_tried.wait(10), "the worker never tried to renew during the run"
            ctx.say("finished")

    clock = ManualClock(START)
    # lease_ttl=1: the worker renews every third of a second of real time during a run.
    engine = build_engine(make_settings(tmp_path, lease_ttl=1), clock=clock, agent=WaitsForARenewal(), holder="w",
                    idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        await read_until(engine, lambda s: s.find_event("chat", "m1").status == "done")
    finally:
        await engine.stop()


async def test_runs_do_not_pile_up_wake_events(tmp_path: Path) -> None:
    clock = ManualClock(START)
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "first", {"text": "hi"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        before = len(engine._wake_events)
        for number in range(20):
            await engine.ingest("chat", f"m{number}", {"text": "hi"})
            await read_until(engine, lambda s, n=number: s.counts()["done"] == n + 2)
        # Every wake() sets each registered event: their number must not grow with the runs done.
        assert len(engine._wake_events) == before
    finally:
        await engine.stop()


async def test_an_outcome_that_cannot_be_stored_is_recorded_as_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Store.finish_run

    def refuses_messages(self: Store, holder: str, gen: int, ids: Any, outcome: RunOutcome, **kwargs: Any) -> bool:
        if outcome.messages:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return original(self, holder, gen, ids, outcome, **kwargs)

    monkeypatch.setattr(Store, "finish_run", refuses_messages)
    clock = ManualClock(START)
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        event = await read_until(engine, lambda s: (e := s.find_event("chat", "m1")).status == "pending" and e.error
                                 and e)
        assert "could not record the run's outcome (UnicodeEncodeError)" in event.error and event.attempts == 1
    finally:
        await engine.stop()


async def test_the_watcher_survives_a_failed_first_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fail_first_calls(monkeypatch, "data_version", 1)
    clock = ManualClock(START)
    # A long idle cap: only the data_version watcher can wake the worker for another connection's commit.
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=60, install_defaults=False)
    await engine.start()
    try:
        await read_until(engine, lambda s: engine.mode == "active")
        with Store.open(tmp_path / "inbox.db") as other:
            other.ingest("chat", "from-elsewhere", {"text": "hi"}, now=clock.now())
        await read_until(engine, lambda s: s.find_event("chat", "from-elsewhere").status == "done")
    finally:
        await engine.stop()


def hold_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[threading.Event, threading.Event]:
    """Make Store.<name> wait, once it is called, until the test lets it go: (called, let_go)."""
    original = getattr(Store, name)
    called, let_go = threading.Event(), threading.Event()

    def held(self: Store, *args: Any, **kwargs: Any) -> Any:
        called.set()
        assert let_go.wait(10), "the test never let the call go"
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Store, name, held)
    return called, let_go


async def wait_for_thread_event(event: threading.Event) -> None:
    for _ in range(1000):
        if event.is_set():
            return
        await asyncio.sleep(0.01)  # polls a condition
    raise AssertionError("the call was never made")


async def begin_stop(engine: Engine) -> asyncio.Task[None]:
    """Start engine.stop() and return once it has begun (it decides what to release in its first step)."""
    stopping = asyncio.create_task(engine.stop())
    while not engine.stopping:
        await asyncio.sleep(0)
    return stopping


async def test_stop_during_the_first_acquire_still_releases_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called, let_go = hold_calls(monkeypatch, "acquire")
    clock = ManualClock(START)
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    await wait_for_thread_event(called)
    stopping = await begin_stop(engine)  # while the acquire is still held
    let_go.set()
    await stopping
    with Store.open(tmp_path / "inbox.db") as store:
        lease = store.lease()
        assert lease is not None and not lease.is_live(clock.now())  # released, not left to lapse


async def test_stop_while_a_claim_is_in_flight_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    class Recording:
        name = "recording"

        def run(self, ctx: Any) -> None:
            ran.extend(event.id for event in ctx.events)

    clock = ManualClock(START)
    engine = build_engine(make_settings(tmp_path), clock=clock, agent=Recording(), holder="w", idle_cap=0.1,
                    install_defaults=False)
    await engine.start()
    await read_until(engine, lambda s: engine.mode == "active")
    called, let_go = hold_calls(monkeypatch, "claim_batch")
    await engine.ingest("chat", "m1", {"text": "hi"})
    await wait_for_thread_event(called)
    stopping = await begin_stop(engine)  # while the claim is still held
    let_go.set()
    await stopping
    orphan = engine.worker._current
    if orphan is not None:  # a run started after stop() began: let it show what it does
        await orphan
    assert ran == []  # the lease was given up: running the agent now would race the next worker
    with Store.open(tmp_path / "inbox.db") as store:
        event = store.find_event("chat", "m1")
        assert event is not None and event.status == "pending"
