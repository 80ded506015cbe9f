"""A DataTable that holds one window of events and asks its pane for the next window at the edges."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable


class EventsTable(DataTable[object]):
    """Only the visible rows are loaded; moving past the first or last row shifts the window."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "newest", "Newest", show=False, id="events.newest"),
        Binding("end", "oldest", "Oldest", show=False, id="events.oldest"),
    ]

    class Shift(Message):
        """Ask for another window: kind is up, down, page_up, page_down, newest or oldest."""

        def __init__(self, kind: str) -> None:
            super().__init__()
            self.kind = kind

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

    def action_scroll_top(self) -> None:
        self.post_message(self.Shift("newest"))

    def action_scroll_bottom(self) -> None:
        self.post_message(self.Shift("oldest"))

    def action_newest(self) -> None:
        self.post_message(self.Shift("newest"))

    def action_oldest(self) -> None:
        self.post_message(self.Shift("oldest"))
