"""A table of search results that asks for the next page when the cursor goes past its last row."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import DataTable


class ResultsTable(DataTable[object]):
    """Rows are keyed by the id of what they show; `more` says whether another page can be asked for."""

    class More(Message):
        def __init__(self, table: ResultsTable) -> None:
            super().__init__()
            self.table = table

    more = False

    def action_cursor_down(self) -> None:
        if self.more and self.row_count and self.cursor_row >= self.row_count - 1:
            self.post_message(self.More(self))
        super().action_cursor_down()
