"""The worker under faults of its own bookkeeping: a finish or a renewal the inbox could not take must
not leave an event `running` forever under a lease the worker keeps renewing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from console.clock import ManualClock
from console.core import Store, StoreUnavailable
from console.runtime.engine import Engine
from tests.runtime.test_engine import START, make_settings, wait_until


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
    calls = fail_first_calls(monkeypatch, "finish", 1)
    clock = ManualClock(START)
    engine = Engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        event = await wait_until(engine, lambda s: (e := s.find_event("chat", "m1")).status == "done" and e)
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
    engine = Engine(make_settings(tmp_path, lease_ttl=1), clock=clock, agent=WaitsForARenewal(), holder="w",
                    idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        await wait_until(engine, lambda s: s.find_event("chat", "m1").status == "done")
    finally:
        await engine.stop()


async def test_runs_do_not_pile_up_wake_events(tmp_path: Path) -> None:
    clock = ManualClock(START)
    engine = Engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "first", {"text": "hi"})
        await wait_until(engine, lambda s: s.counts()["done"] == 1)
        before = len(engine._wake_events)
        for number in range(20):
            await engine.ingest("chat", f"m{number}", {"text": "hi"})
            await wait_until(engine, lambda s, n=number: s.counts()["done"] == n + 2)
        # Every wake() sets each registered event: their number must not grow with the runs done.
        assert len(engine._wake_events) == before
    finally:
        await engine.stop()


async def test_an_outcome_that_cannot_be_stored_is_recorded_as_a_failed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Store.finish

    def refuses_messages(self: Store, *args: Any, **kwargs: Any) -> bool:
        if kwargs.get("messages"):
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Store, "finish", refuses_messages)
    clock = ManualClock(START)
    engine = Engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "hello"})
        event = await wait_until(engine, lambda s: (e := s.find_event("chat", "m1")).status == "pending" and e.error
                                 and e)
        assert "could not record the run's outcome (UnicodeEncodeError)" in event.error and event.attempts == 1
    finally:
        await engine.stop()
