"""Store: the facade over one inbox. Every writer and every reader goes through it.

The Store is backend-neutral: it runs the core's SQL over a Backend (core/backend.py), a SQLite file
(core/sqlite.py) or a PostgreSQL schema (core/pg.py), which `open_store` picks: the one place that chooses.
One Store wraps one connection; use one Store per thread (Store.reopen() makes a sibling).
"""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import Any

from console.core.agent_state import AgentStateMixin
from console.core.approvals import ApprovalsMixin
from console.core.audit import AuditMixin
from console.core.backend import Backend, ChangeFeed, QuickCheck
from console.core.caps import CapsMixin
from console.core.chats import ChatMixin
from console.core.drain import DrainMixin
from console.core.errors import MoveRefusal, StoreError, move_refusal
from console.core.inbox import InboxMixin
from console.core.insights import InsightsMixin
from console.core.intake import IntakeMixin
from console.core.journal import JournalMixin
from console.core.lease import LeaseMixin
from console.core.mail import MailMixin
from console.core.memory import MemoryMixin
from console.core.model_health import ModelHealthMixin
from console.core.models import BudgetDefaults
from console.core.options import StoreOptions
from console.core.outbox import OutboxMixin
from console.core.pg_target import parse_target, with_inbox_params
from console.core.phone import PhoneMixin
from console.core.replays import ReplayMixin
from console.core.retention import RetentionMixin
from console.core.schedules import SchedulesMixin
from console.core.search import SearchMixin
from console.core.spend import SpendMixin
from console.core.sqlite import SqliteBackend
from console.core.stranded import StrandedMixin
from console.core.timers import TimersMixin
from console.core.tool_health import ToolHealthMixin

RECENT_APPROVALS = 10  # settled approvals listed by status(), newest first


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _is_postgres(target: object) -> bool:
    """A PostgreSQL URL (a str) rather than the path of an inbox file: the choice of backend, made here only."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def inbox_location(text: str) -> Path | str:
    """What an inbox setting names, read as the opener will open it: a PostgreSQL URL (its schema checked: a
    StoreError says what is wrong) kept as text, or the path of a SQLite file (~ expanded)."""
    if not _is_postgres(text):
        return Path(text).expanduser()
    parse_target(text)
    return text


def settled_location(target: Path | str, *, schema: str | None = None, password_env: str | None = None) -> Path | str:
    """An inbox as every process opened from the same settings finds it: a file's absolute path, or the URL carrying
    the inbox's schema and the password's variable where it names none."""
    if isinstance(target, Path) or not _is_postgres(target):
        return Path(target).absolute()
    return with_inbox_params(target, schema=schema, password_env=password_env)


def open_backend(
    target: str | os.PathLike[str],
    *,
    check: bool = False,
    read_only: bool = False,
    vfs: str | None = None,
    schema: str | None = None,
    password_env: str | None = None,
    busy_timeout: float | None = None,
) -> Backend:
    """The one place the storage is chosen: a PostgreSQL URL opens a schema there, anything else is the path
    of a SQLite file. vfs and busy_timeout are SQLite's (the power-cut tests; the busy_timeout setting), schema and
    password_env PostgreSQL's."""
    if _is_postgres(target):
        from console.core.pg import PgBackend  # psycopg is loaded only for a PostgreSQL inbox

        return PgBackend.open(str(target), read_only=read_only, schema=schema, password_env=password_env)
    return SqliteBackend.open(target, check=check, read_only=read_only, vfs=vfs, busy_timeout=busy_timeout)


def open_store(
    target: str | os.PathLike[str],
    *,
    options: StoreOptions | None = None,
    check: bool = False,
    read_only: bool = False,
    seed: int | None = None,
    vfs: str | None = None,
    schema: str | None = None,
    password_env: str | None = None,
    **changes: Any,
) -> Store:
    """Open (creating and migrating if need be) an inbox: the path of a SQLite file, or a PostgreSQL URL
    (postgresql://user@host/db, its inbox schema in `?schema=` or schema=, the password from PGPASSWORD,
    ~/.pgpass or the variable password_env names); both give the same API and behaviour. The settings
    come from `options` (defaults: StoreOptions()), with any single option also accepted as a keyword
    (`lease_ttl=30`)."""
    settled = (options or StoreOptions()).but(**changes)
    backend = open_backend(target, check=check, read_only=read_only, vfs=vfs, schema=schema,
                           password_env=password_env, busy_timeout=settled.busy_timeout)
    return Store(backend, settled, seed)


class Store(
    IntakeMixin, DrainMixin, InboxMixin, LeaseMixin, TimersMixin, ApprovalsMixin, PhoneMixin, OutboxMixin, JournalMixin,
    MemoryMixin, AuditMixin, RetentionMixin, ReplayMixin, ChatMixin, MailMixin, InsightsMixin, AgentStateMixin,
    ToolHealthMixin, SpendMixin, SearchMixin, StrandedMixin, CapsMixin, ModelHealthMixin, SchedulesMixin,
):
    """Every part of the Store over one Backend. Each mixin derives from StoreBase alone (what one asks of
    another is declared there), so their order here does not matter."""

    def __init__(self, backend: Backend, options: StoreOptions, seed: int | None = None) -> None:
        self._backend = backend
        self._conn = backend.conn
        self.path = backend.path
        self.options = options
        self._seed = seed
        self._rng = random.Random(seed)
        self._refused = {}

    open = staticmethod(open_store)

    def reopen(self) -> Store:
        """Another connection to the same inbox with the same settings (for another thread)."""
        return type(self)(self._backend.reopen(), self.options, self._seed)

    def close(self) -> None:
        with contextlib.suppress(StoreError):  # a busy or moved inbox: only the tally of refused copies is lost
            self.write_refusals()
        self._backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def backend(self) -> str:
        """Which engine holds this inbox: "sqlite" or "postgresql"."""
        return self._backend.name

    @property
    def backend_name(self) -> str:
        """'sqlite' or 'postgresql'."""
        return self._backend.name

    @property
    def storage(self) -> Backend:
        """The backend itself (copy.py moves an inbox between two; tests and benchmarks look at it)."""
        return self._backend

    @property
    def connection(self) -> Any:
        """For tests and benchmarks inside the core's own tree; application code uses the methods."""
        return self._backend.conn

    def change_feed(self) -> ChangeFeed:
        """Something to wait on until another connection commits to this inbox. On SQLite the kernel says
        when the file's WAL is written and PRAGMA data_version, on a connection of its own, whether a commit
        landed (console.core.walfeed); on PostgreSQL it LISTENs, and every commit NOTIFYs."""
        return self._backend.change_feed()

    def move_mark(self) -> tuple[str, str, int] | None:
        """This inbox's part in a move, if any: (state, the other inbox's name, since): `moving` / `moved` to
        a target, or an `incomplete` copy from a source."""
        return self._backend.move_mark()

    def _move_status(self) -> dict[str, Any] | None:
        mark = self.move_mark()
        if mark is None:
            return None
        state, other, since = mark
        return {"state": state, "other": other, "since": since, "refusal": str(move_refusal(*mark))}

    def move_refusal(self) -> MoveRefusal | None:
        """Why this inbox must take no new work because of a move (the error every write raises), or None."""
        mark = self.move_mark()
        return None if mark is None else move_refusal(*mark)

    def check_open_for_work(self) -> None:
        """Raise the move's refusal (a StoreError, one line) when this inbox is being moved, was moved, or is
        an unfinished copy; the start-up gate calls it before a receiver listens or a worker claims."""
        refusal = self.move_refusal()
        if refusal is not None:
            raise refusal

    # --- facts about the storage (the backend's) ------------------------------------------------
    def data_version(self) -> int:
        """Changes when another connection commits (cheap). SQLite: PRAGMA data_version. PostgreSQL: when a
        transaction that writes starts or ends anywhere on the server (it may be another inbox's: a spare
        change, never a missed one); waiters use change_feed(), which hears this inbox only."""
        return self._backend.data_version()

    def limit_pages(self, pages: int) -> int:
        """Cap this connection's database size (PRAGMA max_page_count), to test a full disk.

        SQLite never sets the cap below the file's current size, so limit_pages(1) freezes the file
        at its present size. Returns the cap now in force. A PostgreSQL inbox has no such cap (StoreError).
        """
        return self._backend.limit_pages(pages)

    def schema(self) -> list[tuple[str, str, str]]:
        return self._backend.schema()

    def schema_version(self) -> int:
        """The number of schema migrations applied to this inbox (SQLite: PRAGMA user_version)."""
        return self._backend.schema_version()

    def integrity_check(self) -> str:
        return self._backend.integrity_check()

    def integrity_problems(self) -> list[str]:
        """A full integrity check (a file: it reads every page; PostgreSQL, which checks its own pages: the
        kept counts agree with the rows they count): what is wrong, one line each."""
        return self._backend.integrity_problems()

    def intake_check(self, *, seconds: float, probe_write: bool = True) -> QuickCheck:
        """The check before intake (console.core.gate runs it). SQLite: its quick check, stopped after
        `seconds` (it only reads). PostgreSQL: the schema is this version's and (probe_write) a write commits."""
        return self._backend.intake_check(seconds=seconds, probe_write=probe_write)

    def wal_bytes(self) -> int:
        """The size of the file's WAL now (0 when there is none; PostgreSQL keeps its own)."""
        return self._backend.wal_bytes()

    def shrink_wal(self) -> bool:
        """Checkpoint the WAL into the file and truncate it, if no reader holds it (never waits).
        True when the WAL is now empty."""
        return self._backend.shrink_wal()

    def page_count(self) -> int:
        return self._backend.page_count()

    def durability_settings(self) -> dict[str, str]:
        """The storage's settings that decide what an acknowledged commit survives (benchmarks print them)."""
        return self._backend.durability_settings()

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
            "damaged": self.damaged_events(),
            "lease": lease_info,
            "takeovers": self.takeover_count(),
            "refused_finishes": self.refused_finish_count(),
            "approvals_pending": [
                {"request_id": a.request_id, "action": a.action, "expires_at": a.expires_at,
                 "expires_in": a.expires_at - now, "event_id": a.event_id, "tool": a.tool,
                 "arguments": a.arguments, "sources": a.sources or [], "details": a.details, "origin": a.origin}
                for a in approvals
            ],
            "approvals_recent": [
                {"request_id": a.request_id, "action": a.action, "outcome": a.outcome,
                 "answered_via": a.answered_via, "answered_at": a.resolved_at, "tool": a.tool,
                 "arguments": a.arguments, "details": a.details}
                for a in self.resolved_approvals(RECENT_APPROVALS)
            ],
            "stranded_answers": [answer.public() for answer in self.stranded_answers()],
            "phone_answers": self.phone_answer_counts(),
            "outbox": self.outbox_counts(),
            "next_send_at": self.next_send_at(now=now),
            "next_timer": None if nxt is None else {"id": nxt.id, "due": nxt.due, "due_in": nxt.due - now},
            "agent": self.agent_state().public(now),
            "spend": self.spend_summary(budgets or BudgetDefaults(), now=now),
            "move": self._move_status(),
            "telegram": self.chat_status("telegram"),
            "email": self.mail_status(),
            "tools": self.tool_health(),
            "schedules": self.schedule_rows(now=now, zone=(budgets or BudgetDefaults()).zone),
            "receiver": self.receiver_counts(),
        }
