"""Tables whose rows are redrawn from a fresh read."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey


def clear_rows(table: DataTable[Any]) -> None:
    """Clear the rows and let the auto-width columns measure again from their labels.

    DataTable.clear() keeps an auto-width column as wide as the widest cell it ever held, so the table's
    shape would depend on what was drawn before (a search typed letter by letter, a long error since
    retried) rather than on the rows now shown.
    """
    table.clear()
    for column in table.columns.values():
        if column.auto_width:
            column.content_width = column.label.cell_len


def measure_now(table: DataTable[Any], column: str, cells: list[Text]) -> None:
    """An auto-width column as wide as the widest line of the cells just added to it, now: DataTable measures new
    rows when it is next idle, and a frame drawn before that draws them wrapped at the column's old width (its
    label's, after clear_rows) and keeps the lines it drew."""
    measured = table.columns[ColumnKey(column)]
    widest = max((cell_len(line) for cell in cells for line in cell.plain.split("\n")), default=0)
    if measured.auto_width:
        measured.content_width = max(measured.content_width, widest)
