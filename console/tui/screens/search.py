"""`/`: find events (source, source id, payload text, error) and outbox messages, and open them.

Every word typed must be found in the row (case-insensitive); a number also finds that id. The events pane's
filter applies. Results come a page at a time, newest first; going down past the last row reads the next. The rows
shown follow the inbox while the screen is open: an event run, retried or discarded elsewhere reads as it is now.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer, Input, Label, Static

from console.core import Event, EventSearch, OutboxSearch, Store
from console.textsafe import terminal_safe
from console.tui.finding import RESULTS_PAGE, id_asked, read_event, read_event_matches, read_message_matches
from console.tui.reads import EventFilter
from console.tui.rereads import FoldedReads
from console.tui.tables import clear_rows, measure_now
from console.tui.widgets.events_pane import table_age
from console.tui.widgets.results_table import ResultsTable

Reader = Callable[[Callable[[Store], Any]], Awaitable[Any]]
Open = Callable[[int], Awaitable[None]]
TYPING_PAUSE = 0.3  # seconds of no typing before a search runs (enter runs it at once)
WINDOWS_PER_PAGE = 5  # bounded reads one page of results may take: 5 x 20,000 ids


def one_line(text: str, width: int = 200) -> str:
    flat = terminal_safe(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class SearchScreen(ModalScreen[None]):
    """Modal, so the main screen's keys (r, y, n...) do not act on rows hidden behind it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="search.close"),
        Binding("ctrl+e", "focus_part('search-events')", "Events", id="search.events"),
        Binding("ctrl+o", "focus_part('search-outbox')", "Outbox", id="search.outbox"),
        Binding("ctrl+f", "focus_part('search-input')", "Search", id="search.input"),
    ]

    DEFAULT_CSS = """
    SearchScreen { background: $background; }
    SearchScreen #search { width: 100%; height: 100%; }
    SearchScreen #search-input { margin: 0 1; }
    SearchScreen #search-scope { color: $text-muted; padding: 0 2; height: 1; }
    SearchScreen .search-title { text-style: bold; color: $text-primary; padding: 0 1; margin-top: 1; }
    SearchScreen #search-events { height: 2fr; }
    SearchScreen #search-outbox { height: 1fr; }
    SearchScreen ResultsTable { scrollbar-size-vertical: 1; }
    """

    def __init__(self, reader: Reader, flt: EventFilter, open_event: Open, open_message: Open, *, now: int,
                 text: str = "", start_in_outbox: bool = False) -> None:
        super().__init__()
        self.reader = reader
        self.filter = flt
        self.open_event = open_event
        self.open_message = open_message
        self.now = now
        self.text = text
        self.start_in_outbox = start_in_outbox
        self.events_next: int | None = None
        self.messages_next: int | None = None
        self._searched: str | None = None  # the text the results shown were read for
        self._typing: Timer | None = None
        self._titles = {"search-events": "Events", "search-outbox": "Outbox messages"}
        self._reads = FoldedReads(self, self._read_shown, "search-rows")

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="search"):
            yield Input(self.text, placeholder="words in a source, source id, payload or error; #id",
                        id="search-input", select_on_focus=False)
            scope = self.filter.describe()
            yield Static(Content(f"events in {terminal_safe(scope)} · every word must match · enter: open"),
                         id="search-scope")
            yield Label("Events", id="search-events-title", classes="search-title")
            events = ResultsTable(cursor_type="row", id="search-events")
            for label, width in (("id", 7), ("status", 9), ("source", 9), ("source id", 16), ("age", 6),
                                 ("what · error", None)):
                events.add_column(label, width=width, key=label)
            yield events
            yield Label("Outbox messages", id="search-outbox-title", classes="search-title")
            outbox = ResultsTable(cursor_type="row", id="search-outbox")
            for label, width in (("id", 6), ("status", 7), ("age", 6), ("message", None)):
                outbox.add_column(label, width=width, key=label)
            yield outbox

    def on_mount(self) -> None:
        if self.start_in_outbox:
            self.query_one("#search-outbox", ResultsTable).focus()
        else:
            self.query_one("#search-input", Input).focus()
        self.search()

    @property
    def events_table(self) -> ResultsTable:
        return self.query_one("#search-events", ResultsTable)

    @property
    def outbox_table(self) -> ResultsTable:
        return self.query_one("#search-outbox", ResultsTable)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_focus_part(self, part: str) -> None:
        # At once, not after a refresh as widget.focus() does: a key typed right after (ctrl+o, enter) must
        # reach the part it moved to.
        self.set_focus(self.query_one(f"#{part}"))

    @on(Input.Changed, "#search-input")
    def _typed(self, message: Input.Changed) -> None:
        self.text = message.value
        if self._typing is not None:
            self._typing.stop()
        self._typing = self.set_timer(TYPING_PAUSE, self.search)

    @on(Input.Submitted, "#search-input")
    def _submitted(self, message: Input.Submitted) -> None:
        if (message.value == self.text == self._searched and not self.events_table.row_count
                and self.events_next is not None):
            self.search_older()  # nothing found in what was read: enter reads on, older
            return
        self.text = message.value
        if self._typing is not None:
            self._typing.stop()
        self.search()
        self.set_focus(self.events_table)

    @work(exclusive=True, group="search")
    async def search_older(self) -> None:
        text = self.text
        found = await self._events_page(text, self.events_next)
        if text == self.text:
            self._add_events(found)

    @work(exclusive=True, group="search")
    async def search(self) -> None:
        """A new search: the first page of each kind."""
        text = self.text
        wanted = id_asked(text)
        direct = None if wanted is None else await self.reader(read_event(wanted))
        found = await self._events_page(text, None)
        messages = await self.reader(read_message_matches(text, None))
        if text != self.text:
            return  # typed on meanwhile: the newer search shows its own results
        self._searched = text
        clear_rows(self.events_table)
        clear_rows(self.outbox_table)
        self._add_events(EventSearch([direct, *found.events], found.next_before) if direct else found)
        self._add_messages(messages)

    async def _events_page(self, text: str, before: int | None) -> EventSearch:
        """Up to a page of matches, reading window after window, at most WINDOWS_PER_PAGE of them."""
        events: list[Event] = []
        for _ in range(WINDOWS_PER_PAGE):
            page: EventSearch = await self.reader(
                read_event_matches(text, self.filter, before, RESULTS_PAGE - len(events)))
            events += page.events
            before = page.next_before
            if before is None or len(events) >= RESULTS_PAGE:
                break
        return EventSearch(events, before)

    def inbox_changed(self) -> None:
        """The rows shown read again (panes.FollowsInbox): their status and what · error as they are now. The
        search is not run again: the rows stay where the owner is reading them."""
        if self.events_table.row_count or self.outbox_table.row_count:
            self._reads()

    async def _read_shown(self) -> None:
        event_ids = [int(key.value) for key in self.events_table.rows if key.value is not None]
        message_ids = [int(key.value) for key in self.outbox_table.rows if key.value is not None]
        events, messages = await self.reader(lambda store: (
            [store.event(event_id) for event_id in event_ids],
            [store.outbox_message(message_id) for message_id in message_ids]))
        table, details = self.events_table, []
        for event in events:
            if event is not None and str(event.id) in table.rows:  # a new search may have replaced the rows
                details.append(Text(one_line(event_detail(event))))
                table.update_cell(str(event.id), "status", event.status)
                table.update_cell(str(event.id), "what · error", details[-1])
        measure_now(table, "what · error", details)
        for message in messages:
            if message is not None and str(message.id) in self.outbox_table.rows:
                self.outbox_table.update_cell(str(message.id), "status", message.status)

    def _add_events(self, found: EventSearch) -> None:
        table = self.events_table
        details: list[Text] = []
        for event in found.events:
            if str(event.id) in table.rows:
                continue
            details.append(Text(one_line(event_detail(event))))
            table.add_row(Text(str(event.id), justify="right"), event.status, Text(terminal_safe(event.source)),
                          Text(one_line(event.source_id, 16)), Text(table_age(self.now - event.created_at),
                                                                   justify="right"),
                          details[-1], key=str(event.id))
        measure_now(table, "what · error", details)
        self.events_next = found.next_before
        table.more = found.next_before is not None
        shown = f"{table.row_count:,}"
        if not self.text.strip():
            title = "Events: type to search"
        elif found.next_before is None:
            title = f"Events: {shown} found (all searched)"
        elif not table.row_count:  # no rows: no "past the end" to go to
            title = f"Events: none found back to #{found.next_before:,} · enter in the box searches older"
        else:
            title = f"Events: {shown} found, searched back to #{found.next_before:,} (↓ past the end: more)"
        self._set_title("search-events", title)

    def _add_messages(self, found: OutboxSearch) -> None:
        table = self.outbox_table
        bodies: list[Text] = []
        for message in found.messages:
            if str(message.id) in table.rows:
                continue
            bodies.append(Text(one_line(message.body)))
            table.add_row(Text(str(message.id), justify="right"), message.status,
                          Text(table_age(self.now - message.created_at), justify="right"),
                          bodies[-1], key=str(message.id))
        measure_now(table, "message", bodies)
        self.messages_next = found.next_before
        table.more = found.next_before is not None
        what = "newest" if not self.text.strip() else "found"
        more = "" if found.next_before is None else " (↓ past the end: more)"
        self._set_title("search-outbox", f"Outbox messages: {table.row_count:,} {what}{more}")

    def _set_title(self, part: str, title: str) -> None:
        self._titles[part] = title
        self._show_titles()

    def _show_titles(self) -> None:
        """The list enter acts on is marked ▸ (the events found, or the messages)."""
        focused = self.focused.id if self.focused is not None else None
        for part, title in self._titles.items():
            self.query_one(f"#{part}-title", Label).update(f"{'▸ ' if part == focused else ''}{title}")

    def on_descendant_focus(self) -> None:
        self._show_titles()

    @on(ResultsTable.More)
    async def _more(self, message: ResultsTable.More) -> None:
        text = self.text
        if message.table is self.events_table and self.events_next is not None:
            self._add_events(await self._events_page(text, self.events_next))
        elif message.table is self.outbox_table and self.messages_next is not None:
            self._add_messages(await self.reader(read_message_matches(text, self.messages_next)))

    @on(ResultsTable.RowSelected)
    async def _open(self, message: ResultsTable.RowSelected) -> None:
        key = message.row_key.value
        if key is None:
            return
        if message.data_table is self.events_table:
            await self.open_event(int(key))
        else:
            await self.open_message(int(key))


def event_detail(event: Event) -> str:
    """What the event is (its summary), then why it failed; the payload itself when it says nothing readable."""
    return " · ".join(part for part in (event.what(), event.error or "") if part) or (
        "(pruned)" if event.pruned_at is not None else json_line(event.payload))


def json_line(payload: object) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True)
