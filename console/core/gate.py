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

import time
from typing import Protocol

from console.core.backend import QuickCheck
from console.core.errors import InboxDamaged, damage_line
from console.core.inbox import PayloadCheck

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


def check_before_intake(
    store: Gated, *, seconds: float = START_CHECK_SECONDS, probe_write: bool = True
) -> QuickCheck:
    """Refuse (StoreError, one line) an inbox that must take no new work; else say how far the check read.

    Every refusal that is about the inbox itself belongs here, so that `run`, `serve`, the console and
    `ingest` all give it before anything is acknowledged. probe_write=False leaves out PostgreSQL's write
    probe where the caller's own next step is a write that is refused the same way (`ingest`)."""
    store.check_open_for_work()  # a move's refusals: "being moved", "moved", "an unfinished copy"
    started = time.monotonic()
    payloads = store.verify_payloads(seconds=seconds * PAYLOAD_SHARE).problems()
    report = store.intake_check(seconds=max(0.0, seconds - (time.monotonic() - started)), probe_write=probe_write)
    if payloads or report.problems:
        raise InboxDamaged(damage_line(store.path, payloads + report.problems))
    return report
