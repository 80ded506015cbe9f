"""Time as integer seconds, injectable so that every rule can be tested without sleeping.

Integer seconds keep keys exact: a float timestamp can drift by one rounding step and mint a
second key for the same timer occurrence.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> int: ...


class WallClock:
    """The real clock, in whole seconds since the epoch."""

    def now(self) -> int:
        return int(time.time())


class ManualClock:
    """A clock that moves only when told to. Thread-safe, for tests and the demo."""

    def __init__(self, start: int = 1_000_000) -> None:
        self._now = int(start)
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: int) -> int:
        with self._lock:
            self._now += int(seconds)
            return self._now

    def set(self, when: int) -> None:
        with self._lock:
            self._now = int(when)
