"""The engine end to end on a real file with a manual clock. Waits are on conditions, never on time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.runtime.engine import Engine
from tests.support import read_until, until

START = 1_790_000_000  # a fixed instant (2026-09-21 UTC)


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(db=tmp_path / "inbox.db", lease_ttl=60, outbox_gap=3600, backoff_base=5,
                                  backoff_max=60, approval_expiry=600)
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def engine(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Engine]:
    eng = build_engine(make_settings(tmp_path), clock=clock, holder="test-worker", idle_cap=0.1, install_defaults=False)
    await eng.start()
    try:
        yield eng
    finally:
        await eng.stop()


def sent_bodies(store: Store) -> list[str]:
    return [m.body for m in reversed(store.outbox_messages(status="sent"))]


async def test_chat_burst_is_one_run_and_one_reply_sent_after_the_gap(engine: Engine, clock: ManualClock) -> None:
    # An earlier send starts the gap clock, so the reply must wait out the gap.
    await engine.write(lambda s: s.queue_message("earlier update", now=clock.now()))
    await read_until(engine, lambda s: sent_bodies(s) == ["earlier update"])
    clock.advance(60)
    await engine.write(lambda s: s.ingest_many([("chat", f"m{n}", {"text": f"message {n}"}) for n in range(3)],
                                               now=clock.now()))
    await read_until(engine, lambda s: s.counts()["done"] == 3)
    claims = await engine.read(lambda s: [a for e in s.events() for a in s.history(e.id) if a.kind == "claim"])
    assert len(claims) == 3 and len({(a.gen, a.at) for a in claims}) == 1  # one claim, one run
    queued = await engine.read(lambda s: s.outbox_messages(status="queued"))
    assert len(queued) == 1 and "3 messages" in queued[0].body
    clock.advance(3600)
    engine.wake()
    await read_until(engine, lambda s: len(sent_bodies(s)) == 2)
    bodies = await engine.read(sent_bodies)
    assert bodies[1].startswith("Noted your 3 messages") and "message 2" in bodies[1]


async def test_approval_yes_runs_the_approved_call_once_and_reports(engine: Engine, clock: ManualClock) -> None:
    """The built-in agent's refund through the example shop server: asked, then run once on yes."""
    await engine.ingest("chat", "c1", {"text": "refund order 881"})
    pending = await read_until(engine, lambda s: s.pending_approvals())
    request_id = pending[0].request_id
    assert (pending[0].tool, pending[0].arguments) == ("mcp__shop__refund", {"order": "881"})
    # The question is urgent: it bypasses the outbox gap.
    await read_until(engine, lambda s: any("Approval needed" in b for b in sent_bodies(s)))
    clock.advance(30)
    assert await engine.answer(request_id, "yes") == "yes"
    await read_until(engine, lambda s: s.counts()["done"] == 2)
    step = await engine.read(lambda s: s.journal_step(f"tool:{request_id}"))
    assert step is not None and step.state == "committed" and step.executions == 1
    assert step.result["is_error"] is False and '"refunded_now": 42.5' in step.result["text"]
    messages = await engine.read(lambda s: [m.body for m in s.outbox_messages()])
    assert sum(body.startswith('Done: mcp__shop__refund(order="881")') for body in messages) == 1
    # A second tap cannot change the outcome, and nothing runs twice.
    assert await engine.answer(request_id, "no") == "yes"
    assert await engine.read(lambda s: s.journal_step(f"tool:{request_id}").executions) == 1
    assert await engine.read(lambda s: s.approval(request_id).answered_via) == "console"


async def test_approval_left_to_expire_reports_nothing_done(engine: Engine, clock: ManualClock) -> None:
    await engine.ingest("chat", "c1", {"text": "deploy web to production"})
    pending = await read_until(engine, lambda s: s.pending_approvals())
    request_id = pending[0].request_id
    clock.advance(601)
    engine.wake()
    await read_until(engine, lambda s: s.counts()["done"] == 2)
    approval = await engine.read(lambda s: s.approval(request_id))
    assert approval is not None and approval.outcome == "expired"
    assert await engine.answer(request_id, "yes") == "expired"
    messages = await engine.read(lambda s: [m.body for m in s.outbox_messages()])
    assert any("expired unanswered" in body for body in messages)
    assert await engine.read(lambda s: s.journal_step(f"perform:{request_id}")) is None


async def test_poison_goes_dead_after_three_attempts_while_healthy_events_flow(
    engine: Engine, clock: ManualClock
) -> None:
    def ended(attempt: int) -> Callable[[Store], bool]:
        # The attempt's run has ended, not merely been claimed (attempts counts from the claim): the clock must
        # not jump past the lease while it runs, or the run is fenced off and its attempt recorded as lost.
        def check(store: Store) -> bool:
            poison = store.find_event("webhook", "poison-1")
            return poison is not None and poison.attempts == attempt and poison.status != "running"
        return check

    await engine.ingest("webhook", "poison-1", {"poison": True})
    await read_until(engine, ended(1), "the first attempt's end")
    await engine.ingest("chat", "healthy-1", {"text": "hello"})
    # The healthy event is not held up behind the poison event's backoff.
    await read_until(engine, lambda s: s.find_event("chat", "healthy-1").status == "done")
    for attempt in (2, 3):
        clock.advance(120)  # past the backoff (and the lease's TTL: it is taken again, with nothing running)
        engine.wake()
        await read_until(engine, ended(attempt), f"attempt {attempt}'s end")
    poison = await read_until(engine, lambda s: (e := s.find_event("webhook", "poison-1")).status == "dead" and e)
    assert poison.attempts == 3 and "poison" in (poison.error or "")
    kinds = await engine.read(lambda s: [a.kind for a in s.history(poison.id)])
    assert kinds.count("claim") == 3 and kinds.count("error") == 3 and kinds[-1] == "dead"


async def test_a_poison_events_batch_mates_keep_their_attempt_and_run_alone(tmp_path: Path, clock: ManualClock) -> None:
    """Issue 21.6: a chat message and a poison event arrive together and are run as one batch. The run fails on
    the poison event, which alone is charged; the message runs alone at once and is done on its first attempt."""
    settings = make_settings(tmp_path)
    with Store.open(settings.db) as store:  # stored before the engine starts: one claim takes both
        store.ingest_many([("chat", "mate", {"text": "hello"}), ("webhook", "poison-1", {"poison": True})],
                          now=clock.now())
    engine = build_engine(settings, clock=clock, holder="test-worker", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        mate = await read_until(engine, lambda s: (e := s.find_event("chat", "mate")).status == "done" and e)
        poison = await engine.read(lambda s: s.find_event("webhook", "poison-1"))
        history = await engine.read(lambda s: [(a.kind, a.detail) for a in s.history(mate.id)])
    finally:
        await engine.stop()
    assert (mate.attempts, mate.error) == (1, None)
    assert [kind for kind, _ in history] == ["claim", "batch", "claim", "finish"]
    assert history[1][1] == (f"failed with its batch (#{poison.id}, poison): PoisonEventError: event {poison.id} "
                             f"(webhook/poison-1) is marked as poison; attempt not counted, runs alone next")
    assert (poison.status, poison.attempts) == ("pending", 1) and "poison" in (poison.error or "")


async def test_digest_after_an_outage_is_one_coalesced_digest(tmp_path: Path, clock: ManualClock) -> None:
    settings = make_settings(tmp_path, digest_cron="0 9 * * *", timezone="UTC")
    engine = build_engine(settings, clock=clock, holder="digest-worker", idle_cap=0.1)
    await engine.start()
    try:
        await engine.ingest("chat", "before", {"poison": True})  # something for the digest to report
        await read_until(engine, lambda s: s.find_event("chat", "before").attempts == 1)
        await engine.stop()
        clock.advance(3 * 86400 + 3600)  # three days down
        engine = build_engine(settings, clock=clock, holder="digest-worker-2", idle_cap=0.1)
        await engine.start()
        digest = await read_until(engine, lambda s: s.events(source="timer"))
        assert len(digest) == 1 and digest[0].payload["skipped"] >= 2
        await read_until(engine, lambda s: s.events(source="timer")[0].status == "done")
        messages = await engine.read(lambda s: [m.body for m in s.outbox_messages()])
        assert sum("Digest (last" in body for body in messages) == 1
    finally:
        await engine.stop()


async def test_quiet_digest_says_nothing(tmp_path: Path, clock: ManualClock) -> None:
    settings = make_settings(tmp_path, digest_cron="0 9 * * *")
    engine = build_engine(settings, clock=clock, holder="quiet", idle_cap=0.1)
    await engine.start()
    try:
        clock.advance(86400)
        engine.wake()
        await read_until(engine, lambda s: any(e.status == "done" for e in s.events(source="timer")))
        assert await engine.read(lambda s: s.outbox_messages()) == []
    finally:
        await engine.stop()


async def test_agent_exception_never_kills_the_engine(tmp_path: Path, clock: ManualClock) -> None:
    class Exploding:
        name = "exploding"

        def run(self, ctx: Any) -> None:
            raise ZeroDivisionError("boom")

    engine = build_engine(make_settings(tmp_path), clock=clock, agent=Exploding(), idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "x", {"text": "hi"})
        event = await read_until(engine, lambda s: (e := s.find_event("chat", "x")).error and e)
        assert "ZeroDivisionError: boom" in event.error
        assert engine.last_error is not None and all(not t.done() for t in engine._tasks)
    finally:
        await engine.stop()


async def test_second_engine_is_standby_until_the_lease_lapses(tmp_path: Path, clock: ManualClock) -> None:
    settings = make_settings(tmp_path)
    first = build_engine(settings, clock=clock, holder="first", idle_cap=0.1, install_defaults=False)
    second = build_engine(settings, clock=clock, holder="second", idle_cap=0.1, install_defaults=False)
    await first.start()
    try:
        # The second starts once the first holds the lease: started together, either may win it.
        await read_until(first, lambda s: first.mode == "active")
        await second.start()
        await read_until(first, lambda s: first.mode == "active" and second.mode == "standby")
        first.stall()  # stops renewing: the seed's stalled worker
        clock.advance(61)
        second.wake()
        await read_until(second, lambda s: second.mode == "active")
        lease = await second.read(lambda s: s.lease())
        assert lease is not None and lease.holder == "second" and lease.gen == 2
    finally:
        await first.stop()
        await second.stop()


async def test_stop_releases_the_lease_at_once(tmp_path: Path, clock: ManualClock) -> None:
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="leaving", idle_cap=0.1, install_defaults=False)
    await engine.start()
    await read_until(engine, lambda s: engine.mode == "active")
    await engine.stop()
    with Store.open(tmp_path / "inbox.db") as store:
        lease = store.lease()
        assert lease is not None and not lease.is_live(clock.now())
        assert store.acquire("next", now=clock.now()) == 2


async def test_the_engine_drops_expiry_timers_an_older_version_left_for_settled_approvals(
    tmp_path: Path, clock: ManualClock
) -> None:
    settings = make_settings(tmp_path)
    with Store.open(settings.db) as store:
        store.request_approval("old", "deploy web", now=START, expires_in=3600)
        store.request_approval("open", "refund 7", now=START, expires_in=3600)
        store.answer_approval("old", "yes", now=START + 1)
        # What a version before the fix left behind: the answered approval's expiry still waiting.
        store.connection.execute(
            "INSERT INTO timers (id, due, payload, ev_source, ev_id, created_at) "
            "VALUES ('expire:old', ?, '{}', 'approval', 'old', ?)", (START + 3600, START))
        assert sorted(t.id for t in store.timers()) == ["expire:old", "expire:open"]
    eng = build_engine(settings, clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await eng.start()
    try:
        assert [t.id for t in await eng.read(lambda s: s.timers())] == ["expire:open"]
    finally:
        await eng.stop()


@pytest.mark.parametrize("held_by", ["another", "nobody"])
async def test_a_stall_pressed_while_a_lease_pass_is_at_the_inbox_holds(tmp_path: Path, clock: ManualClock,
                                                                      held_by: str) -> None:
    """The stall key lands while the worker's pass waits on its acquire (a busy writer thread, a loaded machine):
    that pass ends stalled, neither standing by (another holds the lease) nor active and claiming (it took it)."""
    settings = make_settings(tmp_path)
    with Store.open(settings.db) as store:
        if held_by == "another":
            assert store.acquire("another", now=clock.now()) is not None
        store.ingest("chat", "waiting", {"text": "hello"}, now=clock.now())
    engine = build_engine(settings, clock=clock, holder="test-worker", idle_cap=0.1, install_defaults=False)
    at_the_inbox, go_on = asyncio.Event(), asyncio.Event()
    modes: list[str] = []
    real_on, real_set_mode = engine.on, engine.set_mode

    async def slow_worker_writes(role: Any, fn: Any) -> Any:  # the window widened: the pass's acquire waits here
        task = asyncio.current_task()
        if role == "writer" and task is not None and task.get_name() == "agent-console-worker":
            at_the_inbox.set()
            await go_on.wait()
        return await real_on(role, fn)

    def seen(mode: Any) -> None:
        modes.append(mode)
        real_set_mode(mode)

    engine.on, engine.set_mode = slow_worker_writes, seen  # type: ignore[method-assign]
    await engine.start()
    try:
        await asyncio.wait_for(at_the_inbox.wait(), 10)
        engine.stall()
        del modes[:]
        go_on.set()
        # That pass and the stalled worker's next ones (idle_cap apart) say what they did.
        await until(lambda: len(modes) >= 3 or modes[:1] not in ([], ["stalled"]), "the passes after the stall")
        assert set(modes) == {"stalled"} and engine.mode == "stalled", modes
        assert engine.worker.runs == 0
        assert (await engine.read(lambda s: s.find_event("chat", "waiting"))).status == "pending"
    finally:
        await engine.stop()


async def test_a_stall_pressed_after_the_pass_went_active_claims_nothing(tmp_path: Path, clock: ManualClock) -> None:
    """The stall key lands after the pass holds the lease and said "active", while its claim waits for the writer
    thread (busy with another write, a loaded machine): the claim is not made. A claim made then would start a
    run on a worker the owner has just stalled to watch a takeover, and its events would wait out the lease."""
    settings = make_settings(tmp_path)
    with Store.open(settings.db) as store:
        store.ingest("chat", "waiting", {"text": "hello"}, now=clock.now())
    engine = build_engine(settings, clock=clock, holder="test-worker", idle_cap=0.1, install_defaults=False)
    at_the_claim, go_on = asyncio.Event(), asyncio.Event()
    modes: list[str] = []
    real_on, real_set_mode = engine.on, engine.set_mode

    async def slow_claim(role: Any, fn: Any) -> Any:  # the pass's first write after "active" is its claim
        task = asyncio.current_task()
        if (role == "writer" and task is not None and task.get_name() == "agent-console-worker"
                and modes[-1:] == ["active"] and not go_on.is_set()):
            at_the_claim.set()
            await go_on.wait()
        return await real_on(role, fn)

    def seen(mode: Any) -> None:
        modes.append(mode)
        real_set_mode(mode)

    engine.on, engine.set_mode = slow_claim, seen  # type: ignore[method-assign]
    await engine.start()
    try:
        await asyncio.wait_for(at_the_claim.wait(), 10)
        engine.stall()
        del modes[:]
        go_on.set()
        await until(lambda: len(modes) >= 3 or engine.worker.runs > 0, "the passes after the stall")
        assert engine.worker.runs == 0
        assert set(modes) == {"stalled"} and engine.mode == "stalled", modes
        event = await engine.read(lambda s: s.find_event("chat", "waiting"))
        assert (event.status, event.attempts) == ("pending", 0)
    finally:
        await engine.stop()
