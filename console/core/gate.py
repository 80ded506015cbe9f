"""The gate before intake: one check that an inbox may take new work, run before a webhook receiver listens,
before a worker claims, and before `ingest` stores.

First a move's mark (`migrate`: an inbox being moved, moved, or an unfinished copy refuses in its own line);
then the newest payloads against the checksums their inserts wrote (a quarter of the time bound: bit rot inside a
page passes SQLite's structural checks); then, on SQLite, the quick check, bounded in time (a large file is read
only as far as the bound reaches: the whole check is `agent-console check`'s); on PostgreSQL, which checks its own
pages only where the cluster has data checksums, the schema's version and a write that commits. A refusal is one
line (InboxDamaged for damage, the same line `check` prints first), raised as a StoreError so that every command and
process reports it the same way.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

from console.core.backend import QuickCheck
from console.core.errors import InboxDamaged, damage_line
from console.core.inbox import PayloadCheck
from console.core.models import Lease

# How long the check before intake may read: at the start of a long-lived process (`run`, `serve`, the console),
# and in `ingest`, the one command that acknowledges outside input. SQLite's quick check reads every page (about
# 0.75 s warm, 3 s cold for a 100 MB inbox of ordinary events), so a bound keeps the cost flat in the file's
# size; what a bounded check leaves unread is `agent-console check`'s (docs/reliability.md).
START_CHECK_SECONDS = 2.0
INGEST_CHECK_SECONDS = 0.2
# The share of the bound the payloads' checksums get, newest first (they are the pages most likely in the cache).
PAYLOAD_SHARE = 0.25


class Gated(Protocol):
    """What the gate asks of an inbox (the Store)."""

    @property
    def path(self) -> str: ...

    def check_open_for_work(self) -> None: ...

    def intake_check(self, *, seconds: float, probe_write: bool = True) -> QuickCheck: ...

    def verify_payloads(self, *, seconds: float | None = None) -> PayloadCheck: ...

    def lease(self) -> Lease | None: ...

    @property
    def backend_name(self) -> str: ...


def check_before_intake(
    store: Gated, *, seconds: float = START_CHECK_SECONDS, probe_write: bool = True, payloads: bool = True
) -> QuickCheck:
    """Refuse (StoreError, one line) an inbox that must take no new work; else say how far the check read.
    payloads=False leaves out the newest payloads' checksums.

    Every refusal that is about the inbox itself belongs here, so that `run`, `serve`, the console and
    `ingest` all give it before anything is acknowledged. probe_write=False leaves out PostgreSQL's write
    probe where the caller's own next step is a write that is refused the same way (`ingest`)."""
    store.check_open_for_work()  # a move's refusals: "being moved", "moved", "an unfinished copy"
    started = time.monotonic()
    mismatched = store.verify_payloads(seconds=seconds * PAYLOAD_SHARE).problems() if payloads else []
    report = store.intake_check(seconds=max(0.0, seconds - (time.monotonic() - started)), probe_write=probe_write)
    if mismatched or report.problems:
        raise InboxDamaged(damage_line(store.path, mismatched + report.problems))
    return report


# --- `ingest`'s gate: what was verified is remembered -------------------------------------------------------------
# A CLI `ingest` is a process a call: a bounded check in each made it cost 2.2x on an 85 MB inbox what it costs on a
# fresh one (docs/performance.md). The file's state after an ingest that checked it (or found it as one left it) is
# remembered beside it, owner-only: its identity, size, modification and change times, and the WAL's (an empty or
# absent WAL is the same state: the last connection's close checkpoints and removes it). The next ingest that finds
# the same state checks nothing: nobody has written the file since, not even to flip a byte (a write moves the change
# time, which no user can set back). Any other state (an engine's commits, a restore, a copy over it, damage written
# from outside) is checked again, as before. Nor does an ingest check while a live engine holds the lease: that engine
# ran the gate when it started, and every read and write of its own meets damage as it comes (Engine.halt_on_damage).
CHECKED_SUFFIX = "-checked"


def file_state(path: str | os.PathLike[str]) -> str | None:
    """The state of a SQLite inbox file and its WAL, as `ingest`'s gate remembers it (None when there is no file)."""
    parts = []
    for name, part in (("file", Path(path)), ("wal", Path(f"{os.fspath(path)}-wal"))):
        try:
            info = os.stat(part)
        except FileNotFoundError:
            if name == "file":
                return None
            info = None
        if info is None or (name == "wal" and info.st_size == 0):
            parts.append(f"{name} -")
        else:
            parts.append(f"{name} {info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}")
    return " ".join(parts)


def _remembered(path: str) -> str | None:
    try:
        return Path(path + CHECKED_SUFFIX).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def remember_checked(path: str) -> None:
    """After an ingest whose gate passed, and after its store closed: this state is the one it left (best effort:
    a state not written is checked again next time)."""
    state = file_state(path)
    if state is None:
        return
    kept = Path(path + CHECKED_SUFFIX)
    try:
        descriptor = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(state)
    except OSError:
        pass


def check_before_ingest(store: Gated, *, now: int) -> bool:
    """`ingest`'s gate: check_before_intake within INGEST_CHECK_SECONDS, unless the file is in the state the last
    ingest left it in after its gate passed, or a live engine holds the lease (a move's refusals are always given).
    True when the caller should remember the state it leaves (remember_checked, once its store is closed)."""
    if store.backend_name != "sqlite":
        # The schema's version (the ingest is the write probe). The newest payloads are the starting engine's to
        # verify: over the network a quarter of the bound would be a cost every ingest paid, where it was a round trip.
        check_before_intake(store, seconds=INGEST_CHECK_SECONDS, probe_write=False, payloads=False)
        return False
    state = file_state(store.path)
    if state is not None and state == _remembered(store.path):
        store.check_open_for_work()
        return True
    lease = store.lease()
    if lease is not None and lease.until >= now:
        store.check_open_for_work()
        return False  # the engine's commits move the state anyway
    check_before_intake(store, seconds=INGEST_CHECK_SECONDS, probe_write=False)
    return True
