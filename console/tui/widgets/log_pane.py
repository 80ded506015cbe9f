"""The log pane (L): the engine's log lines as they come, under the events. Mounted the first time it is asked
for (the first frame has no use for it); hidden and shown again after that."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log

from console.tui.log_lines import KEPT_LINES


class LogPane(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms it
    DEFAULT_CSS = """
    LogPane {
        height: 25%;
        min-height: 5;
        border: round $secondary 60%;
        border-title-color: $text-secondary;
    }
    LogPane:focus-within {
        border: round $secondary;
    }
    LogPane > Log {
        height: 1fr;
        background: transparent;
    }
    """

    def __init__(self, kept: Callable[[], list[str]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.kept = kept  # the newest lines since the console started (LogLines.lines)
        self.border_title = "Log · L hides it"

    def compose(self) -> ComposeResult:
        yield Log(max_lines=KEPT_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        self.show_kept()

    def show_kept(self) -> None:
        """Every kept line, the newest last (what came while the pane was hidden included)."""
        log = self.query_one(Log)
        log.clear()
        log.write_lines(self.kept())

    def add_lines(self, lines: list[str]) -> None:
        if self.display:
            self.query_one(Log).write_lines(lines)
