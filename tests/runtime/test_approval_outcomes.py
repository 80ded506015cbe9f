"""What became of an answered approval reaches the owner at once: the run that holds the outcome speaks in the
urgent lane instead of waiting out the outbox's send gap (it once waited "in 59m18s"). End to end: the engine
on a real file with a manual clock, the built-in agent and the example shop server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.runtime.engine import Engine
from tests.runtime.test_engine import START, make_settings, sent_bodies
from tests.support import read_until as wait_until


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    eng = build_engine(make_settings(tmp_path, outbox_gap=3600, approval_expiry=600), clock=ManualClock(START),
                             holder="test-worker", idle_cap=0.1, install_defaults=False)
    await eng.start()
    try:
        yield eng
    finally:
        await eng.stop()


@pytest.mark.parametrize(("answer", "report"), [
    ("yes", 'Done: mcp__shop__refund(order="881")'),
    ("no", 'Nothing done: mcp__shop__refund(order="881") was declined'),
    ("expired", 'Nothing done: the approval for mcp__shop__refund(order="881") expired unanswered'),
])
async def test_the_outcome_of_an_answered_approval_is_sent_at_once_not_after_the_gap(
    engine: Engine, answer: str, report: str
) -> None:
    clock = engine.clock
    assert isinstance(clock, ManualClock)
    await engine.write(lambda s: s.queue_message("earlier update", now=clock.now()))
    await wait_until(engine, lambda s: sent_bodies(s) == ["earlier update"])  # the send gap starts now
    await engine.ingest("chat", "c1", {"text": "refund order 881"})
    [pending] = await wait_until(engine, lambda s: s.pending_approvals())
    clock.advance(30)
    if answer == "expired":
        clock.advance(600)
        engine.wake()
    else:
        assert await engine.answer(pending.request_id, answer) == answer
    # Sent while the gap still has most of its hour to run: the clock never moves past it.
    sent = await wait_until(engine, lambda s: [b for b in sent_bodies(s) if b.startswith(report)],
                            limit=20)
    assert len(sent) == 1
    assert clock.now() - START < 3600
    [message] = await engine.read(lambda s: [m for m in s.outbox_messages() if m.body.startswith(report)])
    assert message.urgent and message.status == "sent"
    asker = await engine.read(lambda s: s.find_event("chat", "c1"))
    answered = await engine.read(lambda s: s.find_event("approval", pending.request_id))
    assert answered is not None and message.event_id == answered.id != asker.id  # filed under the outcome
