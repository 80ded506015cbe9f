"""A screen that follows the inbox reads again on every engine notice; notices can come in floods. FoldedReads runs
one read at a time, and folds the calls that come while it runs into one more read after it: a flood costs at most
two reads and never starves the screen."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from textual.css.query import NoMatches
from textual.dom import DOMNode

from console.core import StoreError


class FoldedReads:
    def __init__(self, node: DOMNode, read_once: Callable[[], Awaitable[None]], group: str) -> None:
        self._node = node
        self._read_once = read_once
        self._group = group
        self._reading = False
        self._again = False

    def __call__(self) -> None:
        """Read again: now, or once more after the read under way."""
        if self._reading:
            self._again = True
            return
        self._reading = True
        self._node.run_worker(self._reads(), group=self._group)

    async def _reads(self) -> None:
        try:
            self._again = True
            while self._again:
                self._again = False
                # A busy or closing file: the next notice or tick reads again. A screen taken down while it read has
                # no widgets left to show the answer in (NoMatches): nothing to do.
                with contextlib.suppress(StoreError, NoMatches):
                    await self._read_once()
        finally:
            self._reading = False
