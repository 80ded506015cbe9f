"""A thread that owns one Store connection; the event loop hands it work and awaits the result.

SQLite calls never run on the event loop, so a UI on the same loop never freezes, and each thread
keeps its own connection (apsw connections are not shared across concurrent transactions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from console.core import Store

T = TypeVar("T")


class DbThread:
    def __init__(self, name: str, opener: Callable[[], Store]) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agent-console-{name}")
        self._opener = opener
        self._store: Store | None = None

    def _with_store(self, fn: Callable[[Store], T]) -> T:
        if self._store is None:
            self._store = self._opener()
        return fn(self._store)

    async def __call__(self, fn: Callable[[Store], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._with_store, fn)

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    async def close(self, *, wait: bool = True) -> None:
        """Close the connection on its own thread. With wait=False a stuck call is left behind."""
        if wait:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._close)
            self._executor.shutdown(wait=True)
        else:
            self._executor.submit(self._close)
            self._executor.shutdown(wait=False)
