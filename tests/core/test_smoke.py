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


def test_a_batch_repeating_its_own_keys_stores_each_first_copy_once_in_order(store: Store) -> None:
    """ingest_many answers as one ingest after another would, even for keys the batch itself repeats."""
    assert store.ingest("chat", "c", {"before": True}, now=1) is True
    answers = store.ingest_many([("chat", "a", {"n": 1}), ("chat", "b", {"n": 2}), ("chat", "a", {"n": 3}),
                                 ("chat", "a", {"n": 4}), ("chat", "c", {"n": 5}), ("chat", "b", {"n": 6}),
                                 ("mail", "a", {"n": 7}), ("chat", "it's \\ {\"odd\"}", {"n": 8})], now=2)
    assert answers == [True, True, False, False, False, False, True, True]
    events = {(e.source, e.source_id): e for e in store.events()}
    assert {key: (e.payload, e.duplicates) for key, e in events.items()} == {
        ("chat", "c"): ({"before": True}, 1), ("chat", "a"): ({"n": 1}, 2), ("chat", "b"): ({"n": 2}, 1),
        ("mail", "a"): ({"n": 7}, 0), ("chat", "it's \\ {\"odd\"}"): ({"n": 8}, 0)}
    new_in_order = [("chat", "a"), ("chat", "b"), ("mail", "a"), ("chat", "it's \\ {\"odd\"}")]
    ids = [events[key].id for key in new_in_order]
    assert ids == sorted(ids)  # stored in the batch's order
