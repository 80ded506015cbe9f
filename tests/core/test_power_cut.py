"""Power cuts, simulated below SQLite (tests/core/powercut.py): what survives is only what was fsynced.

Claims and finishes commit without an fsync; acks, journalled steps and the outbox's claim before a
send wait for theirs. These tests cut the power at the moments that matter and reboot on what the
disk kept, to show the rule that makes this safe: nothing the outside world has seen is undone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.core import Batch, Event, Store
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
        later = T + 1 + after.options.send_timeout + 1
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

    def check(now: int, image: Path | None = None) -> None:
        nonlocal cuts
        if image is None:
            cuts += 1
            vfs.write_durable(image := tmp_path / f"cut-{cuts}")
        with Store.open(image / "inbox.db") as after:
            events = {e.source_id: e for e in after.events(limit=1_000)}
            assert set(acked) <= set(events), f"cut {cuts}: an acknowledged event is missing"
            for body in sent_bodies:
                source_id = body.removeprefix("reply to ")
                assert events[source_id].status == "done", f"cut {cuts}: {body!r} left but its run is undone"
            assert after.integrity_check() == "ok"

    images: list[Path] = []

    def send(batch: Batch) -> None:
        nonlocal cuts
        sent_bodies.extend(batch.bodies)
        cuts += 1
        vfs.write_durable(image := tmp_path / f"cut-{cuts}")  # the power goes while the batch is on its way
        images.append(image)

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
            for image in images:  # checked out here: dispatch takes any error inside a send for the channel's
                check(now, image)
            images.clear()
            check(now)
        now += 1
    assert cuts >= 20 and len(sent_bodies) >= 3


operations = st.lists(
    st.sampled_from(["ingest", "ingest", "claim", "finish", "fail", "step", "dispatch", "dispatch-and-cut", "cut"]),
    min_size=1, max_size=30,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(script=operations)
def test_any_mix_of_work_and_power_cuts_keeps_every_promise(script: list[str]) -> None:
    """Whatever the order of ingests, claims, finishes, failures, journalled steps and sends, a reboot
    after a cut finds: every acknowledged event, every executed step committed, every sent reply's
    event done, no reply queued twice, and a sound file."""
    vfs = PowerCutVFS()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "live").mkdir()
        live = Store.open(root / "live" / "inbox.db", vfs=vfs.name, lease_ttl=10_000, outbox_gap=0, backoff_base=0)
        try:
            _play(script, live, vfs, root)
        finally:
            live.close()
            vfs.unregister()


def _play(script: list[str], live: Store, vfs: PowerCutVFS, root: Path) -> None:
    gen = live.acquire("A", now=T)
    assert gen is not None
    acked: list[str] = []
    running: list[Event] = []
    committed_steps: list[str] = []
    sent: list[str] = []
    cuts = 0

    def cut() -> Path:
        nonlocal cuts
        cuts += 1
        vfs.write_durable(root / f"cut-{cuts}")
        return root / f"cut-{cuts}"

    def check(image: Path | None = None) -> None:
        image = image or cut()
        with Store.open(image / "inbox.db") as after:
            events = {e.source_id: e for e in after.events(limit=1_000)}
            assert set(acked) <= set(events), "an acknowledged event is missing"
            for key in committed_steps:
                step = after.journal_step(key)
                assert step is not None and step.state == "committed", f"step {key} was undone"
            for body in sent:
                assert events[body.removeprefix("reply to ")].status == "done", f"{body!r} left, its run undone"
            bodies = [m.body for m in after.outbox_messages(limit=1_000)]
            assert len(bodies) == len(set(bodies)), "a reply was queued twice"
            assert after.integrity_check() == "ok"

    now = T
    for operation in script:
        now += 1
        if operation == "ingest":
            key = f"e{len(acked)}"
            assert live.ingest("chat", key, {"text": key}, now=now)
            acked.append(key)
        elif operation == "claim":
            running.extend(live.claim_batch("A", gen, now=now))
        elif operation in ("finish", "fail") and running:
            event = running.pop(0)
            if operation == "finish":
                assert live.finish("A", gen, [event.id], now=now, messages=[f"reply to {event.source_id}"])
            else:
                assert live.finish("A", gen, [event.id], now=now, error="the agent failed")
        elif operation == "step" and running:
            key = f"{running[0].source_id}:step"
            _, how = live.run_once(key, lambda: "done", gen=gen, now=now, event_id=running[0].id)
            if how == "executed":
                committed_steps.append(key)
        elif operation.startswith("dispatch"):
            images: list[Path] = []

            def send(batch: Batch, cut_inside: bool = operation == "dispatch-and-cut",
                     images: list[Path] = images) -> None:
                sent.extend(batch.bodies)
                if cut_inside:
                    images.append(cut())  # the power goes while the batch is on its way

            live.dispatch(send, now=now)
            for image in images:  # checked out here: dispatch takes any error inside a send for the channel's
                check(image)
        elif operation == "cut":
            check()
    check()
