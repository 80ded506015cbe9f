"""The footer: Textual's compact Footer, whose keys come with their compact class already set.

Textual's FooterKey adds "-compact" in a watcher once it is mounted, after it has its styles, so each key (about
twenty on the console's main screen) was styled twice on the way to the first frame and again at every change of
the keys shown. Set before mounting, the watcher finds the class there and changes nothing; what is drawn is the
same.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer

from console.tui.textual_8_2 import FooterKey


class ConsoleFooter(Footer):
    def __init__(self) -> None:
        super().__init__(compact=True)

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey) and self.compact:
                widget.add_class("-compact", update=False)
            yield widget
