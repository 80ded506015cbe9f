"""Store: the facade over one inbox file. Every writer and every reader goes through it.

One Store wraps one apsw connection; use one Store per thread (Store.reopen() makes a sibling).
"""

from __future__ import annotations

import os
import random
from typing import Any

import apsw

from console.core.agent_state import AgentStateMixin
from console.core.approvals import ApprovalsMixin
from console.core.db import connect, integrity_problems, schema_dump, shrink_wal, user_version, wal_path
from console.core.inbox import InboxMixin
from console.core.insights import InsightsMixin
from console.core.journal import JournalMixin
from console.core.lease import LeaseMixin
from console.core.models import BudgetDefaults
from console.core.outbox import OutboxMixin
from console.core.phone import PhoneMixin
from console.core.replays import ReplayMixin
from console.core.retention import RetentionMixin
from console.core.search import SearchMixin
from console.core.spend import SpendMixin

DEFAULT_MAX_PAYLOAD = 1024 * 1024
RECENT_APPROVALS = 10  # settled approvals listed by status(), newest first


class Store(
    RetentionMixin, ReplayMixin, InboxMixin, LeaseMixin, PhoneMixin, ApprovalsMixin, OutboxMixin, JournalMixin,
    InsightsMixin, AgentStateMixin, SpendMixin, SearchMixin,
):
    def __init__(self, conn: apsw.Connection, path: str, settings: dict[str, Any]) -> None:
        self._conn = conn
        self.path = path
        self._settings = settings
        self.lease_ttl = int(settings["lease_ttl"])
        self.max_attempts = int(settings["max_attempts"])
        self.outbox_gap = int(settings["outbox_gap"])
        self.batch_cap = int(settings["batch_cap"])
        self.backoff_base = int(settings["backoff_base"])
        self.backoff_max = int(settings["backoff_max"])
        self.backoff_jitter = float(settings["backoff_jitter"])
        self.max_payload_bytes = int(settings["max_payload_bytes"])
        self.send_timeout = int(settings["send_timeout"])
        self.max_send_attempts = int(settings["max_send_attempts"])
        seed = settings.get("seed")
        self._rng = random.Random(seed)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        lease_ttl: int = 120,
        max_attempts: int = 3,
        outbox_gap: int = 3600,
        batch_cap: int = 100,
        backoff_base: int = 10,
        backoff_max: int = 900,
        backoff_jitter: float = 0.2,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        send_timeout: int = 60,
        max_send_attempts: int = 12,
        check: bool = False,
        read_only: bool = False,
        seed: int | None = None,
        vfs: str | None = None,
    ) -> Store:
        settings: dict[str, Any] = dict(
            lease_ttl=lease_ttl, max_attempts=max_attempts, outbox_gap=outbox_gap, batch_cap=batch_cap,
            backoff_base=backoff_base, backoff_max=backoff_max, backoff_jitter=backoff_jitter,
            max_payload_bytes=max_payload_bytes, send_timeout=send_timeout, seed=seed,
            max_send_attempts=max_send_attempts,
        )
        for name in ("lease_ttl", "max_attempts", "batch_cap", "max_payload_bytes", "send_timeout",
                     "max_send_attempts"):
            if int(settings[name]) < 1:
                raise ValueError(f"{name} must be at least 1, not {settings[name]}")
        for name in ("outbox_gap", "backoff_base", "backoff_max"):
            if int(settings[name]) < 0:
                raise ValueError(f"{name} must not be negative, not {settings[name]}")
        if not 0 <= backoff_jitter < 1:
            raise ValueError(f"backoff_jitter must be in [0, 1), not {backoff_jitter}")
        conn = connect(path, check=check, read_only=read_only, vfs=vfs)
        return cls(conn, os.fspath(path), settings)

    def reopen(self) -> Store:
        """Another connection to the same file with the same settings (for another thread)."""
        return type(self)(connect(self.path, check=False), self.path, dict(self._settings))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connection(self) -> apsw.Connection:
        """For tests and benchmarks inside the core's own tree; application code uses the methods."""
        return self._conn

    def data_version(self) -> int:
        """Changes when another connection commits to the file (cheap; no disk read)."""
        return int(self._scalar("PRAGMA data_version"))

    def limit_pages(self, pages: int) -> int:
        """Cap this connection's database size (PRAGMA max_page_count), to test a full disk.

        SQLite never sets the cap below the file's current size, so limit_pages(1) freezes the file
        at its present size. Returns the cap now in force.
        """
        if pages < 1:
            raise ValueError(f"pages must be at least 1, not {pages}")
        return int(self._scalar(f"PRAGMA max_page_count = {int(pages)}"))

    def schema(self) -> list[tuple[str, str, str]]:
        return schema_dump(self._conn)

    def schema_version(self) -> int:
        """The number of schema migrations applied to this file (PRAGMA user_version)."""
        return user_version(self._conn)

    def integrity_check(self) -> str:
        return "; ".join(str(r[0]) for r in self._conn.execute("PRAGMA integrity_check"))

    def integrity_problems(self) -> list[str]:
        """A full integrity check of the file (it reads every page): what is wrong, one line each."""
        return integrity_problems(self._conn)

    def wal_bytes(self) -> int:
        """The size of the file's WAL now (0 when there is none)."""
        try:
            return wal_path(self.path).stat().st_size
        except FileNotFoundError:
            return 0

    def shrink_wal(self) -> bool:
        """Checkpoint the WAL into the file and truncate it, if no reader holds it (never waits).
        True when the WAL is now empty."""
        return shrink_wal(self._conn)

    def page_count(self) -> int:
        return int(self._scalar("PRAGMA page_count"))

    def status(self, *, now: int, budgets: BudgetDefaults | None = None) -> dict[str, Any]:
        """Everything a glance needs, read in short queries (no full scans). budgets: the settings' budgets
        and time zone, for the spend (without them: no budget from the settings, days in UTC)."""
        lease = self.lease()
        nxt = self.next_timer()
        if lease is None:
            lease_info: dict[str, Any] | None = None
        else:
            lease_info = {
                "holder": lease.holder,
                "gen": lease.gen,
                "until": lease.until,
                "expires_in": lease.until - now,
                "live": lease.until >= now,
            }
        approvals = self.pending_approvals()
        return {
            "path": self.path,
            "events": self.counts(),
            "lease": lease_info,
            "takeovers": self.takeover_count(),
            "refused_finishes": self.refused_finish_count(),
            "approvals_pending": [
                {"request_id": a.request_id, "action": a.action, "expires_at": a.expires_at,
                 "expires_in": a.expires_at - now, "event_id": a.event_id, "tool": a.tool,
                 "arguments": a.arguments, "sources": a.sources or []}
                for a in approvals
            ],
            "approvals_recent": [
                {"request_id": a.request_id, "action": a.action, "outcome": a.outcome,
                 "answered_via": a.answered_via, "answered_at": a.resolved_at}
                for a in self.resolved_approvals(RECENT_APPROVALS)
            ],
            "phone_answers": self.phone_answer_counts(),
            "outbox": self.outbox_counts(),
            "next_send_at": self.next_send_at(now=now),
            "next_timer": None if nxt is None else {"id": nxt.id, "due": nxt.due, "due_in": nxt.due - now},
            "agent": self.agent_state().public(now),
            "spend": self.spend_summary(budgets or BudgetDefaults(), now=now),
        }
