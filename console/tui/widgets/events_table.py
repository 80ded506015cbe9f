"""A DataTable that holds one window of events and asks its pane for the next window at the edges."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from console.tui.textual_8_2 import update_cell_alone


class EventsTable(DataTable[object], inherit_bindings=False):
    """Only the visible rows are loaded; moving past the first or last row shifts the window.

    Its own key list (not DataTable's) so the help panel lists what these keys do here, and nothing else.
    """

    BINDING_GROUP_TITLE = "Events table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Detail", id="events.detail",
                tooltip="payload, attempts, journal steps, why it has not run"),
        Binding("up,k", "cursor_up", "Up", show=False, id="events.up"),
        Binding("down,j", "cursor_down", "Down", show=False, id="events.down"),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,g", "newest", "Newest", show=False, id="events.newest", tooltip="and follow new events live"),
        Binding("end,G", "oldest", "Oldest", show=False, id="events.oldest"),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False, tooltip="to read a long error"),
        Binding("space", "toggle_mark", "Mark", show=False, id="events.mark",
                tooltip="mark or unmark the event, for r (retry) and D (discard)"),
        Binding("shift+down", "mark_range('down')", "Mark down", show=False, id="events.mark_down",
                tooltip="mark this event and the one below, moving down (a range)"),
        Binding("shift+up", "mark_range('up')", "Mark up", show=False, id="events.mark_up",
                tooltip="mark this event and the one above, moving up (a range)"),
        Binding("escape", "clear_marks", "Unmark all", show=False, id="events.unmark"),
    ]

    class ToggleMark(Message):
        """Mark the highlighted event, or unmark it, and move down."""

    class MarkRange(Message):
        """Mark the highlighted event and the next one in `direction` (up or down), moving there."""

        def __init__(self, direction: str) -> None:
            super().__init__()
            self.direction = direction

    class ClearMarks(Message):
        """Unmark every event."""

    class Shift(Message):
        """Ask for another window: kind is up, down, page_up, page_down, newest or oldest."""

        def __init__(self, kind: str) -> None:
            super().__init__()
            self.kind = kind

    class Resized(Message):
        """The table's own height changed (the error line under it came or went): the page may no longer fit."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())

    def watch_virtual_size(self, before: Size, after: Size) -> None:
        # A column grew (the last error's column is as wide as its longest error, measured once the rows are in):
        # DataTable keeps each row drawn at the widths it had when it was added, until something else redraws
        # it (a layout of the whole screen once did, every second). Drawn again at the new widths: DataTable's
        # public notify_style_update() drops the rows and cells it drew (as a change of its look does) and
        # refreshes it, where the private _clear_caches() did the same and may change with any Textual release.
        if before.width != after.width:
            self.notify_style_update()

    def set_cell(self, row: str, column: str, value: object, *, measure: bool = False) -> None:
        """A cell's new value, drawing only its row again (DataTable.update_cell redraws every row: an idle
        console's ages moving each second cost a whole table a second, issue 38). measure: a column as wide as
        its widest cell, measured again through update_cell."""
        if measure:
            self.update_cell(row, column, value, update_width=True)
        else:
            update_cell_alone(self, RowKey(row), ColumnKey(column), value)

    def visible_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - (self.header_height if self.show_header else 0))

    def action_cursor_down(self) -> None:
        if self.row_count and self.cursor_row >= self.row_count - 1:
            self.post_message(self.Shift("down"))
        else:
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if self.cursor_row <= 0:
            self.post_message(self.Shift("up"))
        else:
            super().action_cursor_up()

    def action_page_down(self) -> None:
        self.post_message(self.Shift("page_down"))

    def action_page_up(self) -> None:
        self.post_message(self.Shift("page_up"))

    def action_newest(self) -> None:
        self.post_message(self.Shift("newest"))

    def action_oldest(self) -> None:
        self.post_message(self.Shift("oldest"))

    def action_toggle_mark(self) -> None:
        self.post_message(self.ToggleMark())

    def action_mark_range(self, direction: str) -> None:
        self.post_message(self.MarkRange(direction))

    def action_clear_marks(self) -> None:
        self.post_message(self.ClearMarks())
