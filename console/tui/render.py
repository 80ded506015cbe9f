"""Small drawing helpers shared by the panes."""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content
from textual.widgets import Static


def _shape(content: object) -> list[int]:
    """The cell width of each line: text of the same shape wraps the same, so it needs no new layout."""
    plain = content.plain if isinstance(content, Content) else str(content)
    return [cell_len(line) for line in plain.split("\n")]


def show(static: Static, content: Content | str) -> None:
    """Update a Static only when what it shows changes, and lay the screen out again only when its shape
    changes: a layout repaints the whole row of panes, which is most of what a once-a-second redraw (a
    countdown, an age) would otherwise cost."""
    before = static.content
    if before == content:
        return
    static.update(content, layout=_shape(before) != _shape(content))
