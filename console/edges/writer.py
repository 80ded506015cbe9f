"""Group commit: one writer thread, its own Store connection, concurrent ingests in one transaction.

Requests queue their events; the writer takes everything queued at the moment it is free and
commits it with one BEGIN IMMEDIATE ... COMMIT (one fsync of the WAL). While that fsync runs, the
next requests queue up, so the group size follows the load on its own, with no timer and no added
delay for a lone request. Every request is answered only after the transaction holding its event
commits, so an acknowledgement always means durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from console import telemetry
from console.clock import Clock, WallClock
from console.config import Settings, open_inbox
from console.core import MoveRefusal, ReplayGuard, Store, StoreError, StoreUnavailable
from console.core.errors import InboxDamaged, damage_met, is_damage, is_storage_error
from console.core.gate import START_CHECK_SECONDS, check_before_intake
from console.futures import settle_future

T = TypeVar("T")
log = logging.getLogger("agent_console.webhooks")
DEFAULT_MAX_GROUP = 1000


@dataclass
class _Ingest:
    source: str
    source_id: str
    text: str  # the payload as encode_event returned it
    guard: ReplayGuard | None
    future: asyncio.Future[str]
    trace: str | None = None  # the traceparent to keep with the event (a sender that traces)


@dataclass
class _Call:
    fn: Callable[[Store], Any]
    future: asyncio.Future[Any]


@dataclass
class WriterStats:
    transactions: int = 0       # write transactions begun for ingests (one per group, or per event)
    commits: int = 0            # of those, committed: each is one fsync of the WAL under synchronous=FULL
    failed: int = 0             # rolled back because the database could not take them
    events: int = 0             # deliveries committed (new, duplicate or replay)
    largest_group: int = 0
    # Seconds the writer waited for work (a wait under way counted so far): against the time it ran, how much of it
    # the requests kept it busy (near none: the disk and the store are the limit; much: the HTTP front is).
    waited: float = 0.0
    waiting_since: float | None = None

    def as_dict(self) -> dict[str, int]:
        since = self.waiting_since
        idle = self.waited + (time.perf_counter() - since if since is not None else 0.0)
        return {"transactions": self.transactions, "commits": self.commits, "failed": self.failed,
                "events": self.events, "largest_group": self.largest_group, "idle_ms": round(idle * 1000)}


_STOP = object()


def _unavailable(exc: BaseException) -> StoreError:
    if isinstance(exc, StoreUnavailable | InboxDamaged | MoveRefusal):
        return exc
    if is_storage_error(exc):
        return StoreUnavailable(f"the inbox could not take the write: {exc}")
    log.exception("the webhook writer failed unexpectedly")
    return StoreUnavailable(f"the inbox could not take the write ({type(exc).__name__})")


def _settle(results: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    # A request that went away is skipped; its event is stored all the same.
    for future, value, error in results:
        settle_future(future, value, error)


class IngestWriter:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        group_commit: bool = True,
        max_group: int = DEFAULT_MAX_GROUP,
        check_first: bool = False,
        refusal: Callable[[], str | None] | None = None,
    ) -> None:
        """check_first runs the gate before intake as the writer opens the inbox (a receiver on its own: an
        engine beside it has run it already). refusal says why the inbox takes no work now (the verdict of
        the engine beside it)."""
        self.settings = settings
        self.path = settings.db
        self.check_first = check_first
        # Set once a write met a damaged page: every later delivery is refused without touching the file.
        self.damaged: str | None = None
        self._refusal = refusal
        self.group_commit = group_commit
        self.max_group = max(1, max_group)
        self.stats = WriterStats()
        self._clock = clock or WallClock()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._store: Store | None = None

    # --- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the Store on the writer thread (and, with check_first, run the gate before intake on it); a
        StoreError (bad path, old SQLite, a damaged inbox...) is raised here."""
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="webhook-writer", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]

    def stop(self) -> None:
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    # --- used from the event loop -------------------------------------------------------------
    def encode(self, source: str, source_id: str, payload: Any) -> str:
        """The payload's text for ingest; ValueError for an event the Store would refuse, so that it never joins
        (and fails) a group. The one encoding of a delivery: the writer stores this text."""
        assert self._store is not None, "the writer is not started"
        return self._store.encode_event(source, source_id, payload)

    def refusal(self) -> str | None:
        """Why no delivery may be stored now (a damaged inbox), or None."""
        if self.damaged is not None:
            return self.damaged
        return self._refusal() if self._refusal is not None else None

    async def ingest(self, source: str, source_id: str, text: str, guard: ReplayGuard | None = None, *,
                     trace: str | None = None) -> str:
        """"stored", "duplicate" or "replay" (Store.ingest_deliveries) for a payload's text from encode();
        StoreUnavailable when not durable, InboxDamaged when the inbox takes no work (nothing is written)."""
        refused = self.refusal()
        if refused is not None:
            raise InboxDamaged(refused)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.put(_Ingest(source, source_id, text, guard, future, trace))
        return await future

    async def call(self, fn: Callable[[Store], T]) -> T:
        """Run fn(store) on the writer thread, in turn with the ingests."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put(_Call(fn, future))
        return await future

    # --- the writer thread --------------------------------------------------------------------
    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            self._store = open_inbox(self.settings)
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        if self.check_first:
            try:
                report = check_before_intake(self._store, seconds=START_CHECK_SECONDS)
                if not report.finished:
                    log.info("inbox checked for %.1f s, not to its end (a large file): no damage found so far; "
                             "`agent-console check` reads it all", report.seconds)
            except BaseException as exc:
                self._store.close()
                failure.append(exc)
                ready.set()
                return
        ready.set()
        try:
            stopping = False
            while not stopping:
                self.stats.waiting_since = waiting = time.perf_counter()
                items = [self._queue.get()]
                self.stats.waited += time.perf_counter() - waiting
                self.stats.waiting_since = None
                while len(items) < self.max_group:
                    try:
                        items.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if _STOP in items:
                    stopping = True
                    items = [item for item in items if item is not _STOP]
                self._handle(self._store, items)
        finally:
            self._store.close()

    def _handle(self, store: Store, items: list[object]) -> None:
        group: list[_Ingest] = []
        for item in items:
            if isinstance(item, _Ingest):
                group.append(item)
                continue
            self._flush(store, group)
            group = []
            if isinstance(item, _Call):
                self._run_call(store, item)
        self._flush(store, group)

    def _flush(self, store: Store, group: list[_Ingest]) -> None:
        if not group:
            return
        if self.group_commit:
            self._commit(store, group)
        else:
            for item in group:
                self._commit(store, [item])

    def _commit(self, store: Store, group: list[_Ingest]) -> None:
        results: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
        try:
            outcomes = store.ingest_encoded_deliveries(
                [(i.source, i.source_id, i.text, i.guard) for i in group], now=self._clock.now(),
                traces={(i.source, i.source_id): i.trace for i in group if i.trace})
        except ValueError:
            # Each event was validated before it queued; should one slip through anyway it must not
            # take the rest of its group down with it.
            if len(group) > 1:
                for item in group:
                    self._commit(store, [item])
            else:
                self._deliver(group[0].future, None, ValueError("the event was refused by the inbox"))
            return
        except Exception as exc:  # StoreError, a backend's own errors, or a bug: never a 2xx for an event not durable
            self.stats.transactions += 1
            self.stats.failed += 1
            error = self._met_damage(exc) if is_damage(exc) else _unavailable(exc)
            results = [(item.future, None, error) for item in group]
        else:
            self.stats.transactions += 1
            self.stats.commits += 1
            self.stats.events += len(group)
            self.stats.largest_group = max(self.stats.largest_group, len(group))
            results = [(item.future, outcome, None) for item, outcome in zip(group, outcomes, strict=True)]
            self._count(group, outcomes)
        self._deliver_all(results)

    @staticmethod
    def _count(group: list[_Ingest], outcomes: list[str]) -> None:
        """The deliveries' verdicts in telemetry's counter: one addition per source and verdict a commit."""
        verdicts = Counter((item.source, outcome) for item, outcome in zip(group, outcomes, strict=True))
        for (source, verdict), amount in verdicts.items():
            telemetry.count("agent_console.events.ingested", "{event}", "Webhook deliveries by source and verdict",
                            {"agent_console.event.source": source, "agent_console.ingest.verdict": verdict}, amount)

    def _met_damage(self, exc: BaseException) -> InboxDamaged:
        """A write met a damaged page: this delivery and every later one are refused (503)."""
        damaged = damage_met(self.path, exc)
        if self.damaged is None:
            self.damaged = str(damaged)
            log.error("refusing every delivery from now on: %s", self.damaged)
        return damaged

    def _run_call(self, store: Store, item: _Call) -> None:
        try:
            value = item.fn(store)
        except Exception as exc:
            self._deliver(item.future, None, exc)
        else:
            self._deliver(item.future, value, None)

    def _deliver(self, future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
        self._deliver_all([(future, value, error)])

    @staticmethod
    def _deliver_all(results: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
        if not results:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            results[0][0].get_loop().call_soon_threadsafe(_settle, results)
