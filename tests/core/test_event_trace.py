"""A delivery's traceparent is kept with its event when it is stored (telemetry: the run joins the sender's
trace), never on a duplicate, on both backends."""

from __future__ import annotations

from console.core import Store

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_stored_delivery_keeps_its_traceparent_and_a_duplicate_changes_nothing(store: Store) -> None:
    assert store.ingest_deliveries([("gh", "d1", {"n": 1}, None), ("gh", "d2", {"n": 2}, None)], now=100,
                                   traces={("gh", "d1"): PARENT}) == ["stored", "stored"]
    first, second = store.find_event("gh", "d1"), store.find_event("gh", "d2")
    assert first is not None and first.trace == PARENT
    assert second is not None and second.trace is None
    assert store.ingest_deliveries([("gh", "d1", {"n": 1}, None)], now=101, traces={("gh", "d1"): OTHER}) == [
        "duplicate"]
    again = store.find_event("gh", "d1")
    assert again is not None and again.trace == PARENT
    store.ingest("chat", "c1", {"text": "hi"}, now=102)
    plain = store.find_event("chat", "c1")
    assert plain is not None and plain.trace is None
