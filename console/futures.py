"""Handing a result computed on a worker thread back to the asyncio caller that awaits it.

Neutral ground: the runtime's database threads and the webhook receiver's writer both use it, and
neither room imports the other."""

from __future__ import annotations

import asyncio
from typing import Any


def settle_future(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """Hand a worker thread's result to the awaiting caller, on the caller's loop."""
    if future.done():  # the caller was cancelled, or went away, meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
