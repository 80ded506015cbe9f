"""The events pane: a live, filtered window onto the inbox, read one visible page at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Resize
from textual.widgets import Static
from textual.widgets.data_table import CellDoesNotExist

from console.clock import Clock
from console.core import Event, Store
from console.textsafe import terminal_safe
from console.timefmt import coarse_span
from console.tui.reads import (
    EventFilter,
    EventsPage,
    read_newer_top,
    read_older_top,
    read_oldest_top,
    read_page,
)
from console.tui.widgets.events_table import EventsTable

Reader = Callable[[Callable[[Store], Any]], Awaitable[Any]]
COLUMNS = (("id", 7), ("source", 9), ("source id", 16), ("status", 7), ("att", 3), ("gen", 3), ("age", 6),
           ("last error", None))


def table_age(seconds: int) -> str:
    """An event's age: to the second in its first minute, then whole minutes (the seconds of an older event
    are noise, and counting them redrew the whole table every second)."""
    return coarse_span(seconds, seconds_below=60)


def status_colour(variables: dict[str, str], status: str) -> str:
    return variables.get(f"status-{status}", "")


# binding id -> the key that runs it as the footer shows it (after `[keys]` remaps), None if not available here
KeyFor = Callable[[str], str | None]
DEFAULT_KEYS = {"console.inject": "i", "console.quick_chat": "c", "console.quick_approval": "a",
                "console.filter_status": "f", "console.filter_source": "s"}


def empty_hint(flt: EventFilter, total: int, key_for: KeyFor = DEFAULT_KEYS.get) -> str:
    """What to tell someone looking at an empty table: how to get events, or that the filter hides them,
    naming the keys as they are bound now."""
    if total == 0:
        inject, chat, ask = (key_for(i) for i in ("console.inject", "console.quick_chat", "console.quick_approval"))
        how = f"Press {inject} to inject one" if inject else "Inject one with `agent-console ingest`"
        quick = [f"{chat}: a quick chat message"] * bool(chat) + [f"{ask}: one that needs approval"] * bool(ask)
        more = f" ({', '.join(quick)})" if quick else ""
        return f"No events yet. {how}{more}; `agent-console --demo` shows every pane moving."
    what = f"{flt.status} events" if flt.status else "events"
    where = f" from source {flt.source}" if flt.source else ""
    status, source = key_for("console.filter_status"), key_for("console.filter_source")
    keys = [f"{key} {'to change ' * (not i)}the {which} filter"
            for i, (key, which) in enumerate((k, w) for k, w in ((status, "status"), (source, "source")) if k)]
    return f"No {what}{where} (of {total:,})." + (f" Press {', '.join(keys)}." if keys else "")


class EventsPane(Vertical):
    """top_id None means live: the newest page, following new events as they arrive."""

    HELP = """
## Events
The inbox, newest first: **enter** shows why an event has (not) run. The keys below work here;
**ctrl+p** finds every action by name.
"""

    def __init__(self, reader: Reader, clock: Clock, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.reader = reader
        self.clock = clock
        self.filter = EventFilter()
        self.top_id: int | None = None
        self.page: EventsPage | None = None
        self.selected_id: int | None = None
        self.border_title = "Events"

    def compose(self) -> ComposeResult:
        table = EventsTable(cursor_type="row", zebra_stripes=False, id="events-table")
        for label, width in COLUMNS:
            table.add_column(label, width=width, key=label)
        yield table
        yield Static(id="events-empty")

    @property
    def table(self) -> EventsTable:
        return self.query_one(EventsTable)

    def selected_event(self) -> Event | None:
        if self.page is None or not self.page.events:
            return None
        row = min(self.table.cursor_row, len(self.page.events) - 1)
        return self.page.events[max(0, row)]

    async def reload(self) -> None:
        rows = self.table.visible_rows()
        page = await self.reader(read_page(self.filter, top_id=self.top_id, limit=rows))
        if self.top_id is not None and page.at_top:
            self.top_id = None  # scrolled back to the newest page: follow new events again
        self.show(page)

    def show(self, page: EventsPage) -> None:
        self.page = page
        table = self.table
        now = self.clock.now()
        variables = self.app.theme_variables
        keep = self.selected_id
        if self.top_id is None and table.row_count and table.cursor_row == 0:
            keep = None  # live, with the cursor on the newest row: it stays on the newest row, like tail -f
        table.clear()
        for event in page.events:
            table.add_row(*self._cells(event, now, variables), key=str(event.id))
        total = sum(page.counts.values())
        counts = " ".join(f"{s} {page.counts.get(s, 0):,}" for s in ("pending", "running", "done", "dead"))
        self.border_title = Content(f"Events · {terminal_safe(self.filter.describe())}")  # plain: no markup
        self.border_subtitle = f"{'live' if self.top_id is None else 'paused'} · {total:,} · {counts}"
        hint = self.query_one("#events-empty", Static)
        hint.display = not page.events
        if not page.events:
            key_for = getattr(self.app, "key_for", DEFAULT_KEYS.get)
            hint.update(Content(terminal_safe(empty_hint(self.filter, total, key_for))))
        if page.events:
            index = next((i for i, e in enumerate(page.events) if e.id == keep), None)
            if index is None:
                index = 0
            table.move_cursor(row=index, animate=False, scroll=False)
            self.selected_id = page.events[index].id

    def refresh_ages(self, now: int) -> None:
        """The age column at `now`, cell by cell: the clock moving re-reads nothing and keeps the cursor and
        the sideways scroll where they are. Redrawing the table is what an idle console spends its time on, so
        ages past a minute (whole minutes, see table_age) are brought up to date every ten seconds together."""
        if self.page is None:
            return
        table = self.table
        for event in self.page.events:
            if now - event.created_at >= 60 and now % 10:
                continue
            age = table_age(now - event.created_at)
            key = str(event.id)
            with contextlib.suppress(CellDoesNotExist):  # a row the table no longer holds
                if str(table.get_cell(key, "age")) != age:
                    table.update_cell(key, "age", Text(age, justify="right"))

    @staticmethod
    def _cells(event: Event, now: int, variables: dict[str, str]) -> list[Text]:
        # The att column already says how many attempts failed: the table shows the last error itself.
        error = terminal_safe(" ".join((event.error or "").split()))
        source_id = terminal_safe(event.source_id)  # escaped first, so the cut counts what is shown
        source_id = source_id if len(source_id) <= 16 else source_id[:15] + "…"
        return [
            Text(str(event.id), justify="right"),
            Text(terminal_safe(event.source)),
            Text(source_id),
            Text(event.status, style=status_colour(variables, event.status)),
            Text(str(event.attempts), justify="right"),
            Text("" if event.claim_gen is None else str(event.claim_gen), justify="right"),
            Text(table_age(now - event.created_at), justify="right"),
            Text(error, style=status_colour(variables, "dead") if error else ""),
        ]

    @on(EventsTable.RowHighlighted)
    def _remember_selection(self, message: EventsTable.RowHighlighted) -> None:
        if message.row_key.value is not None:
            self.selected_id = int(message.row_key.value)

    @on(EventsTable.Shift)
    async def _shift(self, message: EventsTable.Shift) -> None:
        message.stop()
        events = self.page.events if self.page else []
        rows = self.table.visible_rows()
        if message.kind == "newest":
            self.top_id = None
            self.selected_id = None
        elif message.kind == "oldest":
            top = await self.reader(read_oldest_top(self.filter, rows))
            if top is None:
                return
            self.top_id = top
            self.selected_id = None
        elif not events:
            return
        elif message.kind == "down":
            if len(events) < 2:
                return
            older = await self.reader(read_older_top(self.filter, events[-1].id, 1))
            if older is None:
                return
            self.top_id = events[1].id
            self.selected_id = older
        elif message.kind == "up":
            above = await self.reader(read_newer_top(self.filter, events[0].id, 1))
            if above is None:
                return
            self.top_id = above
            self.selected_id = above
        elif message.kind == "page_down":
            older = await self.reader(read_older_top(self.filter, events[-1].id, rows))
            if older is None:
                self.table.move_cursor(row=len(events) - 1)
                return
            self.top_id = older
            self.selected_id = None
        elif message.kind == "page_up":
            self.top_id = await self.reader(read_newer_top(self.filter, events[0].id, rows))
            self.selected_id = None
        await self.reload()

    async def set_filter(self, flt: EventFilter) -> None:
        self.filter = flt
        self.top_id = None
        self.selected_id = None
        await self.reload()

    @on(Resize)
    async def _resized(self) -> None:
        if self.is_mounted:
            await self.reload()
