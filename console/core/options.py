"""StoreOptions: every setting the Store obeys, in one frozen value.

Built from the settings in one place (Settings.store_options) and handed to Store.open, so a knob is
named once here, once in the settings, and nowhere in between.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_PAYLOAD = 1024 * 1024


@dataclass(frozen=True)
class StoreOptions:
    lease_ttl: int = 120            # seconds a lease lives without a renewal
    max_attempts: int = 3           # claims before an event is dead
    outbox_gap: int = 3600          # seconds between two non-urgent sends
    batch_cap: int = 100            # events one claim takes at most
    backoff_base: int = 10          # seconds before the first retry; doubles each time
    backoff_max: int = 900          # the longest wait between retries
    backoff_jitter: float = 0.2     # each wait is spread by up to this fraction either way
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD
    send_timeout: int = 60          # seconds a send may take before its claim on a batch lapses
    max_send_attempts: int = 12     # failed sends of one batch to one channel before it is given up
    # Caps (console/core/caps.py; 0 turns one off): world-changing tool calls one run makes unasked, and in
    # any hour; messages to the owner in any hour (past it they are held until the owner releases them).
    max_tool_calls_per_run: int = 20
    max_tool_calls_per_hour: int = 60
    max_messages_per_hour: int = 20
    # Seconds a SQLite write waits for another process's write lock before the inbox counts as busy (the command
    # or the run then says so; an engine starting tries again with its backoff).
    busy_timeout: float = 5.0

    def __post_init__(self) -> None:
        for name in ("lease_ttl", "max_attempts", "batch_cap", "max_payload_bytes", "send_timeout",
                     "max_send_attempts"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("outbox_gap", "backoff_base", "backoff_max", "max_tool_calls_per_run", "max_tool_calls_per_hour",
                     "max_messages_per_hour"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")
        if not 0 < self.busy_timeout <= 3600:
            raise ValueError(f"busy_timeout must be more than 0 and at most 3600 seconds, not {self.busy_timeout}")
        if not 0 <= self.backoff_jitter < 1:
            raise ValueError(f"backoff_jitter must be in [0, 1), not {self.backoff_jitter}")

    def but(self, **changes: Any) -> StoreOptions:
        """These options with some changed (Store.open's keyword arguments); an unknown name is a TypeError."""
        unknown = sorted(set(changes) - STORE_OPTION_NAMES)
        if unknown:
            raise TypeError(f"unknown store option(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes) if changes else self


STORE_OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(StoreOptions))
