"""Help: every key on one full screen (k9s's ?, lazygit's keybindings menu), filtered as you type.

The main screen's keys come first (the app's, then the events table's), then each screen's. Typing filters
by key, name, what it does or binding id; ↑ ↓ pgup pgdn home end move through the list while the box keeps
the typing; the line under the list says the highlighted key's whole story. Keys are shown after `[keys]`
remaps, read from console/tui/keys.py like the palette's.
"""

from __future__ import annotations

import textwrap
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from console.textsafe import terminal_safe
from console.tui.keys import KeyRow

KEY_WIDTH = 12
DOES_WIDTH = 14


def plain_help(markdown: str) -> str:
    """A pane's HELP (a few lines of Markdown) as one plain paragraph."""
    lines = [line for line in markdown.strip().splitlines() if not line.startswith("#")]
    return " ".join(" ".join(lines).replace("**", "").split())


class KeysScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="keys.close", tooltip="clear the filter first, if it holds any"),
        Binding("f1", "leave", "Close", show=False, id="keys.leave", tooltip="close, whatever the filter holds"),
        Binding("up", "move('up')", "Up", show=False),
        Binding("down", "move('down')", "Down", show=False),
        Binding("pageup", "move('page_up')", "Page up", show=False),
        Binding("pagedown", "move('page_down')", "Page down", show=False),
        Binding("ctrl+home", "move('top')", "Top", show=False),
        Binding("ctrl+end", "move('bottom')", "Bottom", show=False),
    ]

    DEFAULT_CSS = """
    KeysScreen { background: $background; }
    KeysScreen #keys-box {
        height: 1fr;
        padding: 0 1;
        border: round $primary;
        border-title-color: $text-primary;
        border-subtitle-color: $text-muted;
    }
    KeysScreen #keys-about { color: $text-muted; height: auto; max-height: 4; }
    KeysScreen #keys-filter { margin: 0; background: $boost; }
    KeysScreen #keys-list { height: 1fr; border: none; padding: 0; scrollbar-size-vertical: 1; }
    KeysScreen #keys-detail { height: auto; min-height: 2; color: $text-muted; }
    """

    def __init__(self, rows: list[KeyRow], about: str = "") -> None:
        super().__init__()
        self.rows = rows
        self.about = about
        self.shown: list[KeyRow] = []

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="keys-box") as box:
            box.border_title = "Keys: every key, where it works and what it does"
            about = Static(Content(terminal_safe(self.about)), id="keys-about")
            about.display = bool(self.about)
            yield about
            yield Input(placeholder="type to filter: a key, a word, an id", id="keys-filter", compact=True)
            keys = OptionList(id="keys-list")
            keys.can_focus = False  # the box keeps the typing; the screen's keys move the highlight
            yield keys
            yield Static(id="keys-detail")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one(Input).focus()

    @property
    def keys_list(self) -> OptionList:
        return self.query_one("#keys-list", OptionList)

    def _fill(self, text: str) -> None:
        words = text.lower().split()
        self.shown = [row for row in self.rows if row.matches(words)]
        options: list[Option] = []
        place = None
        for index, row in enumerate(self.shown):
            if row.place != place:
                place = row.place
                options.append(Option(Text(place, style="bold underline"), disabled=True))
            options.append(Option(self._line(row), id=str(index)))
        keys = self.keys_list
        keys.set_options(options)
        total = len(self.rows)
        box = self.query_one("#keys-box")
        box.border_subtitle = (f"{len(self.shown)} of {total} keys" if words else f"{total} keys") + \
            " · ↑ ↓ pgup pgdn move · esc closes"
        if self.shown:
            keys.highlighted = 1  # the first key, under its place's heading
        self._show_detail()

    def _line(self, row: KeyRow) -> Text:
        """key, what it does, and the detail wrapped in its own column: nothing of it is cut."""
        indent = KEY_WIDTH + DOES_WIDTH
        # the screen's width less the box's border and padding and the list's scrollbar (the list itself has
        # no size before its first layout)
        width = max(20, (self.size.width or self.app.size.width) - 5 - indent - 1)
        detail = textwrap.wrap(row.detail, width) or [""]
        line = Text(end="")
        line.append(f"{row.keys:<{KEY_WIDTH - 1}} ", style="bold")
        line.append(f"{row.does:<{DOES_WIDTH - 1}} ")
        line.append(detail[0])
        for more in detail[1:]:
            line.append("\n" + "\u00a0" * indent + more)  # no-break spaces: a wrapped line keeps its indent
        return line

    def on_resize(self) -> None:
        if self.shown:
            self._fill(self.query_one(Input).value)

    def _show_detail(self) -> None:
        detail = self.query_one("#keys-detail", Static)
        keys = self.keys_list
        if not self.shown:
            detail.update("No key matches: esc clears the filter")
            return
        option = keys.highlighted_option
        if option is None or option.id is None:
            detail.update("")
            return
        row = self.shown[int(option.id)]
        said = f"{row.keys}: {row.does}" + (f", {row.detail}" if row.detail else "")
        said += f" ({row.place.lower()}" + (f"; [keys] id {row.binding_id})" if row.binding_id else ")")
        detail.update(Content(terminal_safe(said)))

    @on(Input.Changed, "#keys-filter")
    def _filter(self, message: Input.Changed) -> None:
        self._fill(message.value)

    @on(OptionList.OptionHighlighted, "#keys-list")
    def _highlighted(self) -> None:
        self._show_detail()

    def action_move(self, where: str) -> None:
        keys = self.keys_list
        {"up": keys.action_cursor_up, "down": keys.action_cursor_down, "page_up": keys.action_page_up,
         "page_down": keys.action_page_down, "top": keys.action_first, "bottom": keys.action_last}[where]()

    def action_leave(self) -> None:
        self.dismiss(None)

    def action_close(self) -> None:
        box = self.query_one(Input)
        if box.value:
            box.value = ""
            return
        self.dismiss(None)
