from console.core import Store
from tests.core.backends import durability_is_full


def test_ingest_refuses_second_copy(store: Store) -> None:
    assert store.ingest("github", "delivery-1", {"pr": 1}, now=10) is True
    assert store.ingest("github", "delivery-1", {"pr": 1}, now=11) is False
    events = store.events()
    assert [(e.source_id, e.duplicates) for e in events] == [("delivery-1", 1)]


def test_a_refused_copy_is_counted_and_full_durability_is_restored(store: Store) -> None:
    assert store.ingest("github", "d-2", {}, now=1) is True
    for n in range(3):
        assert store.ingest("github", "d-2", {"again": n}, now=2 + n) is False
    event = store.find_event("github", "d-2")
    assert event is not None and event.duplicates == 3 and event.payload == {}
    assert durability_is_full(store)
