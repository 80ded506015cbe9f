"""The events pane: a live, filtered window onto the inbox, read one visible page at a time.

The pane reads and renders itself: reload() reads a page into `view`, a frozen snapshot, and watch_view draws
it. A redraw keeps the table's sideways scroll and the cursor's event: the clock ticks once a second, and a
user reading a long error to the right must not be thrown back to the left each time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from zoneinfo import ZoneInfo

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.coordinate import Coordinate
from textual.events import Resize
from textual.reactive import reactive
from textual.widgets import Static
from textual.widgets.data_table import CellDoesNotExist, ColumnKey

from console.core import STATUSES, Event
from console.core.inbox import REVIVABLE
from console.textsafe import terminal_safe
from console.timefmt import coarse_span
from console.tui.panes import PaneHost
from console.tui.read_order import ReadOrder
from console.tui.reads import (
    EventFilter,
    EventsPage,
    Key,
    read_newer_top,
    read_older_top,
    read_oldest_top,
    read_page,
)
from console.tui.tables import clear_rows
from console.tui.undo import Undoable
from console.tui.widgets.event_error import EventError, moves_with_clock
from console.tui.widgets.events_table import EventsTable

COLUMNS = (("id", 7), ("source", 9), ("what", 18), ("status", 9), ("att", 3), ("gen", 3), ("age", 6),
           ("retry", 7), ("last error", None), ("source id", 16))
# The "what" column (an event's summary, cut to it) takes the room the table has, leaving some to the last error,
# within these bounds. The source id comes last, past the error (the summary says more at a glance, and the
# detail and the search show the id).
WHAT_MIN, WHAT_MAX, ERROR_ROOM = 18, 48, 20
MARK = "●"
SORTABLE = {"id": "id", "age": "id", "status": "status", "source": "source"}  # column → order (an index each)
# The orders S steps through: (column, descending). Each reads through an index (console.core.inbox).
SORT_CYCLE = [("id", True), ("id", False), ("status", True), ("status", False), ("source", True),
              ("source", False)]


def table_age(seconds: int) -> str:
    """An event's age: to the second in its first minute, then whole minutes (the seconds of an older event
    are noise, and counting them redrew the whole table every second)."""
    return coarse_span(seconds, seconds_below=60)


def looks(cell: object) -> object:
    """What a cell shows: its text, styles and alignment (rich's Text compares its text and spans only)."""
    if isinstance(cell, Text):
        return cell.plain, str(cell.style), cell.justify, cell.spans
    return cell


def cut(text: str, width: int) -> str:
    """text in at most `width` cells, an ellipsis where it was cut (wide characters count two)."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…"


def status_colour(variables: dict[str, str], status: str) -> str:
    # discarded has no colour of its own in the themes: it reads as muted, done with
    return variables.get(f"status-{status}", "" if status != "discarded" else "dim")


# binding id -> the key that runs it as the footer shows it (after `[keys]` remaps), None if not available here
KeyFor = Callable[[str], str | None]
DEFAULT_KEYS = {"console.inject": "i", "console.quick_chat": "c", "console.quick_approval": "a",
                "console.filter_status": "f", "console.filter_source": "s", "console.filter_pick": "F"}


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
    pick = key_for("console.filter_pick")
    keys += [f"{pick} to pick either from a list"] * bool(pick)
    return f"No {what}{where} (of {total:,})." + (f" Press {', '.join(keys)}." if keys else "")


def retry_in(event: Event, now: int) -> str:
    """When a failed event is tried again: 'in 12s', 'due' once its backoff is over, '' for the rest."""
    if event.status != "pending" or event.attempts == 0:
        return ""
    wait = event.next_attempt_at - now
    return f"in {coarse_span(wait)}" if wait > 0 else "due"


@dataclass(frozen=True)
class EventsView:
    """What the pane shows: one page, the filter it was read with, the moment ages count from, the marks."""

    page: EventsPage
    filter: EventFilter
    live: bool
    now: int
    marked: frozenset[int] = field(default_factory=frozenset)


class EventsPane(Vertical):
    """top None means live: the first page (the newest events), following new events as they arrive."""

    ALLOW_MAXIMIZE = True  # z zooms it (MainScreen.action_zoom)

    DEFAULT_CSS = """
    EventsPane #events-table {
        height: 1fr;
        scrollbar-size: 0 0;
    }
    /* drawn over the empty table, so showing it never changes how many rows a page reads */
    EventsPane #events-empty {
        position: absolute;
        offset: 2 2;
        width: 100%;
        height: auto;
        padding: 0 2 0 0;
        color: $text-muted;
        display: none;
    }
    """

    HELP = """
## Events
The inbox, newest first: **enter** shows why an event has (not) run, **/** finds events and outbox
messages, **space** marks events for **r** (retry) and **D** (discard; **u** undoes it: all of them dead
again, not run). The selected event's full error
is under the table. The keys below work here; **ctrl+p** finds every action by name.
"""

    # The watcher draws what changed (cells, titles, the error line): a repaint of the whole pane would redraw
    # every row of the table on each read
    view: reactive[EventsView | None] = reactive(None, init=False, repaint=False)

    def __init__(self, host: PaneHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.zone = ZoneInfo(host.settings.timezone)
        self.filter = EventFilter()
        self.top: Key | None = None  # the first row's place in the filter's order
        # Counts the window's moves: a read begun before a move (the app's own re-read of the pane) must not show
        # the old window after it, nor follow new events again when the move has just left the first page.
        self.window_moves = 0
        self._reads = ReadOrder()
        self.selected_id: int | None = None
        self.marked: set[int] = set()
        self.border_title = "Events"
        self._titles: tuple[str, str] | None = None  # the border's title and subtitle as last set
        self.what_width = WHAT_MIN  # the "what" column's width as the table's width allows

    def compose(self) -> ComposeResult:
        table = EventsTable(cursor_type="row", zebra_stripes=False, id="events-table")
        for label, width in COLUMNS:
            table.add_column(label, width=width, key=label)
        yield table
        yield Static(id="events-empty")
        yield EventError(id="events-error")

    def on_mount(self) -> None:
        # A view equal to the last one is not drawn again; a new theme must still recolour the rows.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.watch_view(self.view))
        # The remembered event follows the cursor the moment it moves: the table's highlight message is queued,
        # and a re-read handled before it would put the cursor back on the event remembered before the key.
        self.watch(self.table, "cursor_coordinate", self._cursor_moved, init=False)

    def _cursor_moved(self) -> None:
        table = self.table
        if table.row_count:
            with contextlib.suppress(CellDoesNotExist):
                row_key, _ = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0))
                self.selected_id = int(str(row_key.value))

    @property
    def table(self) -> EventsTable:
        return self.query_one(EventsTable)

    @property
    def page(self) -> EventsPage | None:
        return None if self.view is None else self.view.page

    def selected_event(self) -> Event | None:
        if self.page is None or not self.page.events:
            return None
        row = min(self.table.cursor_row, len(self.page.events) - 1)
        return self.page.events[max(0, row)]

    def marked_ids(self) -> list[int]:
        """The marked events, newest first."""
        return sorted(self.marked, reverse=True)

    def fit_what(self) -> int:
        """The "what" column's width for the table's width now: what the other columns (but the last error's)
        leave, less some room for the error."""
        table = self.table
        others = sum(width or 0 for label, width in COLUMNS if label not in ("what", "source id", "last error"))
        padding = 2 * table.cell_padding * (len(COLUMNS) - 2)
        room = table.size.width - others - padding - ERROR_ROOM
        self.what_width = max(WHAT_MIN, min(WHAT_MAX, room))
        return self.what_width

    async def reload(self) -> None:
        self.fit_what()
        rows = self.table.visible_rows()
        moves, ticket = self.window_moves, self._reads.begin()
        page = await self.host.read(read_page(self.filter, top=self.top, limit=rows))
        if moves != self.window_moves:
            return  # the window moved while this read ran: the move's own read shows it
        if not self._reads.may_show(ticket):
            return  # a read begun after this one has shown newer facts
        if self.top is not None and page.at_top:
            self.top = None  # scrolled back to the first page: follow new events again
        self.show(page)

    def show(self, page: EventsPage) -> None:
        self.view = EventsView(page, self.filter, self.top is None, self.host.clock.now(), frozenset(self.marked))

    def watch_view(self, view: EventsView | None) -> None:
        if view is None:
            return
        table = self.table
        page = view.page
        keep = self.selected_id
        if view.live and table.row_count and table.cursor_row == 0:
            keep = None  # live, with the cursor on the newest row: it stays on the newest row, like tail -f
        self._fill(table, view)
        total = sum(page.counts.values())
        counts = " ".join(f"{s} {page.counts.get(s, 0):,}" for s in STATUSES if s != "discarded"
                          or page.counts.get(s, 0))
        marked = f" · {len(view.marked)} marked" if view.marked else ""
        # Textual repaints the whole pane whenever a border title is set, to the same words too.
        titles = (f"Events · {terminal_safe(view.filter.describe())}{marked}",
                  f"{'live' if view.live else 'paused'} · {total:,} · {counts}")
        if titles != self._titles:
            self._titles = titles
            self.border_title = Content(titles[0])  # plain: no markup
            self.border_subtitle = titles[1]
        hint = self.query_one("#events-empty", Static)
        hint.display = not page.events
        if not page.events:
            key_for = getattr(self.app, "key_for", DEFAULT_KEYS.get)
            hint.update(Content(terminal_safe(empty_hint(view.filter, total, key_for))))
        if page.events:
            index = next((i for i, e in enumerate(page.events) if e.id == keep), 0)
            if table.cursor_row != index:
                table.move_cursor(row=index, animate=False, scroll=False)
            self.selected_id = page.events[index].id
        self._show_error()

    def _fill(self, table: EventsTable, view: EventsView) -> None:
        """The page's rows, in place when they are the same events (the common tick), so the table keeps its
        sideways scroll; rebuilt when the window moved, with the scroll put back."""
        variables = self.app.theme_variables
        what = table.columns[ColumnKey("what")]
        rows = [(str(event.id), self._cells(event, view.now, variables, event.id in view.marked, self.what_width))
                for event in view.page.events]
        keys = [key for key, _ in rows]
        if keys == [str(row_key.value) for row_key in table.rows] and what.width == self.what_width:
            for key, cells in rows:
                for (label, width), cell in zip(COLUMNS, cells, strict=True):
                    # A re-read finds the same events much more often than changed ones (any commit to the file,
                    # the lease's renewal among them, reads every pane again): a cell is written, and the table
                    # redrawn, only when what it shows changed.
                    if looks(table.get_cell(key, label)) != looks(cell):
                        # the error column is as wide as its longest error: it is measured again
                        table.set_cell(key, label, cell, measure=width is None)
            return
        scroll_x = table.scroll_x
        what.width = self.what_width
        clear_rows(table)
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if scroll_x:
            table.call_after_refresh(table.scroll_to, x=scroll_x, animate=False)

    def tick(self, now: int) -> None:
        """The age column at `now`, cell by cell: the clock moving re-reads nothing and keeps the cursor and
        the sideways scroll where they are. Redrawing the table is what an idle console spends its time on (a
        changed cell redraws every row of a Textual DataTable), so ages past a minute (whole minutes, see
        table_age) are brought up to date once a minute, together, at the whole minute: with ages out of phase
        some row's minute turned in nearly every ten seconds, and each redrew the table (a re-read between whole
        minutes shows them as they are then)."""
        if self.page is None:
            return
        selected = self.selected_event()
        if selected is not None and moves_with_clock(selected):
            self._show_error(now)  # its countdown ("next try in 42s") and "died 3m ago" move with the row's
        table = self.table
        for event in self.page.events:
            # A quiet second touches no cell: only a waiting retry's countdown (few rows have one) moves every
            # second, an age in its first minute too, and older ages at the whole minute.
            retry = retry_in(event, now)  # "" for every row but a failed one waiting to be tried again
            if not retry and now - event.created_at >= 60 and now % 60:
                continue
            key = str(event.id)
            with contextlib.suppress(CellDoesNotExist):  # a row the table no longer holds
                if retry and str(table.get_cell(key, "retry")) != retry:
                    table.set_cell(key, "retry", Text(retry, justify="right"))
                if now - event.created_at >= 60 and now % 60:
                    continue
                age = table_age(now - event.created_at)
                if str(table.get_cell(key, "age")) != age:
                    table.set_cell(key, "age", Text(age, justify="right"))

    @staticmethod
    def _cells(event: Event, now: int, variables: dict[str, str], marked: bool, what_width: int) -> list[Text]:
        # The att column already says how many attempts failed: the table shows the last error itself, or for a
        # poison event's batch-mate why it is pending again (the poison event's error is not its own).
        batch_failure = event.batch_failure_in_words()
        error = batch_failure or terminal_safe(" ".join((event.error or "").split()))
        source_id = terminal_safe(event.source_id)  # escaped first, so the cut counts what is shown
        source_id = source_id if len(source_id) <= 16 else source_id[:15] + "…"
        return [
            Text(f"{MARK} {event.id}" if marked else str(event.id), justify="right",
                 style="bold reverse" if marked else ""),
            Text(terminal_safe(event.source)),
            Text(cut(terminal_safe(event.what()), what_width)),
            Text(event.status, style=status_colour(variables, event.status)),
            Text(str(event.attempts), justify="right"),
            Text("" if event.claim_gen is None else str(event.claim_gen), justify="right"),
            Text(table_age(now - event.created_at), justify="right"),
            Text(retry_in(event, now), justify="right"),
            Text(error, style="" if not error or event.status == "discarded" or batch_failure
                 else status_colour(variables, "dead")),
            Text(source_id),
        ]

    def _show_error(self, now: int | None = None) -> None:
        if now is None:
            now = self.view.now if self.view is not None else self.host.clock.now()
        event = self.selected_event()
        stranded = None if event is None or self.page is None else self.page.stranded.get(event.id)
        self.query_one(EventError).show(event, now, self.zone, stranded)

    @on(EventsTable.RowHighlighted)
    def _remember_selection(self) -> None:
        # The cursor's row now, not the message's: a highlight queued before a mark moved the cursor on must
        # not pull the remembered event back (the next redraw would put the cursor there).
        event = self.selected_event()
        if event is not None:
            self.selected_id = event.id
            self._show_error()

    @on(EventsTable.HeaderSelected)
    async def _header_clicked(self, message: EventsTable.HeaderSelected) -> None:
        message.stop()
        order = SORTABLE.get(str(message.column_key.value))
        if order is None:
            self.notify("The inbox sorts by id or age, status or source (S steps through them)", timeout=4)
            return
        await self.sort(order)

    @on(EventsTable.ToggleMark)
    async def _toggle_mark(self, message: EventsTable.ToggleMark) -> None:
        """Mark (or unmark) and move down at once, in the pane's own message order: spaces typed quickly are
        each handled after the last one's move (a page edge's read included), so each marks the next row."""
        message.stop()
        event = self.selected_event()
        if event is None:
            return
        self.marked.symmetric_difference_update({event.id})
        self._remark()
        await self._step("down")  # marking runs down a list, as in a file manager

    @on(EventsTable.MarkRange)
    async def _mark_range(self, message: EventsTable.MarkRange) -> None:
        """shift+↓ / shift+↑: this event and the next one that way are marked (added to the marks, never
        unmarked), and the cursor moves there, so holding shift marks a range."""
        message.stop()
        event = self.selected_event()
        if event is None:
            return
        self.marked.add(event.id)
        await self._step(message.direction)
        moved = self.selected_event()
        if moved is not None:
            self.marked.add(moved.id)
        self._remark()

    async def _step(self, direction: str) -> None:
        """One row down or up now, reading the next window when the cursor is at the page's edge."""
        table = self.table
        events = self.page.events if self.page else []
        row = table.cursor_row + (1 if direction == "down" else -1)
        if 0 <= row < len(events):
            table.move_cursor(row=row, animate=False)
            self.selected_id = events[row].id
            self._show_error()
        else:
            await self.move(direction)

    @on(EventsTable.ClearMarks)
    def _clear_marks(self, message: EventsTable.ClearMarks) -> None:
        message.stop()
        self.clear_marks()

    def clear_marks(self) -> None:
        if self.marked:
            self.marked.clear()
            self._remark()

    def _remark(self) -> None:
        if self.view is not None:
            self.view = EventsView(self.view.page, self.view.filter, self.view.live, self.view.now,
                                   frozenset(self.marked))

    @on(EventsTable.Shift)
    async def _shift(self, message: EventsTable.Shift) -> None:
        message.stop()
        await self.move(message.kind)

    async def move(self, kind: str) -> None:
        """Another window: kind is up, down (one row past the edge), page_up, page_down, newest or oldest."""
        events = self.page.events if self.page else []
        rows = self.table.visible_rows()
        key = self.filter.key
        if kind == "newest":
            self.top = None
            self.selected_id = None
        elif kind == "oldest":
            top = await self.host.read(read_oldest_top(self.filter, rows))
            if top is None:
                return
            self.top = top
            self.selected_id = None  # the cursor goes to the last row, the oldest event itself (below)
        elif not events:
            return
        elif kind == "down":
            if len(events) < 2:
                return
            older = await self.host.read(read_older_top(self.filter, key(events[-1]), 1))
            if older is None:
                return
            self.top = key(events[1])
            self.selected_id = older[1]
        elif kind == "up":
            above = await self.host.read(read_newer_top(self.filter, key(events[0]), 1))
            if above is None:
                return
            self.top = above
            self.selected_id = above[1]
        elif kind == "page_down":
            older = await self.host.read(read_older_top(self.filter, key(events[-1]), rows))
            if older is None:
                self.table.move_cursor(row=len(events) - 1)
                return
            self.top = older
            self.selected_id = None
        elif kind == "page_up":
            self.top = await self.host.read(read_newer_top(self.filter, key(events[0]), rows))
            self.selected_id = None
        self.window_moves += 1  # a read begun before this shows nothing: the read below shows the new window
        await self.reload()
        if kind == "oldest" and self.page is not None and self.page.events:
            self.selected_id = self.page.events[-1].id
            self.table.move_cursor(row=len(self.page.events) - 1, animate=False, scroll=False)

    async def set_filter(self, flt: EventFilter) -> None:
        self.filter = flt
        self.window_moves += 1
        self.top = None
        self.selected_id = None
        await self.reload()

    # --- the pane's actions (the console's keys run them) ---------------------------------------
    async def cycle_status(self) -> None:
        order: list[str | None] = [None, *STATUSES]
        await self.set_status_filter(order[(order.index(self.filter.status) + 1) % len(order)])

    async def cycle_source(self) -> None:
        order: list[str | None] = [None, *self.host.known_sources]
        current = self.filter.source if self.filter.source in order else None
        await self.set_source_filter(order[(order.index(current) + 1) % len(order)])

    async def set_status_filter(self, status: str | None) -> None:
        await self.set_filter(replace(self.filter, status=status))

    async def set_source_filter(self, source: str | None) -> None:
        await self.set_filter(replace(self.filter, source=source))

    async def pick_filter(self) -> None:
        counts = await self.host.read(lambda store: store.counts())
        from console.tui.screens.filter_picker import FilterScreen  # the modal screens load when first opened

        self.app.push_screen(FilterScreen(self.filter, counts, self.host.known_sources), self._filter_picked)

    async def _filter_picked(self, picked: EventFilter | None) -> None:
        if picked is not None and picked != self.filter:
            await self.set_filter(picked)

    async def sort(self, order: str = "") -> None:
        """S: the next order in SORT_CYCLE; a column's header: sort by it, again to turn the order round."""
        flt = self.filter
        if not order:
            order, descending = SORT_CYCLE[(SORT_CYCLE.index((flt.order, flt.descending)) + 1) % len(SORT_CYCLE)]
        else:
            descending = not flt.descending if order == flt.order else True
        await self.set_filter(replace(flt, order=order, descending=descending))

    async def retry(self) -> None:
        """r: the marked events back to pending, or else the selected one."""
        marked = self.marked_ids()
        if marked:
            now = self.host.clock.now()
            retried = await self.host.engine.write(lambda store: store.retry_events(marked, now=now))
            self.clear_marks()
            self.host.mark("events", "header")
            left = len(marked) - len(retried)
            self.notify(f"{len(retried)} of {len(marked)} marked event{'s' if len(marked) != 1 else ''} back to "
                        f"pending" + (f"; {left} not dead or discarded (or cleared by retention), left as they are"
                                         if left else ""),
                        title="Retry", severity="warning" if left else "information")
            return
        event = self.selected_event()
        if event is None:
            self.notify("No event selected", severity="warning")
            return
        await self.retry_event(event)

    async def retry_event(self, event: Event) -> None:
        """Retry one dead or discarded event (this pane's r and the detail's r)."""
        if event.status not in REVIVABLE:
            self.notify(f"#{event.id} is {event.status}; only dead events (or discarded ones) are retried",
                        severity="warning")
            return
        if event.pruned_at is not None:
            self.notify(f"#{event.id} was discarded and retention has cleared it: it cannot be retried",
                        severity="warning")
            return
        now = self.host.clock.now()
        retried = await self.host.engine.write(lambda store: store.retry_events([event.id], now=now))
        self.host.mark("events", "header")
        if retried:
            self.notify(f"#{event.id} is pending again", title="Retry")
        else:
            self.notify(f"#{event.id} is no longer {event.status}", severity="warning")

    async def discard(self) -> None:
        """Discard the marked events, or the selected one, after a yes: Sidekiq's and Oban's discard."""
        marked = self.marked_ids()
        event = self.selected_event()
        ids = marked or ([event.id] if event is not None else [])
        if not ids:
            self.notify("No event selected", severity="warning")
            return
        if not marked and event is not None and event.status not in ("dead", "pending"):
            self.notify(f"#{event.id} is {event.status}; only dead or pending events are discarded",
                        severity="warning")
            return
        what = f"#{ids[0]}" if len(ids) == 1 else f"{len(ids)} marked events"
        from console.tui.screens.confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(f"Discard {what}? Kept for the record and never run again "
                                           "(u undoes the discard; r runs one again).", yes_label="Discard",
                                           destructive=True),
                             partial(self._discard_confirmed, ids))

    async def _discard_confirmed(self, ids: list[int], confirmed: bool | None) -> None:
        if not confirmed:
            return
        now = self.host.clock.now()
        discarded = await self.host.engine.write(lambda store: store.discard(ids, now=now))
        self.clear_marks()
        self.host.mark("events", "header")
        left = len(ids) - len(discarded)
        if discarded:
            what = f"#{discarded[0]}" if len(discarded) == 1 else f"{len(discarded)} events"
            self.host.undo.push(Undoable(f"discarded {what}", partial(self._put_back, list(discarded))))
        undo = "u undoes it (dead again)" if len(discarded) == 1 else "u undoes it (all dead again)"
        self.notify(f"{len(discarded)} event{'s' if len(discarded) != 1 else ''} discarded"
                    + (f"; {left} running or done, left as they are" if left else "") + f" · {undo}",
                    title="Discard", severity="warning" if left else "information")

    async def retry_all(self) -> None:
        """R: every dead event the filter shows back to pending, after a yes with the count."""
        flt = self.filter
        if flt.status not in (None, "dead"):
            self.notify(f"The filter shows {flt.status} events: no dead event matches it", severity="warning")
            return
        count = await self.host.read(lambda store: store.count_dead(source=flt.source))
        if not count:
            self.notify("No dead events match the filter", severity="warning")
            return
        where = "" if flt.source is None else f" from source {flt.source}"
        from console.tui.screens.confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(f"Retry {count} dead event{'s' if count != 1 else ''}{where}?",
                                           yes_label=f"Retry {count}", destructive=True),
                             self._retry_all_confirmed)

    async def _retry_all_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed:
            return
        source = self.filter.source
        now = self.host.clock.now()
        retried = await self.host.engine.write(lambda store: store.retry_dead_matching(source=source, now=now))
        self.host.mark("events", "header")
        self.notify(f"{retried} dead event{'s' if retried != 1 else ''} back to pending", title="Retry")

    @on(Resize)
    async def _resized(self) -> None:
        if self.is_mounted:
            await self.reload()

    @on(EventsTable.Resized)
    async def _table_resized(self) -> None:
        """The pane kept its size but the table inside it did not (the selected event's error line shows or
        hides): read a page that fills it, when the one shown does not fit or leaves rows empty."""
        page = self.page
        if self.is_mounted and page is not None and len(page.events) != self.table.visible_rows():
            await self.reload()

    async def _put_back(self, ids: list[int]) -> str:
        """The undo of a discard: every event it discarded dead again."""
        return (await self._restored(ids))[1]

    async def restore_event(self, event: Event) -> None:
        """An event detail's u."""
        await self.restore([event.id])

    async def restore(self, ids: list[int]) -> list[int]:
        """Restore these discarded events to dead (an event detail's u); says what moved."""
        restored, said = await self._restored(ids)
        self.host.toast(said, title="Restore", severity="warning" if len(restored) < len(ids) else "information")
        return restored

    async def _restored(self, ids: list[int]) -> tuple[list[int], str]:
        """Restore these discarded events to dead: the ones that moved, and the words that say so."""
        now = self.host.clock.now()
        restored = await self.host.engine.write(lambda store: store.restore_to_dead(ids, now=now))
        self.host.mark("events", "header")
        left = len(ids) - len(restored)
        if len(ids) == 1 and restored:
            said = f"#{ids[0]} is dead again, not run (r runs it)"
        elif len(ids) == 1:
            said = f"#{ids[0]} is no longer discarded (or retention cleared it): left as it is"
        else:
            said = (f"{len(restored)} of {len(ids)} discarded events dead again, not run"
                    + (f"; {left} not discarded (or cleared by retention), left as they are" if left else ""))
        return restored, said
