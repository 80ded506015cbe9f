"""Search: events and outbox messages by what they say, bounded per query and paged."""

from __future__ import annotations

import pytest

from console.core import Store

T0 = 1_000


def _fill(store: Store) -> None:
    store.ingest_many([
        ("github", "delivery-1", {"action": "push", "repo": "me/app"}),
        ("chat", "c-1", {"text": "Water the PLANTS"}),
        ("stripe", "evt_50%_off", {"type": "charge.refunded"}),
        ("chat", "c-2", {"text": "plants again, and the app"}),
    ], now=T0)


def test_a_word_is_found_in_source_id_payload_and_error_case_insensitively(store: Store) -> None:
    _fill(store)
    assert [e.source_id for e in store.search_events("plants").events] == ["c-2", "c-1"]
    assert [e.source_id for e in store.search_events("GITHUB").events] == ["delivery-1"]
    assert [e.source_id for e in store.search_events("delivery-").events] == ["delivery-1"]
    gen = store.acquire("w", now=T0)
    assert gen is not None
    claimed = store.claim_batch("w", gen, now=T0)
    store.finish("w", gen, [claimed[0].id], now=T0 + 1, error="TimeoutError: upstream took 30s")
    assert [e.id for e in store.search_events("timeouterror").events] == [claimed[0].id]


def test_every_word_must_match_and_an_id_matches_itself(store: Store) -> None:
    _fill(store)
    assert [e.source_id for e in store.search_events("plants app").events] == ["c-2"]
    assert [e.id for e in store.search_events("#3").events] == [3]


def test_like_wildcards_in_the_text_are_taken_literally(store: Store) -> None:
    _fill(store)
    assert [e.source_id for e in store.search_events("50%").events] == ["evt_50%_off"]
    assert store.search_events("c_1").events == []  # "_" is not "any character"
    assert [e.source_id for e in store.search_events("%").events] == ["evt_50%_off"]


def test_filters_apply_and_an_empty_search_finds_nothing(store: Store) -> None:
    _fill(store)
    assert [e.source_id for e in store.search_events("app", source="chat").events] == ["c-2"]
    assert store.search_events("app", status="done").events == []
    assert store.search_events("   ").events == []
    with pytest.raises(ValueError, match="unknown status"):
        store.search_events("app", status="lost")


def test_paging_covers_every_match_once_and_each_query_looks_at_one_window(store: Store) -> None:
    store.ingest_many([("chat", f"c-{n}", {"text": "needle" if n % 7 == 0 else "hay"}) for n in range(1, 101)],
                      now=T0)
    expected = [n for n in range(100, 0, -1) if n % 7 == 0]
    found: list[int] = []
    before: int | None = None
    queries = 0
    while True:
        page = store.search_events("needle", before_id=before, limit=3, window=10)
        queries += 1
        assert len(page.events) <= 3
        # one window: every match lies within 10 ids below where the query started
        top = before if before is not None else 101
        assert all(top - 10 <= e.id < top for e in page.events)
        found += [int(e.source_id.removeprefix("c-")) for e in page.events]
        if page.next_before is None:
            break
        before = page.next_before
    assert found == expected
    assert queries >= 10  # a hundred ids in windows of ten


def test_outbox_messages_are_found_by_body_and_opened_in_full(store: Store) -> None:
    long_body = "Digest:\n" + "\n".join(f"line {n} of the refund report" for n in range(200))
    first = store.queue_message("Noted: water the plants", now=T0)
    second = store.queue_message(long_body, now=T0 + 1)
    assert [m.id for m in store.search_outbox("refund report").messages] == [second]
    assert [m.id for m in store.search_outbox("PLANTS").messages] == [first]
    message = store.outbox_message(second)
    assert message is not None and message.body == long_body
    assert store.outbox_message(999) is None
