"""The SQLite inbox's change feed: woken by the kernel when the file's WAL is written, instead of looking.

A commit to a WAL-mode file appends its pages to `<inbox>-wal` with write() before it becomes visible (the
WAL index in shared memory, which no kernel event reports, is updated after the write and any fsync). So
inotify's IN_MODIFY on the WAL file says "a commit may be landing", from any process or thread on this
machine, and PRAGMA data_version (on the feed's own connection) says whether one did. After a write the feed
looks at data_version a few times over a short spell (the commit turns visible once its fsync returns);
while nothing writes, it sleeps in poll() and costs nothing, where looking every 50 ms cost an idle console
20 thread hand-offs a second (docs/performance.md, "Idle").

Where inotify is missing (not Linux) or refuses (no watches left), the feed looks every POLL_SECONDS, as before.
Every wait also ends with a look, so a write the kernel did not report (a writer on another machine over a
network file system, where SQLite's WAL does not work anyway) is still seen within the caller's timeout.

close() ends a wait under way at once, from any thread (an eventfd in the same poll() as the inotify watch), so
a caller may wait for many seconds at a time (LONGEST_WAIT) and still stop promptly: the engine's watcher waited
half a second at a time only to notice that it was stopping, two wake-ups a second of an idle console.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("agent_console.store")

POLL_SECONDS = 0.05  # without inotify: how often data_version is looked at
# After a write to the WAL: how long the feed keeps looking for the commit it belongs to (its fsync may take
# milliseconds on a busy disk), and the first and the longest gap between two looks meanwhile.
SETTLE_SECONDS = 1.0
SETTLE_FIRST_STEP = 0.001
SETTLE_LONGEST_STEP = 0.05
# How long a caller's one wait may last: close() ends it at once, so only a write the kernel did not report
# (see above) waits this long to be seen.
LONGEST_WAIT = 30.0


class VersionedFile(Protocol):
    """The connection a feed looks through (the Store, or the backend under it)."""

    path: str

    def data_version(self) -> int: ...

    def close(self) -> None: ...


def _kernel_watch(wal: Path) -> Any:
    """An inotify instance reporting writes to the WAL file, or None where the platform has no inotify."""
    from inotify_simple import INotify, flags  # loaded as the engine starts, not before the console's first frame

    try:
        inotify = INotify()
    except AttributeError:  # not Linux: libc has no inotify_init1
        return None
    try:
        inotify.add_watch(wal, flags.MODIFY)
    except OSError:
        inotify.close()
        raise
    return inotify


class WalFeed:
    """Waits until another connection commits to the inbox file (see the module's docstring). wait() may run
    in one thread while close() is called from another: close() then takes effect when that wait next looks."""

    longest_wait = LONGEST_WAIT

    def __init__(self, store: VersionedFile) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._closed = False
        self._waiting = False  # a wait is in poll(): it, not close(), then closes the descriptors
        self._closer: int | None = None  # the eventfd close() writes to, to end a wait under way
        # The first look (a read) makes the WAL if the file had none, and the feed's connection keeps it: SQLite
        # deletes it only when the last connection closes. Its name is beside the file any links lead to.
        self._seen = store.data_version()
        self._inotify: Any = None
        try:
            self._inotify = _kernel_watch(Path(os.path.realpath(store.path) + "-wal"))
        except OSError as exc:  # e.g. fs.inotify.max_user_watches spent: look every POLL_SECONDS instead
            log.info("the inbox's change feed looks every %.0f ms (inotify refused: %s)", POLL_SECONDS * 1000, exc)
        if self._inotify is not None:
            self._closer = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # Linux, as inotify is
        # A commit between the first look and the watch is seen by the first wait's first look.

    @property
    def kernel_told(self) -> bool:
        """True while the kernel reports writes to the WAL (inotify); False when the feed looks every 50 ms."""
        return self._inotify is not None

    def _changed(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            current = self._store.data_version()
        if current != self._seen:
            self._seen = current
            return True
        return False

    def _written(self, timeout: float) -> bool:
        """Block until the WAL is written (True), or timeout seconds pass or the feed is closed (False)."""
        with self._lock:
            if self._closed or self._inotify is None or self._closer is None:
                return False
            self._waiting = True
            inotify, closer = self._inotify, self._closer
        try:
            poller = select.poll()
            poller.register(inotify.fileno(), select.POLLIN)
            poller.register(closer, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(max(0, round(timeout * 1000)))}
            events = inotify.read(timeout=0) if inotify.fileno() in ready and not self._closed else []
        finally:
            with self._lock:
                self._waiting = False
                closed = self._closed
                if closed:  # close() came while this wait polled: it left the descriptors to it
                    self._release()
        if closed:
            return False
        from inotify_simple import flags

        with self._lock:
            if any(event.mask & flags.IGNORED for event in events):
                # The WAL was deleted under the feed's connection (by hand): look every POLL_SECONDS from now on.
                self._close_watch()
        return any(event.mask & flags.MODIFY for event in events)

    def _close_watch(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        if self._closer is not None:
            os.close(self._closer)
            self._closer = None

    def _release(self) -> None:
        self._close_watch()
        self._store.close()

    def wait(self, timeout: float) -> bool:
        """True once another connection has committed since the last True (or since the feed was made); False
        when timeout seconds pass without one."""
        deadline = time.monotonic() + max(0.0, timeout)
        settle_until = 0.0
        step = SETTLE_FIRST_STEP
        while True:
            if self._changed():
                return True
            now = time.monotonic()
            left = deadline - now
            if left <= 0 or self._closed:
                return False
            if self._inotify is None:
                time.sleep(min(POLL_SECONDS, left))  # a file cannot announce a commit: look again
            elif now < settle_until:
                time.sleep(min(step, left, settle_until - now))  # the commit is landing: look again shortly
                step = min(step * 2, SETTLE_LONGEST_STEP)
            elif self._written(left):
                settle_until, step = time.monotonic() + SETTLE_SECONDS, SETTLE_FIRST_STEP

    def close(self) -> None:
        """Close the feed; a wait under way in another thread ends at once (returning False)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._waiting and self._closer is not None:
                os.eventfd_write(self._closer, 1)  # the wait wakes, and closes what it polled on its way out
            else:
                self._release()
