"""Property tests for ingest: any valid key and payload round-trips; anything invalid is refused whole.
The round trip and ingest_many's answers are checked on both backends (PostgreSQL stores a batch in one
statement, text arrays and all); the refusals happen before any backend is touched."""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from console.core import STATUSES, Store
from console.core.intake import MAX_KEY_CHARS

T0 = 1_000_000
LIMIT = 4_096  # a small payload limit keeps "over the limit" examples cheap
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The examples of one test share its inbox (emptied for each): a PostgreSQL schema per example would cost
# more than the examples themselves.
SHARED_INBOX = settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

keys = st.text(min_size=1, max_size=MAX_KEY_CHARS).filter(lambda k: k.strip() != "" and "\x00" not in k)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=25,
)


@contextmanager
def fresh_store(**options: Any) -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(Path(folder) / "inbox.db", **{"max_payload_bytes": LIMIT, **options})
        try:
            yield store
        finally:
            store.close()


@contextmanager
def emptied_store(target: str, **options: Any) -> Iterator[Store]:
    """The test's inbox, emptied of what the previous example stored."""
    store = Store.open(target, **{"max_payload_bytes": LIMIT, **options})
    try:
        for table in ("inbox", "attempts"):
            store.connection.execute(f"DELETE FROM {table}")
        yield store
    finally:
        store.close()


def stored_nothing(store: Store) -> bool:
    return sum(store.counts().values()) == 0 and store.events() == []


@SHARED_INBOX
@given(source=keys, source_id=keys, payload=json_values)
def test_any_valid_event_round_trips_and_is_stored_once(
    inbox_target: str, source: str, source_id: str, payload: Any
) -> None:
    with emptied_store(inbox_target) as store:
        if len(store.encode_event(source, source_id, payload).encode()) > LIMIT:
            return  # covered by the size tests
        assert store.ingest(source, source_id, payload, now=1) is True
        assert store.ingest(source, source_id, {"other": "copy"}, now=2) is False
        event = store.find_event(source, source_id)
        assert event is not None
        assert (event.source, event.source_id, event.payload) == (source, source_id, payload)
        assert event.duplicates == 1
        assert store.events() == [event]
        store.write_refusals()  # the refused copy's count is held in memory until the store's next write
        reopened = store.reopen()
        assert reopened.find_event(source, source_id) == event  # as read by another connection
        reopened.close()


@SHARED_INBOX
@given(items=st.lists(st.tuples(st.sampled_from(["github", "chat", "stripe"]), keys, json_values), max_size=12))
def test_ingest_many_answers_like_one_by_one(inbox_target: str, items: list[tuple[str, str, Any]]) -> None:
    with emptied_store(inbox_target, max_payload_bytes=1 << 20) as store:
        answers = store.ingest_many(items, now=5)
        seen: set[tuple[str, str]] = set()
        expected = []
        for source, source_id, _ in items:
            expected.append((source, source_id) not in seen)
            seen.add((source, source_id))
        assert answers == expected
        assert sum(store.counts().values()) == len(seen)
        first_payloads = {}
        for source, source_id, payload in items:
            first_payloads.setdefault((source, source_id), payload)
        for (source, source_id), payload in first_payloads.items():
            event = store.find_event(source, source_id)
            assert event is not None and event.payload == payload  # the first copy stands


@SETTINGS
@given(text=st.text(min_size=1, max_size=40), extra=st.integers(min_value=1, max_value=3))
def test_a_payload_over_the_limit_is_refused_and_one_at_it_is_stored(text: str, extra: int) -> None:
    with fresh_store() as store:
        base = len(store.encode_event("s", "x", {"blob": ""}).encode())
        unit = len(store.encode_event("s", "x", text).encode()) - 2  # as JSON: quotes off, escapes in
        copies = (LIMIT - base) // unit
        fill = text * copies + "a" * (LIMIT - base - copies * unit)  # exactly at the limit
        assert len(store.encode_event("s", "x", {"blob": fill}).encode()) == LIMIT
        with pytest.raises(ValueError, match="over the limit"):
            store.ingest("s", "over", {"blob": fill + "a" * extra}, now=1)
        assert stored_nothing(store)
        assert store.ingest("s", "at", {"blob": fill}, now=1) is True


bad_payloads = st.one_of(
    st.just(math.nan),
    st.just({"score": math.inf}),
    st.just([1, -math.inf]),
    st.just({"when": object()}),
    st.just({"tags": {"a", "b"}}),
    st.just({"raw": b"bytes"}),
    st.just({"text": "broken \ud800 surrogate"}),
    st.just({"nested": [{"deeper": [math.nan]}]}),
    st.text(min_size=1).map(lambda t: {"lossy": {1: t, "1": t + "!"}}),  # keys that collide once stringified
    st.just({("tuple", "key"): 1}),
)


@SETTINGS
@given(payload=bad_payloads, before=st.integers(min_value=0, max_value=3))
def test_an_invalid_payload_raises_value_error_and_stores_nothing(payload: Any, before: int) -> None:
    with fresh_store() as store:
        with pytest.raises(ValueError, match="payload"):
            store.ingest("chat", "m-1", payload, now=1)
        assert stored_nothing(store)
        good = [("chat", f"ok-{n}", {"n": n}) for n in range(before)]
        with pytest.raises(ValueError, match="payload"):
            store.ingest_many([*good, ("chat", "bad", payload), ("chat", "after", {})], now=1)
        assert stored_nothing(store)  # all or nothing


bad_keys = st.one_of(
    st.just(""),
    st.text(alphabet=" \t\n\r", min_size=1, max_size=5),
    st.text(min_size=MAX_KEY_CHARS + 1, max_size=MAX_KEY_CHARS + 20),
    st.text(max_size=10).map(lambda t: t + "\x00"),
    st.just("lone \udc80 surrogate"),
    st.integers(),
    st.none(),
)


@SETTINGS
@given(bad=bad_keys, where=st.sampled_from(["source", "source_id"]))
def test_an_invalid_key_raises_value_error_and_stores_nothing(bad: Any, where: str) -> None:
    source, source_id = (bad, "ok") if where == "source" else ("ok", bad)
    with fresh_store() as store:
        with pytest.raises(ValueError, match=where):
            store.ingest(source, source_id, {}, now=1)
        with pytest.raises(ValueError, match=where):
            store.ingest_many([("chat", "fine", {}), (source, source_id, {})], now=1)
        assert stored_nothing(store)


def test_a_huge_payload_under_the_default_limit_round_trips(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        payload = {"diff": "＋" * 300_000, "files": [{"name": f"f{n}.py", "lines": n} for n in range(2_000)]}
        assert store.ingest("github", "big", payload, now=1) is True
        event = store.find_event("github", "big")
        assert event is not None and event.payload == payload
        with pytest.raises(ValueError, match="over the limit of 1048576 bytes"):
            store.ingest("github", "bigger", {"diff": "＋" * 400_000}, now=1)
        assert store.find_event("github", "bigger") is None


def test_deep_nesting_is_refused_cleanly(tmp_path: Path) -> None:
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    with Store.open(tmp_path / "inbox.db") as store:
        with pytest.raises(ValueError, match="nested deeper than 100 levels"):
            store.ingest("chat", "deep", deep, now=1)
        assert stored_nothing(store)


class InboxMachine(RuleBasedStateMachine):
    """Random interleavings of ingests, runs that succeed, fail or crash, releases and dead retries.

    After every step: the O(1) status counts agree with the rows, attempts stay within the budget,
    a done event never changes again, and no event ever has two replies in the outbox.
    """

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.store = Store.open(Path(self.folder.name) / "inbox.db", lease_ttl=50, max_attempts=3, backoff_base=5,
                                backoff_max=40, seed=1)
        self.now = T0
        self.ingested: set[str] = set()
        self.done: dict[int, int] = {}  # event id -> updated_at when it finished

    def teardown(self) -> None:
        self.store.close()
        self.folder.cleanup()

    @rule(source_id=st.integers(min_value=0, max_value=15))
    def ingest(self, source_id: int) -> None:
        new = self.store.ingest("chat", f"m-{source_id}", {"n": source_id}, now=self.now)
        assert new == (f"m-{source_id}" not in self.ingested)
        self.ingested.add(f"m-{source_id}")

    @rule(seconds=st.sampled_from([1, 5, 30, 51, 200]))
    def advance(self, seconds: int) -> None:
        self.now += seconds

    @rule(holder=st.sampled_from(["A", "B", "C"]), outcome=st.sampled_from(["ok", "ok", "error", "crash"]))
    def run(self, holder: str, outcome: str) -> None:
        gen = self.store.acquire(holder, now=self.now)
        if gen is None:
            return
        batch = self.store.claim_batch(holder, gen, now=self.now)
        assert len({e.id for e in batch}) == len(batch)
        assert all(e.status == "running" and e.claim_gen == gen for e in batch)
        assert len(batch) == 1 or all(e.attempts == 1 for e in batch)  # a retry is claimed alone
        if outcome == "crash":
            return
        for event in batch:
            if outcome == "ok":
                assert self.store.finish(holder, gen, [event.id], now=self.now, messages=[f"re {event.source_id}"])
            else:
                assert self.store.finish(holder, gen, [event.id], now=self.now, error="tool failed")

    @rule(holder=st.sampled_from(["A", "B", "C"]))
    def release(self, holder: str) -> None:
        lease = self.store.lease()
        if lease is not None and lease.holder == holder:
            self.store.release(holder, lease.gen, now=self.now)

    @rule()
    def retry_dead(self) -> None:
        self.store.retry_dead_matching(now=self.now)

    @invariant()
    def books_balance(self) -> None:
        events = self.store.events(limit=100)
        assert self.store.counts() == {s: sum(e.status == s for e in events) for s in STATUSES}
        lease = self.store.lease()
        for event in events:
            assert 0 <= event.attempts <= 3
            if event.status == "running":
                assert lease is not None and event.claim_gen is not None and event.claim_gen <= lease.gen
            if event.status == "dead":
                assert event.error
            if event.id in self.done:
                assert (event.status, event.updated_at) == ("done", self.done[event.id])
            elif event.status == "done":
                self.done[event.id] = event.updated_at
        replies = Counter(m.event_id for m in self.store.outbox_messages(limit=1_000))
        assert all(count == 1 for count in replies.values())
        assert set(replies) == set(self.done)


TestInboxMachine = InboxMachine.TestCase
TestInboxMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
