"""Pick the events filter from a list (f and s cycle through the same choices)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList
from textual.widgets.option_list import Option

from console.core import STATUSES
from console.textsafe import terminal_safe
from console.tui.reads import EventFilter


class FilterScreen(ModalScreen[EventFilter | None]):
    """One list: each status (with its count), then each source. Enter applies that one and keeps the other."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="filter.cancel"),
    ]

    DEFAULT_CSS = """
    FilterScreen { align: center middle; }
    FilterScreen #filter-dialog { width: 50; }
    FilterScreen OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, current: EventFilter, counts: dict[str, int], sources: list[str]) -> None:
        super().__init__()
        self.current = current
        self.counts = counts
        self.sources = sources

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        options: list[Option | None] = []
        total = sum(self.counts.values())
        for status in (None, *STATUSES):
            n = total if status is None else self.counts.get(status, 0)
            chosen = "● " if status == self.current.status else "  "
            options.append(Option(f"{chosen}status: {status or 'all'}  ({n:,})", id=f"status:{status or ''}"))
        options.append(None)
        for source in (None, *self.sources):
            chosen = "● " if source == self.current.source else "  "
            label = Content(f"{chosen}source: {terminal_safe(source) if source else 'all sources'}")
            options.append(Option(label, id=f"source:{source or ''}"))
        with Vertical(id="filter-dialog", classes="dialog") as dialog:
            dialog.border_title = "Filter events"
            dialog.border_subtitle = "enter pick · esc cancel"
            yield OptionList(*options, id="filter-options")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.focus()
        current = f"status:{self.current.status or ''}"
        options.highlighted = options.get_option_index(current)

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(OptionList.OptionSelected)
    def _picked(self, message: OptionList.OptionSelected) -> None:
        kind, _, value = (message.option.id or "").partition(":")
        if kind == "status":
            self.dismiss(replace(self.current, status=value or None))
        else:
            self.dismiss(replace(self.current, source=value or None))
