"""Set the daily and monthly budgets for model calls, as `agent-console budget` does: stored in the inbox,
winning over the config file and the environment until cleared, obeyed by the engine at its next call."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label

from console.textsafe import terminal_safe

# The budgets to store ({"daily": usd, ...}; only those changed), or None to clear the stored ones ->
# None when done, else the message to show inline.
Save = Callable[[dict[str, float] | None], Awaitable[str | None]]
KINDS = ("daily", "monthly")


def budget_text(usd: float | None) -> str:
    """A budget as the form shows it: 0 for no limit."""
    return "0" if usd is None else f"{usd:g}"


class BudgetScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="budget.cancel"),
        Binding("ctrl+s", "save", "Save", id="budget.save"),
    ]

    def __init__(self, save: Save, budgets: dict[str, float | None], sources: dict[str, str]) -> None:
        super().__init__()
        self.save = save
        self.shown = {kind: budget_text(budgets.get(kind)) for kind in KINDS}
        self.sources = sources

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        with Vertical(id="budget-dialog", classes="dialog") as dialog:
            dialog.border_title = "Budgets for model calls (US dollars, 0 = no limit)"
            dialog.border_subtitle = "ctrl+s save · esc cancel"
            for kind in KINDS:
                with Horizontal(classes="row"):
                    yield Label(kind, classes="field-label")
                    yield Input(self.shown[kind], id=f"budget-{kind}", compact=True, classes="budget-input")
                    source = self.sources.get(kind, "default")
                    yield Label(Content.styled(terminal_safe(f" from {'the inbox' if source == 'inbox' else source}"),
                                               "dim"), classes="budget-source")
            yield Label("", id="budget-error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="budget-ok", compact=True)
                yield Button("Clear stored", id="budget-clear", compact=True)
                yield Button("Cancel", id="budget-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#budget-daily", Input).focus()

    def show_error(self, message: str) -> None:
        label = self.query_one("#budget-error", Label)
        label.update(Content(terminal_safe(message)))
        label.set_class(bool(message), "-error")

    @on(Button.Pressed, "#budget-ok")
    async def action_save(self) -> None:
        changed: dict[str, float] = {}
        for kind in KINDS:
            text = self.query_one(f"#budget-{kind}", Input).value.strip()
            if text == self.shown[kind]:
                continue  # untouched: the budget keeps coming from where it comes from
            try:
                value = float(text)
            except ValueError:
                self.show_error(f"{kind}: {text!r} is not a number of US dollars")
                return
            if not math.isfinite(value) or value < 0:
                self.show_error(f"{kind}: a budget is 0 (no limit) or more US dollars, not {text}")
                return
            changed[kind] = value
        if not changed:
            self.dismiss(None)
            return
        problem = await self.save(changed)
        if problem:
            self.show_error(problem)
            return
        self.dismiss(None)

    @on(Button.Pressed, "#budget-clear")
    async def _clear(self) -> None:
        problem = await self.save(None)
        if problem:
            self.show_error(problem)
            return
        self.dismiss(None)

    @on(Button.Pressed, "#budget-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
