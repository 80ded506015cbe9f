"""What the console and its live panes ask of each other.

Each pane of the main screen reads its own facts, redraws itself and carries its own actions: the console
only says when (an engine notice marked the pane dirty, the clock's second ticked) and routes the keys. A
pane sees the console through PaneHost, the little of it a pane needs; the console drives each pane through
LivePane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

from textual.notifications import Notification, SeverityLevel

from console.clock import Clock
from console.config import Settings
from console.core import Store
from console.tui.backend import ConsoleEngine
from console.tui.undo import UndoStack

T = TypeVar("T")

# The panes by widget id, in the order their reads are started. "events" is also what the engine's watcher
# posts when any other connection or process commits to the inbox: it could be anything, so every pane is read
# again.
PANES = ("events", "lease", "approvals", "outbox", "header")


class PaneHost(Protocol):
    """The console as its panes see it."""

    settings: Settings
    clock: Clock
    engine: ConsoleEngine
    started: bool  # the engine has started and not stopped yet
    undo: UndoStack  # this console's undoable actions (u)

    @property
    def known_sources(self) -> list[str]: ...

    async def read(self, fn: Callable[[Store], T]) -> T: ...

    def mark(self, *panes: str) -> None:
        """These panes (PANES) are read again shortly (at most once per flush, however often marked)."""
        ...

    def key_for(self, binding_id: str) -> str | None: ...

    def relabel(self, binding_id: str, description: str) -> None:
        """A key's label in the footer changed (x reads Resume while stalled)."""
        ...

    def receiver_summary(self) -> str | None: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def toast(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
              timeout: float | None = None) -> Notification:
        """notify, handing back the toast so that it can be taken away early (untoast)."""
        ...

    def untoast(self, notification: Notification) -> None: ...


class LivePane(Protocol):
    """What the console asks of each pane."""

    async def reload(self) -> None:
        """Read what the pane shows again and show it (a StoreError is the console's to log)."""
        ...

    def tick(self, now: int) -> None:
        """The clock's second: redraw what moves with it from the view held, reading nothing (a pane whose
        facts time alone has changed marks itself to be read again)."""
        ...


@runtime_checkable
class FollowsInbox(Protocol):
    """A screen that shows what the inbox holds while it is open (an event's detail, a run's timeline, the spend):
    the console calls inbox_changed on each engine notice while it is the screen showing. A screen not open is
    never called, and costs nothing."""

    def inbox_changed(self) -> None: ...
