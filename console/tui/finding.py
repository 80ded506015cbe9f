"""What the search screen reads: matching events and outbox messages, one bounded window per read.

Each read is one query over at most SEARCH_WINDOW ids (console/core/search.py), run on the engine's reader
thread; the screen asks again for the next window, so the other panes' reads go in between and a search
of a large inbox never holds the reader (or a WAL snapshot) for long.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from console.core import Event, EventSearch, OutboxMessage, OutboxSearch, Store
from console.tui.reads import EventFilter

RESULTS_PAGE = 50
LATEST_MESSAGES = 50


def id_asked(text: str) -> int | None:
    """The event id in a search for `#123` or `123` alone: that row is looked up directly, whatever its age
    (a text search reads windows newest first and may stop long before an old id)."""
    match = re.fullmatch(r"#?(\d{1,18})", text.strip())
    return int(match.group(1)) if match else None


def read_event(event_id: int) -> Callable[[Store], Event | None]:
    return lambda store: store.event(event_id)


def read_event_matches(text: str, flt: EventFilter, before_id: int | None,
                       limit: int = RESULTS_PAGE) -> Callable[[Store], EventSearch]:
    def read(store: Store) -> EventSearch:
        return store.search_events(text, status=flt.status, source=flt.source, before_id=before_id, limit=limit)

    return read


def read_message_matches(text: str, before_id: int | None,
                         limit: int = RESULTS_PAGE) -> Callable[[Store], OutboxSearch]:
    """Matching outbox messages; with no text, the newest messages (the outbox, readable in full)."""

    def read(store: Store) -> OutboxSearch:
        if not text.strip():
            return OutboxSearch(store.outbox_messages(limit=LATEST_MESSAGES), None)
        return store.search_outbox(text, before_id=before_id, limit=limit)

    return read


def read_message(message_id: int) -> Callable[[Store], OutboxMessage | None]:
    def read(store: Store) -> OutboxMessage | None:
        return store.outbox_message(message_id)

    return read
