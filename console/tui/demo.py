"""The inject and demo controls: the inject form (i) stores an event typed by hand; in `--demo` only, whose
inbox is a throwaway, the test keys write made-up events at once (c a chat message, p a poison event, d the
last event again, a a chat that needs approval) and console/demo.py's scripted traffic runs beside the screen.
Every event the console itself stores comes through InjectControls.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from textual.app import App

from console.core import Store, StoreError
from console.demo import DemoEngine, run_demo
from console.tui.panes import PaneHost

if TYPE_CHECKING:
    from console.tui.screens.inject import InjectScreen

APPROVAL_TEXT = "refund order 881"
# The test keys' actions: the console offers them (keys, footer, help, palette) only in `--demo`.
DEMO_ACTIONS = frozenset({"quick_chat", "quick_poison", "quick_redeliver", "quick_approval"})


def source_id_taken(source_id: str, store: Store) -> bool:
    return any(store.find_event(source, source_id) for source in ("chat", "manual", "webhook", *store.sources()))


class InjectControls:
    def __init__(self, host: PaneHost) -> None:
        self.host = host
        self.last_injected: tuple[str, str, Any] | None = None  # what d delivers again
        self._serial = 0

    async def form(self, *, blink: bool) -> InjectScreen:
        """The inject form, with a source id no event uses yet filled in (imported when first opened: its
        TextArea is not on the first frame)."""
        from console.tui.screens.inject import InjectScreen

        return InjectScreen(self.submit, sources=self.host.known_sources, source_id=await self.unique_source_id(),
                            blink=blink)

    async def unique_source_id(self) -> str:
        """A source id no event uses yet: kb-<now>-<n>."""
        while True:
            self._serial += 1
            candidate = f"kb-{self.host.clock.now()}-{self._serial}"
            if not await self.host.read(partial(source_id_taken, candidate)):
                return candidate

    async def submit(self, source: str, source_id: str, payload: Any) -> str | None:
        """Store one event; None when stored, else what the form says under it."""
        try:
            stored = await self.host.engine.ingest(source, source_id, payload)
        except ValueError as exc:
            return f"not stored: {exc}"
        except StoreError as exc:
            return f"not stored: {exc}"
        self.last_injected = (source, source_id, payload)
        self.host.mark("events", "header")
        if not stored:
            return f"duplicate refused: {source}/{source_id} is already in the inbox (pick another source id)"
        # One short line: quick keys pressed in a row must not stack toasts over the bottom panes.
        self.host.notify(f"stored {source}/{source_id}", timeout=2)
        return None

    async def quick(self, source: str, payload: Any) -> None:
        refused = await self.submit(source, await self.unique_source_id(), payload)
        if refused is not None:
            self.host.notify(refused, severity="warning")

    async def quick_chat(self) -> None:
        await self.quick("chat", {"text": "hello from the console"})

    async def quick_poison(self) -> None:
        await self.quick("manual", {"poison": True})

    async def quick_approval(self) -> None:
        await self.quick("chat", {"text": APPROVAL_TEXT})

    async def redeliver(self) -> None:
        """The last event stored (by this console, else the newest in the inbox) again: refused as a duplicate."""
        last = self.last_injected
        if last is None:
            newest = await self.host.read(lambda store: store.events(limit=1))
            if not newest:
                self.host.notify("Nothing to redeliver: the inbox is empty", severity="warning")
                return
            last = (newest[0].source, newest[0].source_id, newest[0].payload)
        source, source_id, payload = last
        try:
            stored = await self.host.engine.ingest(source, source_id, payload)
        except (ValueError, StoreError) as exc:
            self.host.notify(f"not stored: {exc}", severity="error")
            return
        self.host.mark("events")
        if stored:
            self.host.notify(f"stored {source}/{source_id}", title="Redelivered")
        else:
            self.host.notify(f"duplicate refused: {source}/{source_id} is already stored", title="Redelivered",
                             severity="warning")


def start_demo_traffic(app: App[Any], engine: DemoEngine) -> None:
    """console/demo.py's scripted traffic on the app's loop, each step announced in a toast."""

    def announce(label: str) -> None:
        app.notify(label, title="Demo", timeout=4)

    app.run_worker(run_demo(engine, on_step=announce), group="demo", exit_on_error=False)
