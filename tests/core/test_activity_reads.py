"""Reads the console needs beyond the Store's contract: cheap per-minute activity."""

from __future__ import annotations

import itertools

from console.core import Store


def test_first_ids_at_finds_each_minute_boundary(store: Store) -> None:
    # 3 events at t=100, 5 at t=160, none in the next minute, 2 at t=300
    for at, count in ((100, 3), (160, 5), (300, 2)):
        store.ingest_many([("chat", f"{at}-{i}", {}) for i in range(count)], now=at)
    boundaries = store.first_ids_at([60, 120, 180, 240, 300, 360])
    assert boundaries == [1, 4, 9, 9, 9, 11]
    per_minute = [b - a for a, b in itertools.pairwise(boundaries)]
    assert per_minute == [3, 5, 0, 0, 2]


def test_first_ids_at_on_an_empty_inbox(store: Store) -> None:
    assert store.first_ids_at([0, 100]) == [1, 1]
