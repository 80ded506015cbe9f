"""Each payload carries the checksum its insert wrote, on both engines and on every way in (issue 37, item 6): a
payload whose stored text changed afterwards (here by a statement that bypasses the Store: on PostgreSQL, a page's
bit rot is not the test's to make) is read as damaged, a claim refuses its run, and verify_payloads finds it. The
single and set ingests, the shared path's insert and PostgreSQL's functions each write the same checksum."""

from __future__ import annotations

from console.core import Store
from console.core.statements import payload_checksum


def test_every_way_in_writes_the_checksum_and_a_changed_payload_is_refused(store: Store) -> None:
    store.ingest("hook", "one", {"n": 1}, now=1_000)
    store.ingest_many([("hook", "two", {"n": 2}), ("hook", "three", {"n": "drei"})], now=1_000)
    store.ingest_many([("hook", "four", {"n": 4}), ("hook", "four", {"n": 4})], now=1_000)  # a key twice: waves
    rows = store.connection.execute("SELECT source_id, payload, payload_crc32 FROM inbox ORDER BY id").fetchall()
    assert [row[0] for row in rows][:4] == ["one", "two", "three", "four"]
    assert all(checksum == payload_checksum(payload) for _, payload, checksum in rows)
    with store.write_transaction(guarded=False):
        store.connection.execute("UPDATE inbox SET payload = ? WHERE source_id = 'two'", ('{"n":3}',))
    two = store.find_event("hook", "two")
    assert two is not None and two.damaged and two.payload is None
    assert store.verify_payloads().damaged == [two.id]
    gen = store.acquire("worker", now=2_000)
    assert gen is not None
    claimed = store.claim_batch("worker", gen, now=2_000)
    assert sorted(event.source_id for event in claimed) == ["four", "one", "three"]
    dead = store.event(two.id)
    assert dead is not None and (dead.status, dead.dead_reason) == ("dead", "damaged")
    assert [attempt.kind for attempt in store.history(two.id)] == ["claim", "dead"]
    assert store.damaged_events() == [two.id]
