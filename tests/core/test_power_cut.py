"""Power cuts, simulated below SQLite (tests/core/powercut.py): what survives is only what was fsynced.

Claims and finishes commit without an fsync; acks, journalled steps and the outbox's claim before a
send wait for theirs. These tests cut the power at the moments that matter and reboot on what the
disk kept, to show the rule that makes this safe: nothing the outside world has seen is undone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Batch, Store
from tests.core.powercut import PowerCutVFS

T = 1_000_000
TTL = 30


@pytest.fixture
def vfs() -> Iterator[PowerCutVFS]:
    power_cut = PowerCutVFS()
    yield power_cut
    power_cut.unregister()


@pytest.fixture
def live(vfs: PowerCutVFS, tmp_path: Path) -> Iterator[Store]:
    (tmp_path / "live").mkdir()
    store = Store.open(tmp_path / "live" / "inbox.db", vfs=vfs.name, lease_ttl=TTL, outbox_gap=0)
    yield store
    store.close()


def reboot(vfs: PowerCutVFS, tmp_path: Path, name: str = "after") -> Store:
    vfs.write_durable(tmp_path / name)
    return Store.open(tmp_path / name / "inbox.db", lease_ttl=TTL, outbox_gap=0, backoff_base=0)


def test_the_simulated_cut_loses_what_was_not_synced(vfs: PowerCutVFS, live: Store, tmp_path: Path) -> None:
    """The control: without it the other tests could pass on a simulation that loses nothing."""
    gen = live.acquire("A", now=T)
    assert gen is not None and live.ingest("chat", "a", {"text": "hi"}, now=T)
    [event] = live.claim_batch("A", gen, now=T)
    assert live.event(event.id).status == "running"  # type: ignore[union-attr]

    with reboot(vfs, tmp_path) as after:
        kept = after.event(event.id)
        assert kept is not None and kept.payload == {"text": "hi"}  # the ack was fsynced
        assert (kept.status, kept.attempts) == ("pending", 0)  # the claim was not: it is undone
        assert after.integrity_check() == "ok"


def test_an_acknowledged_ingest_hardens_the_claims_and_finishes_before_it(
    vfs: PowerCutVFS, live: Store, tmp_path: Path
) -> None:
    gen = live.acquire("A", now=T)
    assert gen is not None and live.ingest("chat", "a", {"text": "one"}, now=T)
    [first] = live.claim_batch("A", gen, now=T)
    assert live.finish("A", gen, [first.id], now=T, messages=["reply to a"])
    assert live.ingest("chat", "b", {"text": "two"}, now=T + 1)  # acknowledged: its fsync covers the WAL so far

    with reboot(vfs, tmp_path) as after:
        assert {e.source_id: e.status for e in after.events()} == {"a": "done", "b": "pending"}
        assert [m.body for m in after.outbox_messages()] == ["reply to a"]


def test_a_message_that_left_means_its_finish_survives(vfs: PowerCutVFS, live: Store, tmp_path: Path) -> None:
    gen = live.acquire("A", now=T)
    assert gen is not None and live.ingest("chat", "a", {"text": "refund 881?"}, now=T)
    [event] = live.claim_batch("A", gen, now=T)
    assert live.finish("A", gen, [event.id], now=T, messages=["refund 881 needs your yes"])
    sent: list[Batch] = []

    def send_then_lose_power(batch: Batch) -> None:
        sent.append(batch)
        vfs.write_durable(tmp_path / "after")  # the power goes the instant the message has left

    assert live.dispatch(send_then_lose_power, now=T + 1) == 1
    with Store.open(tmp_path / "after" / "inbox.db", lease_ttl=TTL, outbox_gap=0, backoff_base=0) as after:
        assert after.event(event.id).status == "done"  # type: ignore[union-attr]
        later = T + 1 + after.send_timeout + 1
        gen_after = after.acquire("B", now=later)
        assert gen_after is not None and after.claim_batch("B", gen_after, now=later) == []  # no second run
        resent: list[Batch] = []
        assert after.dispatch(resent.append, now=later) == 1  # the send's outcome was lost: sent again...
        assert [(b.key, b.bodies) for b in resent] == [(sent[0].key, sent[0].bodies)]  # ...under the same key
        assert after.dispatch(resent.append, now=later + 1) == 0 and len(resent) == 1


def test_a_journalled_step_survives_and_the_rerun_skips_it(vfs: PowerCutVFS, live: Store, tmp_path: Path) -> None:
    gen = live.acquire("A", now=T)
    assert gen is not None and live.ingest("chat", "a", {"text": "deploy web"}, now=T)
    [event] = live.claim_batch("A", gen, now=T)
    effects: list[str] = []
    assert live.run_once("a:deploy", lambda: effects.append("deployed") or "v42", gen=gen, now=T,
                         event_id=event.id) == ("v42", "executed")

    with reboot(vfs, tmp_path) as after:
        # The step's fsync hardened the claim before it: the event is still running under generation 1.
        assert after.event(event.id).status == "running"  # type: ignore[union-attr]
        later = T + TTL + 1
        gen_after = after.acquire("B", now=later)
        assert gen_after == gen + 1
        [again] = after.claim_batch("B", gen_after, now=later)  # the lost run comes back, its attempt counted
        assert (again.id, again.attempts) == (event.id, 2)
        assert after.run_once("a:deploy", lambda: effects.append("deployed twice"), gen=gen_after, now=later,
                              event_id=event.id) == ("v42", "skipped")
        assert effects == ["deployed"]


def test_a_cut_at_every_commit_never_loses_an_ack_or_a_sent_reply(vfs: PowerCutVFS, live: Store,
                                                                  tmp_path: Path) -> None:
    """Run a small day of work and cut the power after each step in turn: whatever is rebooted,
    every acknowledged event is there, and every reply that went out belongs to a finished event."""
    gen = live.acquire("A", now=T)
    assert gen is not None
    acked: list[str] = []
    sent_bodies: list[str] = []
    cuts = 0

    def check(now: int) -> None:
        nonlocal cuts
        cuts += 1
        with reboot(vfs, tmp_path, f"cut-{cuts}") as after:
            events = {e.source_id: e for e in after.events(limit=1_000)}
            assert set(acked) <= set(events), f"cut {cuts}: an acknowledged event is missing"
            for body in sent_bodies:
                source_id = body.removeprefix("reply to ")
                assert events[source_id].status == "done", f"cut {cuts}: {body!r} left but its run is undone"
            assert after.integrity_check() == "ok"

    def send(batch: Batch) -> None:
        sent_bodies.extend(batch.bodies)
        check(now)  # the power goes while the batch is on its way

    now = T
    for n in range(6):
        key = f"e{n}"
        assert live.ingest("chat", key, {"text": key}, now=now)
        acked.append(key)
        check(now)
        for event in live.claim_batch("A", gen, now=now):
            check(now)
            assert live.finish("A", gen, [event.id], now=now, messages=[f"reply to {event.source_id}"])
            check(now)
        if n % 2:
            live.dispatch(send, now=now)
            check(now)
        now += 1
    assert cuts >= 20 and len(sent_bodies) >= 3
