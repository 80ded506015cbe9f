"""Tables whose rows are redrawn from a fresh read."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable


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
