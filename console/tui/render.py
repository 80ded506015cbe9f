"""Small drawing helpers shared by the panes."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


def show(static: Static, content: Content | str) -> None:
    """Update a Static only when what it shows changes: an update lays out the whole screen again (the panes'
    lines have auto heights), which is most of what a once-a-second redraw would cost."""
    if static.content != content:
        static.update(content)
