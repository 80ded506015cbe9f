"""A yes/no question before an action that changes many rows, or cannot be taken back."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static

from console.textsafe import terminal_safe


class ConfirmScreen(ModalScreen[bool]):
    """The question wraps to the dialog's width (it names sources, ids and counts: nothing of it is cut).
    A destructive question focuses Cancel, so a stray enter cancels; y still answers yes at once."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n", "answer(False)", "No", id="confirm.no"),
        Binding("escape", "cancel", "Cancel", id="confirm.cancel"),  # its own action: the footer shows it too
    ]

    def __init__(self, question: str, yes_label: str = "Yes", *, destructive: bool = False) -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Static(Content(terminal_safe(self.question)), id="confirm-question")  # it may name a source
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes_label} (y)", variant="warning", id="confirm-yes", compact=True)
                yield Button("Cancel (esc)", id="confirm-no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#confirm-no" if self.destructive else "#confirm-yes", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def action_cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss(False)
