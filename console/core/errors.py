"""The store's errors, the same whichever backend holds the inbox: what every caller catches and says in one line.

Each backend turns its own errors into these at the seam (SQLite's apsw errors in core/db.py, PostgreSQL's in
core/pg.py) and tells this module which of its errors mean damage (register_backend_errors), so nothing here, nor
anything that catches these, imports a database driver.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class StoreError(Exception):
    """A problem the user can act on (bad path, not a database, read-only file, old SQLite)."""


class StoreUnavailable(StoreError):
    """The database could not take a write right now (busy for too long, disk or file full)."""


class MoveRefusal(StoreError):
    """The inbox takes no new work because of a move (`agent-console migrate`): every write transaction
    raises it, so every writer (the engine, the receiver, the console, CLI writes) says the same one line."""


class InboxMoving(MoveRefusal, StoreUnavailable):
    """The inbox is being copied: a writer waits and tries again (a webhook gets 503 with Retry-After)."""


class InboxMoved(MoveRefusal):
    """The inbox was moved: its work goes on in the target."""


class InboxIncomplete(MoveRefusal):
    """The inbox is a copy that `migrate` has not finished."""


MOVE_STATES = ("moving", "moved", "incomplete")


def move_refusal(state: str, other: str, at: int) -> MoveRefusal:
    """The one line an inbox marked by a move answers every writer with."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    if state == "moving":
        return InboxMoving(f"this inbox is being moved to {other} (agent-console migrate, since {since}): it takes "
                           f"nothing new until the move is done, then use --db {other}; try again later")
    if state == "moved":
        return InboxMoved(f"this inbox was moved to {other} ({since}): it takes no new work; use --db {other}")
    return InboxIncomplete(f"this inbox is an unfinished copy from {other} (agent-console migrate, {since}): "
                           "run migrate again or delete it")


class InboxDamaged(StoreError):
    """The inbox is damaged (its check failed, or a read or write met a damaged page): it takes no new work
    until a backup is restored. The message is one line, the same wherever the damage was found."""


def damage_line(path: str | os.PathLike[str], problems: list[str]) -> str:
    """The one line that says an inbox is damaged: `check`'s first line, and the refusal of every command and
    process that would give it new work."""
    shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
    count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
    return (f"inbox {os.fspath(path)} is damaged: it failed its integrity check ({count}: {shown}); restore a "
            "backup, see docs/reliability.md")


# A backend's own error classes: any of its errors (a storage error the webhook writer answers 503 for), and those
# that mean the inbox is damaged. Registered by the backend's module as it loads (core/db.py: apsw's).
_backend_errors: tuple[type[BaseException], ...] = ()
_damage_errors: tuple[type[BaseException], ...] = ()
# PostgreSQL's SQLSTATEs for damaged data or index pages.
DAMAGE_SQLSTATES = ("XX001", "XX002")


def register_backend_errors(*, errors: type[BaseException], damage: tuple[type[BaseException], ...]) -> None:
    """A backend's errors: its base class, and the classes that mean it met a damaged inbox."""
    global _backend_errors, _damage_errors
    _backend_errors = (*_backend_errors, errors)
    _damage_errors = (*_damage_errors, *damage)


def is_storage_error(exc: BaseException) -> bool:
    """A StoreError, or an error of a backend's own that was not translated (a bug's, or one met outside the Store)."""
    return isinstance(exc, (StoreError, *_backend_errors))


def is_damage(exc: BaseException) -> bool:
    """A backend met damage: SQLite a damaged page (SQLITE_CORRUPT) or a file that is no longer a database
    (SQLITE_NOTADB); PostgreSQL damaged data or index pages (SQLSTATE XX001, XX002)."""
    if isinstance(exc, (InboxDamaged, *_damage_errors)):
        return True
    return getattr(exc, "sqlstate", None) in DAMAGE_SQLSTATES


def damage_met(path: str | os.PathLike[str], exc: BaseException) -> InboxDamaged:
    """Damage met while reading or writing (no check ran first): the same one line, naming what was met."""
    if isinstance(exc, InboxDamaged):
        return exc
    return InboxDamaged(damage_line(path, [str(exc)]))


@contextmanager
def reporting_damage(path: str | os.PathLike[str]) -> Iterator[None]:
    """Damage met while reading (no check ran at open) is one line naming the file and what to do."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, InboxDamaged) or not is_damage(exc):
            raise
        raise damage_met(path, exc) from exc


def newer_schema(where: str | Path, current: int, known: int) -> StoreError:
    """An inbox migrated by a later agent-console than this one (known: this one's last migration)."""
    return StoreError(
        f"inbox {where} has schema version {current}, newer than this agent-console "
        f"understands ({known}); upgrade agent-console"
    )


def older_schema_to_read(where: str | Path, current: int, known: int) -> StoreError:
    """A command that only reads met an inbox not yet migrated to this agent-console's schema."""
    return StoreError(
        f"inbox {where} has schema version {current}, older than this agent-console's "
        f"({known}), and this command only reads: run a writing command once (`agent-console run`, "
        f"or open the console) to upgrade it"
    )
