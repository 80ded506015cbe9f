"""The replay ledger: webhook bodies whose signature proves nothing about when or under which id they
were sent (GitHub, home-made HMAC) are remembered by digest for a window, and a byte-identical body
arriving again within it is refused as a replay, whatever id came with it.

A refusal is answered like a duplicate and counted on the event the body was first stored as. Every
sighting, refused or not, restarts the body's window, so a replayer who keeps trying inside it never
gets through. Deliveries sweep rows whose window has passed, a little more than they add, so the
ledger holds about one window's worth of bodies and no more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from console.core.base import StoreBase
from console.core.errors import move_refusal
from console.core.models import ReplayGuard

# Rows swept per transaction: a constant plus twice what the transaction may add, so the sweep always
# outpaces the growth, while one transaction never deletes a whole backlog at once.
_SWEEP_BASE = 256
_SWEEP = """DELETE FROM replay_ledger WHERE (source, digest) IN (
                SELECT source, digest FROM replay_ledger INDEXED BY replay_ledger_expiry
                WHERE expires_at < ? ORDER BY expires_at LIMIT ?)"""
_EARLIER = """SELECT source_id FROM replay_ledger WHERE source = ? AND digest = ? AND expires_at >= ?"""
_SIGHTED = """INSERT INTO replay_ledger (source, digest, source_id, seen_at, expires_at) VALUES (?, ?, ?, ?, ?)
              ON CONFLICT (source, digest) DO UPDATE
                 SET source_id = excluded.source_id, seen_at = excluded.seen_at, expires_at = excluded.expires_at"""
_RESIGHTED = "UPDATE replay_ledger SET seen_at = ?, expires_at = ? WHERE source = ? AND digest = ?"

Delivery = tuple[str, str, Any, ReplayGuard | None]
EncodedDelivery = tuple[str, str, str, ReplayGuard | None]  # (source, source_id, encode_event's text, guard)


class ReplayMixin(StoreBase):
    def ingest_deliveries(self, items: Iterable[Delivery], *, now: int,
                          traces: Mapping[tuple[str, str], str] | None = None) -> list[str]:
        """Store webhook deliveries (source, source_id, payload, guard) in one transaction.

        Each answer is "stored", "duplicate" (its key was stored before) or "replay" (no guard is None
        and its body was seen from its source within the guard's window: nothing is stored, the event
        the body was stored as counts one more duplicate). All are validated before any is written.
        `traces`: the traceparent to keep with a stored event, by (source, source_id).
        """
        return self.ingest_encoded_deliveries([(source, source_id, self.encode_event(source, source_id, payload), guard)
                                               for source, source_id, payload, guard in items], now=now, traces=traces)

    def ingest_encoded_deliveries(self, encoded: Sequence[EncodedDelivery], *, now: int,
                                  traces: Mapping[tuple[str, str], str] | None = None) -> list[str]:
        """ingest_deliveries for deliveries whose payload is already the text encode_event returned for it (the
        webhook receiver validates each delivery as it arrives, and so encodes it once)."""
        if not encoded:
            return []
        if all(guard is None or guard.window <= 0 for *_, guard in encoded):
            # No replay ledger to keep: the backend may store the group whole (PostgreSQL: one round trip).
            with self._backend.storage_errors():
                triples = [(source, source_id, text) for source, source_id, text, _ in encoded]
                done = self._backend.try_ingest_many(triples, now, traces=traces)
            if done is not None:
                stored, mark = done
                if mark is not None:
                    raise move_refusal(*mark)
                return ["stored" if new else "duplicate" for new in stored]
        with self.write_transaction():
            if any(guard is not None for *_, guard in encoded):
                self._conn.execute(_SWEEP, (now, _SWEEP_BASE + 2 * len(encoded)))
            kept = traces or {}
            return [self._deliver(source, source_id, text, guard, now, kept.get((source, source_id)))
                    for source, source_id, text, guard in encoded]

    def _deliver(self, source: str, source_id: str, text: str, guard: ReplayGuard | None, now: int,
                 trace: str | None) -> str:
        """One delivery's verdict, written in the caller's transaction; a new event keeps `trace` (a copy does not:
        its event keeps the trace it was stored with)."""
        if guard is None or guard.window <= 0:
            return "stored" if self._insert_event(source, source_id, text, now, trace) else "duplicate"
        expires_at = now + guard.window
        # A body seen within its window is a replay unless this key is stored already (then it is that event's
        # redelivery: a duplicate). The ledger is read first: a new body, the usual case, needs no read of the key.
        earlier = self._scalar(_EARLIER, (source, guard.digest, now))
        if earlier is not None and not self._scalar("SELECT 1 FROM inbox WHERE source = ? AND source_id = ?",
                                                    (source, source_id)):
            self._conn.execute(_RESIGHTED, (now, expires_at, source, guard.digest))
            self._conn.execute(
                """UPDATE inbox SET duplicates = duplicates + 1, last_duplicate_at = ?
                   WHERE source = ? AND source_id = ?""",
                (now, source, earlier),
            )
            return "replay"
        new = self._insert_event(source, source_id, text, now, trace)
        self._conn.execute(_SIGHTED, (source, guard.digest, source_id, now, expires_at))
        return "stored" if new else "duplicate"

    def replay_ledger_size(self) -> int:
        """Bodies the ledger remembers now (expired rows not yet swept included)."""
        return int(self._scalar("SELECT COUNT(*) FROM replay_ledger"))

    # --- what the receiver met that is not a delivery ------------------------------------------------------
    def count_receiver(self, counts: Mapping[str, int], *, now: int) -> None:
        """Add to the receiver's counts (e.g. {"malformed": 3}: malformed HTTP requests), in one transaction."""
        with self.write_transaction():
            for name, count in counts.items():
                self._conn.execute(
                    """INSERT INTO receiver_counts (name, count, last_at) VALUES (?, ?, ?)
                       ON CONFLICT (name) DO UPDATE SET count = receiver_counts.count + excluded.count,
                                                        last_at = excluded.last_at""",
                    (name, int(count), now))

    def receiver_counts(self) -> dict[str, Any]:
        """The receiver's counts as `status --json` shows them ({"malformed": n, "malformed_last_at": t}): 0 and
        None for what never came."""
        found = {name: (int(count), int(last_at)) for name, count, last_at in
                 self._conn.execute("SELECT name, count, last_at FROM receiver_counts")}
        count, last_at = found.get("malformed", (0, None))
        return {"malformed": count, "malformed_last_at": last_at}
