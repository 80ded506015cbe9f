from console.core import Store


def test_ingest_refuses_second_copy(store: Store) -> None:
    assert store.ingest("github", "delivery-1", {"pr": 1}, now=10) is True
    assert store.ingest("github", "delivery-1", {"pr": 1}, now=11) is False
    events = store.events()
    assert [(e.source_id, e.duplicates) for e in events] == [("delivery-1", 1)]
