"""Issue 22: a refused redelivery costs a read. Its count (the duplicate ledger) is held in memory and written
with the store's next write of the inbox's flow, at close, or once enough of it waited; a crash may lose that
count, never an event."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from console.core import Store
from console.core.intake import REFUSAL_HOLD_SECONDS, REFUSALS_HELD

T = 1_700_000_000
HOLDER = "worker:1"


def written_duplicates(other: Store, source_id: str) -> int:
    """What another connection reads: only what was committed."""
    event = other.find_event("github", source_id)
    assert event is not None
    return event.duplicates


def row_version(store: Store) -> object:
    """What changes when anything writes: SQLite's count of changed rows on the connection; the stored row's
    version on PostgreSQL (its xmin: a refused copy there is a transaction that writes nothing)."""
    if store.backend == "sqlite":
        return store.connection.total_changes()
    return store.connection.execute("SELECT xmin::text FROM inbox WHERE source_id = 'd-1'").fetchall()


def test_a_refusal_writes_nothing_and_this_store_still_counts_it(store: Store) -> None:
    assert store.ingest("github", "d-1", {"v": 1}, now=T)
    with store.reopen() as other:
        before = row_version(store)
        for n in range(3):
            assert store.ingest("github", "d-1", {"v": 2}, now=T + n) is False
        assert row_version(store) == before  # three refusals, and the stored row was not written
        assert written_duplicates(other, "d-1") == 0
        seen = store.find_event("github", "d-1")
        assert seen is not None and seen.duplicates == 3 and seen.payload == {"v": 1}
        assert [e.duplicates for e in store.events()] == [3]
        assert store.event(seen.id) == seen
        # The next ingest that stores writes the held count in its own transaction.
        assert store.ingest("github", "d-2", {"v": 1}, now=T + 5)
        assert written_duplicates(other, "d-1") == 3
        row = store.connection.execute(
            "SELECT last_duplicate_at FROM inbox WHERE source = 'github' AND source_id = 'd-1'").fetchall()
        assert row == [(T + 2,)]
        assert store.find_event("github", "d-1") == other.find_event("github", "d-1")


def test_a_claim_a_finish_and_close_write_the_held_count(store: Store) -> None:
    gen = store.acquire(HOLDER, now=T)
    assert gen is not None
    store.ingest_many([("github", "a", {}), ("github", "b", {}), ("github", "c", {})], now=T)
    with store.reopen() as other:
        assert store.ingest("github", "a", {}, now=T) is False
        batch = store.claim_batch(HOLDER, gen, now=T)
        assert written_duplicates(other, "a") == 1
        assert store.ingest("github", "b", {}, now=T) is False
        assert store.finish(HOLDER, gen, [e.id for e in batch], now=T)
        assert written_duplicates(other, "b") == 1
        assert store.ingest("github", "c", {}, now=T) is False
        assert store.ingest("github", "c", {}, now=T) is False
        store.close()
        assert written_duplicates(other, "c") == 2


def test_a_count_held_too_long_or_for_too_many_keys_is_written_at_the_next_refusal(store: Store) -> None:
    store.ingest_many([("github", f"k-{n}", {}) for n in range(REFUSALS_HELD)], now=T)
    with store.reopen() as other:
        assert store.ingest("github", "k-0", {}, now=T) is False
        assert store.ingest("github", "k-0", {}, now=T + REFUSAL_HOLD_SECONDS - 1) is False
        assert written_duplicates(other, "k-0") == 0
        assert store.ingest("github", "k-1", {}, now=T + REFUSAL_HOLD_SECONDS) is False  # the first waited long enough
        assert (written_duplicates(other, "k-0"), written_duplicates(other, "k-1")) == (2, 1)
        for n in range(REFUSALS_HELD - 1):
            assert store.ingest("github", f"k-{n}", {}, now=T + 100) is False
        assert written_duplicates(other, f"k-{REFUSALS_HELD - 2}") == 0
        assert store.ingest("github", f"k-{REFUSALS_HELD - 1}", {}, now=T + 100) is False  # the 1,000th key held
        assert written_duplicates(other, f"k-{REFUSALS_HELD - 1}") == 1
        assert written_duplicates(other, "k-0") == 3


_REFUSER = textwrap.dedent("""
    import sys, time
    from console.core import Store
    store = Store.open(sys.argv[1])
    store.ingest("github", "kept", {"v": 1}, now=1)
    for n in range(5):
        assert store.ingest("github", "kept", {"v": 2}, now=2) is False
    print("refused", flush=True)
    time.sleep(60)
""")


def test_a_crash_loses_at_most_the_held_count_never_the_event(db_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", _REFUSER, str(db_path)], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "refused"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    with Store.open(db_path) as after:
        event = after.find_event("github", "kept")
        assert event is not None and event.payload == {"v": 1}
        assert event.duplicates == 0  # the five refusals were only counted in the killed process
        assert after.ingest("github", "kept", {"v": 3}, now=3) is False


def test_a_bad_payload_under_a_stored_key_is_a_refused_copy_and_under_a_new_key_bad_input(store: Store) -> None:
    assert store.ingest("github", "d-1", {"v": 1}, now=T)
    assert store.ingest("github", "d-1", {1: "not a JSON object key"}, now=T) is False
    try:
        store.ingest("github", "d-2", {1: "not a JSON object key"}, now=T)
    except ValueError as exc:
        assert "not a string" in str(exc)
    else:
        raise AssertionError("a bad payload under a new key was stored")
    assert store.find_event("github", "d-2") is None
    seen = store.find_event("github", "d-1")
    assert seen is not None and seen.duplicates == 1


def test_an_ingest_on_postgresql_is_one_round_trip(pg_store: Store) -> None:
    conn = pg_store.connection
    before = conn.statements
    assert pg_store.ingest("github", "d-1", {"v": 1}, now=T)
    assert pg_store.ingest("github", "d-1", {"v": 1}, now=T) is False
    assert conn.statements - before == 2  # one each: the new event's and the refused copy's
    with pg_store.reopen() as other:
        event = other.find_event("github", "d-1")
        assert event is not None and event.payload == {"v": 1}
