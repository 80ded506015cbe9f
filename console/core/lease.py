"""One worker per inbox: a lease row with a generation number that fences stale workers."""

from __future__ import annotations

from console.core.base import StoreBase, loads
from console.core.models import Lease, RefusedFinish


class LeaseMixin(StoreBase):
    def acquire(self, holder: str, *, now: int) -> int | None:
        """Take or renew the lease. Returns the generation, or None while someone else holds it.

        Renewing keeps the generation; any new acquire, even by the same holder after its lease
        lapsed or was released, starts a new one, so the old generation's claims are fenced off. The
        log calls it a takeover only when another holder replaces one whose lease lapsed under it
        (a stall or a crash); a start after a release, or a holder back on its own lapsed lease, is
        an acquire.
        """
        with self.write_transaction():
            lease = self._lease_row()
            if lease is None:
                gen, kind = 1, "acquire"
            elif lease.holder == holder and lease.until >= now:
                gen, kind = lease.gen, "renew"
            elif lease.until < now:
                replaced = lease.holder != holder and not self._released(lease.gen)
                gen, kind = lease.gen + 1, "takeover" if replaced else "acquire"
            else:
                return None
            acquired_at = lease.acquired_at if (lease is not None and kind == "renew") else now
            self._conn.execute(
                """INSERT INTO lease (one, holder, gen, until, acquired_at, renewed_at) VALUES (1, ?, ?, ?, ?, ?)
                   ON CONFLICT (one) DO UPDATE SET holder = excluded.holder, gen = excluded.gen,
                      until = excluded.until, acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at""",
                (holder, gen, now + self.options.lease_ttl, acquired_at, now),
            )
            if kind != "renew":
                self._conn.execute(
                    "INSERT INTO lease_log (at, kind, holder, gen, previous_holder) VALUES (?, ?, ?, ?, ?)",
                    (now, kind, holder, gen, lease.holder if lease else None),
                )
            return gen

    def renew(self, holder: str, gen: int, *, now: int) -> bool:
        """Extend the lease only if (holder, gen) still holds it; never starts a new generation."""
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            self._conn.execute(
                "UPDATE lease SET until = ?, renewed_at = ? WHERE one = 1", (now + self.options.lease_ttl, now)
            )
            return True

    def release(self, holder: str, gen: int, *, now: int | None = None) -> bool:
        """Give the lease up so a replacement need not wait out the TTL.

        Events this generation still has running go back to pending at once (their attempt stays
        counted); the next acquire starts a new generation.
        """
        with self.write_transaction():
            lease = self._lease_row()
            at = (lease.renewed_at if now is None else now) if lease else 0
            if lease is None or lease.holder != holder or lease.gen != gen or lease.until < at:
                return False  # not ours, or already released or lapsed
            self._conn.execute("UPDATE lease SET until = ? WHERE one = 1", (min(lease.until, at) - 1,))
            # The attempt stays counted, so the run's end is its last error: an event released this way once too
            # often dies out of attempts, and a dead event always says why.
            self._conn.execute(
                """UPDATE inbox SET status = 'pending', next_attempt_at = 0, updated_at = ?, error = ?
                   WHERE status = 'running' AND claim_gen = ?""",
                (at, f"worker of generation {gen} released the lease mid-run", gen),
            )
            self._conn.execute(
                "INSERT INTO lease_log (at, kind, holder, gen, previous_holder) VALUES (?, 'release', ?, ?, ?)",
                (at, holder, gen, holder),
            )
            return True

    def lease(self) -> Lease | None:
        return self._lease_row()

    def lease_log(self, limit: int = 20) -> list[tuple[int, str, str, int, str | None]]:
        """Newest first: (at, kind, holder, gen, previous holder)."""
        return [
            (at, kind, holder, gen, previous)
            for at, kind, holder, gen, previous in self._conn.execute(
                "SELECT at, kind, holder, gen, previous_holder FROM lease_log ORDER BY id DESC LIMIT ?", (limit,)
            )
        ]

    def _released(self, gen: int) -> bool:
        """Whether generation gen ended by a release (the log's last entry) rather than by lapsing."""
        for (kind, logged_gen) in self._conn.execute("SELECT kind, gen FROM lease_log ORDER BY id DESC LIMIT 1"):
            return bool(kind == "release" and logged_gen == gen)
        return False

    def takeover_count(self) -> int:
        """Lapsed holders replaced by another holder. Versions before this one logged every new
        generation as a takeover, so the entry before each is looked at too: after a release, or by the
        same holder, it was a restart."""
        return int(self._scalar(
            """SELECT COUNT(*) FROM (SELECT kind, holder, previous_holder, LAG(kind) OVER (ORDER BY id) AS before
                                     FROM lease_log) AS log
               WHERE kind = 'takeover' AND previous_holder IS NOT holder AND before IS NOT 'release'"""
        ))

    def refused_finishes(self, limit: int = 20) -> list[RefusedFinish]:
        """Newest first: every write refused to a stale generation (finishes, step claims and commits)."""
        return [
            RefusedFinish(at, holder, gen, loads(ids), lease_holder, lease_gen, reason, kind, detail)
            for at, holder, gen, ids, lease_holder, lease_gen, reason, kind, detail in self._conn.execute(
                """SELECT at, holder, gen, event_ids, lease_holder, lease_gen, reason, kind, detail
                   FROM refused_finishes ORDER BY id DESC LIMIT ?""",
                (limit,),
            )
        ]

    def refused_finish_count(self) -> int:
        return int(self._scalar("SELECT COUNT(*) FROM refused_finishes"))
