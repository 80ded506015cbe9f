"""The console's one reach into Textual's private names, checked against Textual 8.2 (8.2.8): each has no public way
in that version. Everything else in the console uses Textual's public API (tests/test_style.py holds it to that, and
holds this module's name to the Textual installed: a Textual upgrade fails that test until these are checked again
and the module renamed for the new version)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import _normalize_key_list
from textual.notifications import Notification
from textual.widgets import DataTable
from textual.widgets._footer import FooterKey
from textual.widgets.data_table import ColumnKey, RowKey

__all__ = ["FooterKey", "bindings_by_key", "has_registered_themes", "keymap", "normalized_keys", "update_cell_alone",
           "withdraw_toast"]
CHECKED_AGAINST = (8, 2)


def keymap(app: App[Any]) -> Mapping[str, str]:
    """The binding ids remapped by App.set_keymap, and their keys (Textual keeps them only privately)."""
    return app._keymap


def bindings_by_key(node: DOMNode) -> dict[str, list[Binding]]:
    """A node's own bindings by key, which may be changed in place (a label that changed: MainScreen.relabel)."""
    return node._bindings.key_to_bindings


def has_registered_themes(app: App[Any]) -> bool:
    """Whether any theme was registered yet (current_theme raises before)."""
    return bool(app._registered_themes)


def withdraw_toast(app: App[Any], notification: Notification) -> None:
    """Take a toast away before its time; one gone already is left alone."""
    if notification in app._notifications:
        app._unnotify(notification)


def normalized_keys(keys: str) -> str:
    """A binding's comma-separated keys as Textual reads them (its own aliases, such as `ctrl+i` for `tab`)."""
    return _normalize_key_list(keys)


def update_cell_alone(table: DataTable[Any], row_key: RowKey, column_key: ColumnKey, value: Any) -> None:
    """A cell's new value with only its row drawn again. DataTable.update_cell bumps the table's update count, which
    is in the key of every cached row, cell and line, and refreshes the whole widget: one age moving redrew every
    row (issue 38). Here only the changed row's cached renders go, and only its region is refreshed. For a column
    of fixed width (a cell wider than it is cut, as always): its width is not measured again."""
    table._data[row_key][column_key] = value
    rows, cells = table._row_render_cache, table._cell_render_cache
    # Textual's LRUCache has keys() but no iteration of its own
    for row in [key for key in rows.keys() if key[0] == row_key]:  # noqa: SIM118
        rows.discard(row)
    for cell in [key for key in cells.keys() if key[0] == row_key]:  # noqa: SIM118
        cells.discard(cell)
    index = table.get_row_index(row_key)
    renderables = table._row_renderable_cache  # keyed by (update count, row index)
    for row_renderables in [key for key in renderables.keys() if key[1] == index]:  # noqa: SIM118
        renderables.discard(row_renderables)
    table._line_cache.clear()  # keyed by screen line: cheap to rebuild from the rows' caches
    table.refresh_row(index)
