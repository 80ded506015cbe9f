"""Inject an event by keyboard: any source (the inbox's own suggested as you type), the source id and the JSON
payload. The sources only the engine writes (approval outcomes, timers) are refused in the form."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Footer, Input, Label, TextArea

from console.core import MAX_PAYLOAD_DEPTH
from console.core.base import RESERVED_SOURCES
from console.textsafe import terminal_safe

# (source, source_id, payload) -> None when stored, else the message to show inline
Submit = Callable[[str, str, Any], Awaitable[str | None]]
DEFAULT_SOURCES = ("chat", "manual", "webhook")


class InjectScreen(ModalScreen[tuple[str, str] | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="inject.cancel"),
        Binding("ctrl+s", "submit", "Inject", id="inject.submit"),
    ]

    def __init__(
        self, submit: Submit, *, sources: list[str], source_id: str, payload: str = '{"text": "hello"}',
        source: str = "chat", blink: bool = True,
    ) -> None:
        super().__init__()
        self.submit = submit
        self.sources = sorted(set(DEFAULT_SOURCES) | set(sources) - set(RESERVED_SOURCES))
        self.source = source
        self.source_id = source_id
        self.payload = payload
        self.blink = blink

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        with Vertical(id="inject-dialog", classes="dialog") as dialog:
            dialog.border_title = "Inject an event"
            dialog.border_subtitle = "ctrl+s inject · esc cancel"
            with Horizontal(classes="row"):
                yield Label("source", classes="field-label")
                yield Input(self.source, id="inject-source", compact=True,
                            placeholder="any name: " + ", ".join(self.sources[:4]),
                            suggester=SuggestFromList(self.sources, case_sensitive=True))
            with Horizontal(classes="row"):
                yield Label("source id", classes="field-label")
                yield Input(self.source_id, id="inject-source-id", compact=True)
            yield Label("payload (JSON)", id="inject-payload-label")
            area = TextArea(self.payload, id="inject-payload", soft_wrap=True, show_line_numbers=False, compact=True)
            area.cursor_blink = self.blink
            yield area
            yield Label("", id="inject-error")
            with Horizontal(classes="buttons"):
                yield Button("Inject", variant="primary", id="inject-ok", compact=True)
                yield Button("Cancel", id="inject-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#inject-source-id", Input).cursor_blink = self.blink
        self.query_one("#inject-source", Input).cursor_blink = self.blink
        payload = self.query_one("#inject-payload", TextArea)
        payload.focus()
        payload.select_all()  # the pre-fill is an example: typing replaces it whole

    def show_error(self, message: str) -> None:
        label = self.query_one("#inject-error", Label)
        label.update(Content(terminal_safe(message)))  # it may quote the source id: plain text, escaped
        label.set_class(bool(message), "-error")

    @on(Input.Changed)
    @on(TextArea.Changed)
    def _edited(self) -> None:
        """An error is about what was submitted: once a field changes it no longer applies."""
        self.show_error("")

    @on(Button.Pressed, "#inject-ok")
    async def action_submit(self) -> None:
        source = self.query_one("#inject-source", Input).value.strip()
        source_id = self.query_one("#inject-source-id", Input).value.strip()
        text = self.query_one("#inject-payload", TextArea).text
        if not source:
            self.show_error("source: must not be empty (e.g. chat, manual, or any name of your own)")
            return
        if source in RESERVED_SOURCES:
            self.show_error(f"source: {source} is reserved for the engine's own events (approval outcomes and "
                            "timers); pick another name")
            return
        if not source_id:
            self.show_error("source id: must not be empty")
            return
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            self.show_error(f"payload: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")
            return
        except RecursionError:  # json's decoder recurses: far past what the inbox takes anyway
            self.show_error(f"payload: nested deeper than {MAX_PAYLOAD_DEPTH} levels")
            return
        problem = await self.submit(source, source_id, payload)
        if problem is not None:
            self.show_error(problem)
            return
        self.dismiss((source, source_id))

    @on(Button.Pressed, "#inject-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
