"""A table of search results that asks for the next page when the cursor reaches its last row."""

from __future__ import annotations

from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable


class ResultsTable(DataTable[object]):
    """Rows are keyed by the id of what they show; `more` says whether another page can be asked for."""

    class More(Message):
        def __init__(self, table: ResultsTable) -> None:
            super().__init__()
            self.table = table

    more = False

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        super().watch_cursor_coordinate(old, new)
        # However the cursor got there (down, page down, a click), the last row asks for the next page.
        if self.more and self.row_count and new.row == self.row_count - 1 and old.row != new.row:
            self.post_message(self.More(self))
