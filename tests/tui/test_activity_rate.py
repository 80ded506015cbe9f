"""The rate beside the header's sparkline counts the last sixty seconds, whatever the clock's minute."""

from __future__ import annotations

from pathlib import Path

from console.core import Store
from console.tui.reads import read_activity

NOW = 60 * 16_666_667 + 20  # twenty seconds into a calendar minute


def test_the_rate_is_a_rolling_minute(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        for at, count in ((NOW - 70, 4), (NOW - 59, 2), (NOW - 30, 3), (NOW, 1)):
            store.ingest_many([("chat", f"{at}-{n}", {}) for n in range(count)], now=at)
        activity = read_activity(NOW, minutes=3)(store)
    assert activity.last_60s == 6  # 2 + 3 + 1: the four at NOW - 70 are older than a minute
    assert activity.per_minute == [0, 4 + 2 + 3, 1]  # calendar minutes for the sparkline: only 1 in this one
    assert activity.counts["pending"] == 10
