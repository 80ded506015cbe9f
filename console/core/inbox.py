"""The inbox as the owner reads and handles it: pages of events in the console's orders, one event, its history,
the counts, and the owner's hand on a dead or pending event (retry, discard, restore). Intake is core/intake.py, the
drain (claim and finish) core/drain.py."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from console.core.base import StoreBase, event_from_row
from console.core.errors import is_damage
from console.core.models import STATUSES, Attempt, Event, death_in_words
from console.core.statements import EVENT_COLUMNS, FRESH, NOT_FRESH, PAYLOAD_AS_STORED, payload_checksum

# What a retry by hand brings back: a dead event, or one the owner discarded and thinks better of.
REVIVABLE = ("dead", "discarded")
# The orders the console can sort the whole inbox by, each read through an index: (status, id), (source, id).
SORT_ORDERS = ("id", "status", "source")


def sort_key(event: Event, order: str) -> tuple[Any, int]:
    """Where event stands in an order of events_in_order."""
    value: Any = event.id if order == "id" else getattr(event, order)
    return value, event.id


# What the owner may give up on: a dead event, or a pending one (a poison event backing off). A running event
# belongs to its worker.
DISCARDABLE = ("dead", "pending")


def _status_arms(
    status: str | None, common: list[str], common_params: list[Any], *, order: str,
    start: tuple[Any, int] | None, compare: str,
) -> list[tuple[list[str], list[Any]]]:
    """The parts whose union is the events of status (None: every status) meeting common, from start on in an
    order by (status, id) or by id (compare: how a row stands to start): the events in inbox_status_id, and the
    fresh ones when status may be pending. Each is (its WHERE terms, their parameters)."""
    kept = [NOT_FRESH, *(["status = ?"] if status is not None else []), *common]
    kept_params = [*([status] if status is not None else []), *common_params]
    if start is not None:
        kept.append(f"({order}, id) {compare} (?, ?)")
        kept_params += [start[0], start[1]]
    arms = [(kept, kept_params)]
    if status not in (None, "pending"):
        return arms
    fresh, fresh_params = [FRESH, *common], list(common_params)
    if start is not None:
        if order == "id":
            fresh.append(f"(id, id) {compare} (?, ?)")
            fresh.append(f"id {compare[0]}= ?")  # the same rows, as a range inbox_fresh can seek to
            fresh_params += [start[0], start[1], start[0]]
        elif start[0] == "pending":
            fresh.append(f"id {compare} ?")
            fresh_params.append(start[1])
        elif (start[0] > "pending") != (compare[0] == "<"):
            return arms  # every fresh event stands on the other side of start
    arms.append((fresh, fresh_params))
    return arms


def _union(arms: list[tuple[list[str], list[Any]]], ordered: str, limit: int) -> tuple[str, list[Any]]:
    """One SELECT of the first limit events in that order that the parts' terms pick, and its parameters (the
    caller orders and limits it again). Each part is ordered and limited on its own, so each is an index walk
    of at most limit rows, on both engines, and the union sorts at most limit rows a part."""
    if len(arms) == 1:
        ((where, params),) = arms
        return f"SELECT {EVENT_COLUMNS} FROM inbox WHERE {' AND '.join(where)}", params
    selects = [f"SELECT * FROM (SELECT {EVENT_COLUMNS} FROM inbox WHERE {' AND '.join(where)} {ordered} LIMIT ?) "
               f"AS part{number}" for number, (where, _) in enumerate(arms)]
    return " UNION ALL ".join(selects), [param for _, params in arms for param in (*params, limit)]



# Payloads and their checksums, newest first, a chunk at a time (PostgreSQL reads a statement's rows at once).
_STORED_PAYLOADS = f"""SELECT id, {PAYLOAD_AS_STORED}, payload_crc32 FROM inbox
                        WHERE id < ? AND payload_crc32 IS NOT NULL ORDER BY id DESC LIMIT ?"""
_DAMAGED_EVENTS = f"""SELECT id FROM inbox WHERE status = 'dead' AND {NOT_FRESH} AND dead_reason = 'damaged'
                       ORDER BY id LIMIT ?"""
PAYLOAD_CHUNK = 500


@dataclass(frozen=True)
class PayloadCheck:
    """What a look at the payloads' checksums found: the events whose payload does not match (newest first), how
    many payloads were compared, and whether every one was (finished) or a time bound stopped it."""

    damaged: list[int]
    checked: int
    finished: bool

    def problems(self) -> list[str]:
        return [f"event {event_id}: its payload does not match the checksum written when it was stored"
                for event_id in self.damaged]


def _matches(stored: bytes | str | None, checksum: int) -> bool:
    if isinstance(stored, bytes):
        return zlib.crc32(stored) == checksum
    return stored is not None and payload_checksum(stored) == checksum


class InboxMixin(StoreBase):
    # --- reading ------------------------------------------------------------------------------
    def events(
        self,
        *,
        status: str | None = None,
        source: str | None = None,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """Newest first; page with before_id (older) or after_id (newer). Reads only the page."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        conditions = (("source = ?", source), ("id < ?", before_id), ("id > ?", after_id))
        where = [condition for condition, value in conditions if value is not None]
        params: list[Any] = [value for _, value in conditions if value is not None]
        if status is None:
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            selected = f"SELECT {EVENT_COLUMNS} FROM inbox {clause}"
        else:
            selected, params = _union(_status_arms(status, where, params, order="id", start=None, compare=""),
                                      "ORDER BY id" if after_id is not None else "ORDER BY id DESC", int(limit))
        if after_id is not None:
            # Oldest-first just above after_id, then flipped, so the page is the one next to it.
            sql = f"SELECT * FROM ({selected} ORDER BY id LIMIT ?) AS page ORDER BY id DESC"
        else:
            sql = f"{selected} ORDER BY id DESC LIMIT ?"
        return self._with_refusals([event_from_row(r) for r in self._conn.execute(sql, (*params, int(limit)))])

    def events_in_order(
        self,
        *,
        order: str = "id",
        descending: bool = True,
        status: str | None = None,
        source: str | None = None,
        start: tuple[Any, int] | None = None,
        inclusive: bool = False,
        backwards: bool = False,
        limit: int = 100,
    ) -> list[Event]:
        """A run of events in the order the console shows them: by (order, id), both descending or both
        ascending; order is id, status or source (each has an index that reads in that order). From start
        on (a key as sort_key returns; after it, or from it with inclusive), or with backwards the rows just
        before it, still in display order. Reads only the rows it returns (keyset paging)."""
        sql, params = self.in_order_statement(order=order, descending=descending, status=status, source=source,
                                              start=start, inclusive=inclusive, backwards=backwards, limit=limit)
        events = self._with_refusals([event_from_row(row) for row in self._conn.execute(sql, params).fetchall()])
        return events[::-1] if backwards else events

    def in_order_statement(
        self,
        *,
        order: str = "id",
        descending: bool = True,
        status: str | None = None,
        source: str | None = None,
        start: tuple[Any, int] | None = None,
        inclusive: bool = False,
        backwards: bool = False,
        limit: int = 100,
    ) -> tuple[str, list[Any]]:
        """The statement events_in_order runs, and its parameters (tests read its plan: an index search, no sort)."""
        if order not in SORT_ORDERS:
            raise ValueError(f"unknown order {order!r}; expected one of {', '.join(SORT_ORDERS)}")
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        # Reading forwards in a descending order is reading downwards; backwards flips both.
        downwards = descending != backwards
        compare = ("<" if downwards else ">") + ("=" if inclusive and not backwards else "")
        direction = "DESC" if downwards else "ASC"
        ordered = f"ORDER BY id {direction}" if order == "id" else f"ORDER BY {order} {direction}, id {direction}"
        params: list[Any]
        if order != "source" and (status is not None or order == "status"):
            # By status, or one status by id: inbox_status_id and inbox_fresh (NOT_FRESH), merged in order.
            common = ["source = ?"] if source is not None else []
            selected, params = _union(_status_arms(status, common, [source] if source is not None else [],
                                                   order=order, start=start, compare=compare), ordered, int(limit))
        else:
            where = [condition for condition, value in (("status = ?", status), ("source = ?", source))
                     if value is not None]
            params = [value for value in (status, source) if value is not None]
            if start is not None:
                where.append(f"({order}, id) {compare} (?, ?)")
                params += [start[0], start[1]]
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            selected = f"SELECT {EVENT_COLUMNS} FROM inbox {clause}"
        return f"{selected} {ordered} LIMIT ?", [*params, int(limit)]

    def event(self, event_id: int) -> Event | None:
        for row in self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM inbox WHERE id = ?", (event_id,)):
            return self._with_refusals([event_from_row(row)])[0]
        return None

    def find_event(self, source: str, source_id: str) -> Event | None:
        for row in self._conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM inbox WHERE source = ? AND source_id = ?", (source, source_id)
        ):
            return self._with_refusals([event_from_row(row)])[0]
        return None

    def verify_payloads(self, *, seconds: float | None = None) -> PayloadCheck:
        """Compare every payload that carries a checksum (those stored before checksums carry none) with it, newest
        first; with seconds, stop once that long has passed (the gate before intake: the newest pages, at least the
        newest PAYLOAD_CHUNK). It only
        reads; it stops at a page too damaged to read (SQLite's own check, run beside it, reports that one)."""
        deadline = None if seconds is None else time.monotonic() + max(0.0, seconds)
        damaged: list[int] = []
        checked = 0
        below = int(self._scalar("SELECT COALESCE(MAX(id), 0) FROM inbox")) + 1
        while True:  # the newest chunk always, whatever the bound: a loaded machine may spend it before the first
            try:
                rows = self._conn.execute(_STORED_PAYLOADS, (below, PAYLOAD_CHUNK)).fetchall()
            except Exception as exc:  # a page too damaged to read: the structural check beside this says what it is
                if not is_damage(exc):
                    raise
                return PayloadCheck(damaged, checked, False)
            if not rows:
                return PayloadCheck(damaged, checked, True)
            damaged += [event_id for event_id, stored, checksum in rows if not _matches(stored, checksum)]
            checked += len(rows)
            below = rows[-1][0]
            if deadline is not None and time.monotonic() >= deadline:
                return PayloadCheck(damaged, checked, False)

    def damaged_events(self, limit: int = 20) -> list[int]:
        """Events whose run a claim refused because their payload was found damaged (dead, reason `damaged`)."""
        return [int(row[0]) for row in self._conn.execute(_DAMAGED_EVENTS, (limit,))]

    def history(self, event_id: int) -> list[Attempt]:
        return [
            Attempt(*row)
            for row in self._conn.execute(
                "SELECT event_id, at, kind, holder, gen, detail FROM attempts WHERE event_id = ? ORDER BY id",
                (event_id,),
            )
        ]

    def counts(self) -> dict[str, int]:
        return {status: n for status, n in self._conn.execute("SELECT status, n FROM inbox_counts")}

    def sources(self) -> list[str]:
        """Distinct sources, read by skipping through the (source, id) index, not scanning rows."""
        found: list[str] = []
        last = ""
        while True:
            row = self._scalar("SELECT source FROM inbox WHERE source > ? ORDER BY source LIMIT 1", (last,))
            if row is None:
                return found
            found.append(row)
            last = row

    def max_event_id(self) -> int:
        return int(self._scalar("SELECT COALESCE(MAX(id), 0) FROM inbox"))

    def first_ids_at(self, moments: Sequence[int]) -> list[int]:
        """For each moment, the smallest event id created at or after it (max id + 1 if none).

        Ids grow with arrival, so created_at rises with id; a bisection over the primary key finds
        each boundary in O(log n) point reads, and the difference of two boundaries counts the
        events between them, without an index on created_at or a scan of the rows in between.
        """
        low_id = int(self._scalar("SELECT COALESCE(MIN(id), 1) FROM inbox"))
        end = self.max_event_id() + 1
        found: list[int] = []
        for moment in moments:
            low, high = low_id, end
            while low < high:
                middle = (low + high) // 2
                probe = self._conn.execute(
                    "SELECT id, created_at FROM inbox WHERE id >= ? ORDER BY id LIMIT 1", (middle,)
                ).fetchall()
                if not probe or probe[0][1] >= moment:
                    high = middle
                else:
                    low = int(probe[0][0]) + 1
            found.append(low)
        return found

    # --- dead events ---------------------------------------------------------------------------
    def retry_dead(self, event_id: int, *, now: int) -> bool:
        """Return one dead event to pending with a fresh attempt budget."""
        with self.write_transaction():
            return self._revive(event_id, now, ("dead",))

    def retry_events(self, event_ids: Iterable[int], *, now: int) -> list[int]:
        """Return each dead or discarded event among event_ids to pending with a fresh attempt budget, in one
        transaction (the console's retry of a selection, `agent-console retry ID...`). Returns the ids that
        moved, in the order given; an unknown id or one in another state is left alone."""
        with self.write_transaction():
            return [event_id for event_id in dict.fromkeys(event_ids)
                    if self._revive(event_id, now, REVIVABLE)]

    def retry_dead_matching(self, *, source: str | None = None, now: int) -> int:
        """Return every dead event (of one source, if given) to pending. Returns how many."""
        with self.write_transaction():
            if source is None:
                ids = [r[0] for r in self._conn.execute(f"SELECT id FROM inbox WHERE status = 'dead' AND {NOT_FRESH}")]
            else:
                ids = [r[0] for r in self._conn.execute(
                    f"SELECT id FROM inbox WHERE status = 'dead' AND {NOT_FRESH} AND source = ?", (source,))]
            return sum(self._revive(event_id, now, ("dead",)) for event_id in ids)

    def count_dead(self, *, source: str | None = None) -> int:
        if source is None:
            return int(self._scalar("SELECT n FROM inbox_counts WHERE status = 'dead'"))
        return int(self._scalar(f"SELECT COUNT(*) FROM inbox WHERE status = 'dead' AND {NOT_FRESH} AND source = ?",
                                (source,)))

    def discard(self, event_ids: Iterable[int], *, now: int, reason: str | None = None) -> list[int]:
        """Give up on dead or pending events, in one transaction: they become `discarded`, are never claimed
        again, and stay for the record (their key still refuses a redelivery; their error, dead_reason and
        history stay; `retry` brings one back). A running event belongs to its worker and is left alone, as
        are done ones. Returns the ids that moved, in the order given."""
        moved: list[int] = []
        with self.write_transaction():
            for event_id in dict.fromkeys(event_ids):
                changed = self._conn.execute(
                    """UPDATE inbox SET status = 'discarded', claim_alone = 0, updated_at = ?
                       WHERE id = ? AND status IN (?, ?) RETURNING id""",
                    (now, event_id, *DISCARDABLE),
                ).fetchall()
                if changed:
                    self._log_attempt(event_id, now, "discard", None, None, reason or "discarded by hand")
                    moved.append(event_id)
        return moved

    def restore_to_dead(self, event_ids: Iterable[int], *, now: int) -> list[int]:
        """Undo a discard without running the event: each discarded event among event_ids is `dead` again, as it
        died (its error and dead_reason were kept; no fresh attempt budget), in one transaction. `retry` is what
        runs one. One retention cleared is left alone, as `retry` leaves it. Returns the ids that moved."""
        moved: list[int] = []
        with self.write_transaction():
            for event_id in dict.fromkeys(event_ids):
                changed = self._conn.execute(
                    """UPDATE inbox SET status = 'dead', updated_at = ?
                       WHERE id = ? AND status = 'discarded' AND pruned_at IS NULL RETURNING id""",
                    (now, event_id),
                ).fetchall()
                if changed:
                    self._log_attempt(event_id, now, "restore", None, None,
                                      "restored to dead by hand (was: discarded); not run")
                    moved.append(event_id)
        return moved

    def _revive(self, event_id: int, now: int, states: tuple[str, ...]) -> bool:
        """Return one event in one of states (dead, discarded) to pending; its history says what it was."""
        marks = ", ".join("?" for _ in states)
        found = self._conn.execute(
            # A discarded event retention cleared has no payload to run, nor the journal that stops a repeat.
            f"""SELECT status, dead_reason, attempts, error FROM inbox
                WHERE id = ? AND status IN ({marks}) AND pruned_at IS NULL""",
            (event_id, *states),
        ).fetchall()
        if not found:
            return False
        status, reason, attempts, error = found[0]
        changed = self._conn.execute(
            f"""UPDATE inbox SET status = 'pending', attempts = 0, next_attempt_at = 0, claim_gen = NULL,
                   claim_alone = 1, dead_reason = NULL, updated_at = ?
               WHERE id = ? AND status IN ({marks}) AND pruned_at IS NULL RETURNING id""",
            (now, event_id, *states),
        ).fetchall()
        if changed:
            was = death_in_words(reason, attempts, error)
            if status == "discarded":  # given up on while dead (its reason kept) or while still pending
                was = f"discarded; {was}" if reason is not None or error else "discarded"
            self._log_attempt(event_id, now, "retry", None, None, f"retried by hand (was: {was})")
        return bool(changed)
