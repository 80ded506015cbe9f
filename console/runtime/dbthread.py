"""A thread that owns one Store connection; the event loop hands it work and awaits the result.

SQLite calls never run on the event loop, so a UI on the same loop never freezes, and each thread
keeps its own connection (apsw connections are not shared across concurrent transactions).

The thread is a daemon: a run abandoned at shutdown (an agent stuck in a call that never returns) must
not hold the process's exit, as a ThreadPoolExecutor worker would. By then its lease is released and its
events are back to pending; the process ending under it is the crash the inbox is built to survive.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from console.core import Store
from console.futures import settle_future

T = TypeVar("T")

_Job = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class DbThread:
    def __init__(self, name: str, opener: Callable[[], Store]) -> None:
        self.name = name
        self._opener = opener
        self._store: Store | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=f"agent-console-{name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            work, future = job
            if future.cancelled():  # nobody waits for it any more (as an executor skips a cancelled call)
                continue
            value: Any = None
            error: BaseException | None = None
            try:
                value = work()
            except BaseException as exc:  # handed to the awaiting caller, never lost in this thread
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
                future.get_loop().call_soon_threadsafe(settle_future, future, value, error)

    def _with_store(self, fn: Callable[[Store], T]) -> T:
        if self._store is None:
            self._store = self._opener()
        return fn(self._store)

    def _submit(self, work: Callable[[], T]) -> asyncio.Future[T]:
        if self._closing:  # queued behind the thread's end it would never be answered, and its caller never go on
            raise RuntimeError(f"the {self.name} database thread is closed: it takes no more work")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((work, future))
        return future

    async def __call__(self, fn: Callable[[Store], T]) -> T:
        return await self._submit(lambda: self._with_store(fn))

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    async def close(self, *, wait: bool = True) -> None:
        """Close the connection on its own thread and end the thread. With wait=False a stuck call is left
        behind: the connection is closed and the thread ends once that call returns, if it ever does."""
        if self._closing:
            return
        closed = self._submit(self._close)
        self._closing = True
        self._jobs.put(None)
        if wait:
            await closed
