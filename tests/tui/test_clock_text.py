"""How the detail screen writes a moment: a clock time today, a date otherwise, and how far away."""

from __future__ import annotations

import time
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import pytest

from console.tui.detail import clock_text

NOON = 1_795_996_800 + 12 * 3600  # 2026-11-30 12:00:00 UTC


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_moment_today_is_a_clock_time() -> None:
    assert clock_text(NOON - 20, NOON) == "11:59:40 (20s ago)"
    assert clock_text(NOON + 3 * 3600 + 5, NOON) == "15:00:05 (in 3h00m)"


def test_a_moment_on_another_day_shows_its_date() -> None:
    assert clock_text(NOON - 13 * 3600, NOON) == "2026-11-29 23:00 (13h00m ago)"
    assert clock_text(None, NOON) == "never"


def test_the_users_zone_wins_over_the_machines() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")  # UTC+9: noon UTC is nine in the evening there
    assert clock_text(NOON - 20, NOON, tokyo) == "20:59:40 (20s ago)"
    assert clock_text(NOON + 3 * 3600, NOON, tokyo) == "2026-12-01 00:00 (in 3h00m)"  # tomorrow, in Tokyo


def test_the_moment_itself_is_now_not_in_no_time() -> None:
    # A settled approval's screen read "expired 22:21:41 (in 0s)" when the expiry was this very second.
    assert clock_text(NOON, NOON) == "12:00:00 (now)"
