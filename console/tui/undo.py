"""The console's undo: **u** takes back the last undoable action taken in this console (a discard, a bulk
discard, a note forgotten, a timer or a schedule deleted).

Each action that can be taken back pushes an `Undoable` when it is done: what it did, in words, and how to put it
back (a coroutine that writes through the engine and says what it did). The stack is this console's own and
lives as long as the console: another console's actions are not undone here, and nothing of it is stored.

For a new undoable action (a screen or pane): do the action, then

    app.undo.push(Undoable("deleted schedule s-12 (water the plants)", put_back))

where `put_back` is `async () -> str`, returning the words of the toast ("schedule s-12 is back"); it raises a
StoreError (or ValueError) when the thing cannot be put back, and the toast says why.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from console.core import StoreError

UNDO_DEPTH = 50  # actions remembered; the oldest is forgotten past it


@dataclass(frozen=True)
class Undoable:
    what: str  # what was done, in words ("discarded 6 events")
    put_back: Callable[[], Awaitable[str]]  # undoes it; returns what it did, in words


class UndoStack:
    def __init__(self, depth: int = UNDO_DEPTH) -> None:
        self._done: deque[Undoable] = deque(maxlen=depth)

    def push(self, action: Undoable) -> None:
        self._done.append(action)

    def pop(self) -> Undoable | None:
        return self._done.pop() if self._done else None

    def peek(self) -> Undoable | None:
        return self._done[-1] if self._done else None

    def __len__(self) -> int:
        return len(self._done)


Say = Callable[..., object]  # a toast: (message, *, title=, severity=)


async def undo_last(stack: UndoStack | None, say: Say) -> None:
    """u: the newest action on the stack taken back, and a toast saying what came back (or why nothing did)."""
    action = None if stack is None else stack.pop()
    if action is None:
        say("Nothing to undo in this console", title="Undo", severity="warning")
        return
    try:
        said = await action.put_back()
    except (StoreError, ValueError) as exc:
        say(f"Could not undo ({action.what}): {exc}", title="Undo", severity="warning")
        return
    say(said, title=f"Undone: {action.what}", severity="information")
