"""A yes/no question before an action that changes many rows."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Label

from console.textsafe import terminal_safe


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, yes_label: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Label(Content(terminal_safe(self.question)), id="confirm-question")  # it may name a source
            with Horizontal(classes="buttons"):
                yield Button(self.yes_label, variant="warning", id="confirm-yes", compact=True)
                yield Button("Cancel", id="confirm-no", compact=True)

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss(False)
