"""Finding things: events and outbox messages whose text contains what the owner typed.

There is no full-text index: a search reads rows. It is kept bounded instead. Each query looks at one window
of at most `window` consecutive ids (newest first) through the primary key, and returns the matches found
there with where to go on from; the caller asks for the next window when it wants more. So one query costs
O(window) whatever the inbox holds, and a reader never holds a snapshot (and the WAL) for a whole-file scan.
Plain portable SQL: lower() and LIKE with an ESCAPE character.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.core.base import StoreBase, event_from_row
from console.core.models import STATUSES, EventSearch, OutboxMessage, OutboxSearch
from console.core.statements import EVENT_COLUMNS

SEARCH_WINDOW = 20_000  # ids one search query looks at
MAX_TERMS = 8  # words in one search; each must be found somewhere in the row
_EVENT_FIELDS = ("lower(source)", "lower(source_id)", "lower(payload)", "lower(COALESCE(error, ''))")
_OUTBOX_FIELDS = ("lower(o.body)", "lower(COALESCE(b.last_error, ''))")


def search_terms(text: str) -> list[str]:
    """The words of a search, lower-cased (ASCII, as SQL's lower()), at most MAX_TERMS of them."""
    return [word.lower() for word in text.split()][:MAX_TERMS]


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _matching(terms: Sequence[str], fields: Sequence[str], id_column: str) -> tuple[str, list[Any]]:
    """Every term found in one of fields; a term that is a number (or #number) also matches that id."""
    clauses: list[str] = []
    params: list[Any] = []
    for term in terms:
        pattern = _like_pattern(term)
        alternatives = [f"{field} LIKE ? ESCAPE '\\'" for field in fields]
        params.extend(pattern for _ in fields)
        number = term.removeprefix("#")
        if number.isdigit() and len(number) < 19:
            alternatives.append(f"{id_column} = ?")
            params.append(int(number))
        clauses.append(f"({' OR '.join(alternatives)})")
    return " AND ".join(clauses), params


class SearchMixin(StoreBase):
    def search_events(
        self,
        text: str,
        *,
        status: str | None = None,
        source: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
        window: int = SEARCH_WINDOW,
    ) -> EventSearch:
        """Events below before_id (all, when None) whose source, source id, payload text or error contains
        every word of text (case-insensitive), newest first, looking at no more than `window` ids."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        terms = search_terms(text)
        if not terms:
            return EventSearch([], None)
        top = self._window_top("inbox", before_id)
        low = max(0, top - max(1, int(window)))
        match, params = _matching(terms, _EVENT_FIELDS, "id")
        filters = "".join(clause for clause, value in ((" AND status = ?", status), (" AND source = ?", source))
                          if value is not None)
        rows = self._conn.execute(
            f"""SELECT {EVENT_COLUMNS} FROM inbox WHERE id < ? AND id >= ?{filters} AND {match}
                ORDER BY id DESC LIMIT ?""",
            (top, low, *(v for v in (status, source) if v is not None), *params, int(limit)),
        ).fetchall()
        events = [event_from_row(row) for row in rows]
        return EventSearch(events, self._next_before("inbox", events[-1].id if len(events) >= limit else None, low))

    def search_outbox(self, text: str, *, before_id: int | None = None, limit: int = 50,
                      window: int = SEARCH_WINDOW) -> OutboxSearch:
        """Outbox messages below before_id whose body or last send error contains every word of text."""
        terms = search_terms(text)
        if not terms:
            return OutboxSearch([], None)
        top = self._window_top("outbox", before_id)
        low = max(0, top - max(1, int(window)))
        match, params = _matching(terms, _OUTBOX_FIELDS, "o.id")
        rows = self._conn.execute(
            f"""SELECT o.id, o.body, o.urgent, o.created_at, o.event_id, o.status, o.sent_at,
                       b.key, b.channel, b.last_error, b.next_try_at, o.approval_id
                FROM outbox o LEFT JOIN outbox_batches b ON b.id = o.batch_id
                WHERE o.id < ? AND o.id >= ? AND {match} ORDER BY o.id DESC LIMIT ?""",
            (top, low, *params, int(limit)),
        ).fetchall()
        messages = [OutboxMessage(row[0], row[1], bool(row[2]), *row[3:]) for row in rows]
        return OutboxSearch(messages, self._next_before("outbox", messages[-1].id if len(messages) >= limit else None,
                                                        low))

    def outbox_message(self, message_id: int) -> OutboxMessage | None:
        """One outbox message in full, with its batch's key, channel and last error."""
        for row in self._conn.execute(
            """SELECT o.id, o.body, o.urgent, o.created_at, o.event_id, o.status, o.sent_at,
                      b.key, b.channel, b.last_error, b.next_try_at, o.approval_id
               FROM outbox o LEFT JOIN outbox_batches b ON b.id = o.batch_id WHERE o.id = ?""",
            (message_id,),
        ):
            return OutboxMessage(row[0], row[1], bool(row[2]), *row[3:])
        return None

    def _window_top(self, table: str, before_id: int | None) -> int:
        if before_id is not None:
            return int(before_id)
        return int(self._scalar(f"SELECT COALESCE(MAX(id), 0) FROM {table}")) + 1

    def _next_before(self, table: str, last_match: int | None, low: int) -> int | None:
        """Where the next query goes on from: below the last match of a full page, else below the window,
        or None when the window reached the oldest row."""
        if last_match is not None:
            return last_match
        oldest = self._scalar(f"SELECT MIN(id) FROM {table}")
        return low if oldest is not None and low > oldest else None
