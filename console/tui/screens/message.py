"""One outbox message in full: its whole body, where it stands, where it went, its batch's last error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import tzinfo
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.core import OutboxMessage, StoreError
from console.textsafe import terminal_safe, terminal_safe_lines
from console.tui.detail import clock_text
from console.tui.read_only import read_only
from console.tui.screens.confirm import ConfirmScreen

LIVE_SECONDS = 1.0
Reread = tuple[OutboxMessage | None, int | None, int]  # the message, the outbox's next send, the moment read

STATUS_STYLE = {"queued": "$text-warning", "sending": "$text-primary", "sent": "$text-success",
                "failed": "$text-error"}


def message_facts(message: OutboxMessage, now: int, zone: tzinfo | None = None,
                  goes_out_at: int | None = None) -> Content:
    """Its state and times in a line; a held message says when it goes out (goes_out_at: the outbox's next
    send, after the send gap; an urgent one goes out at once)."""
    parts: list[str | tuple[str, str]] = [
        (message.status, f"bold {STATUS_STYLE.get(message.status, '')}"),
        ("  urgent" if message.urgent else "", "$text-accent bold"),
        (f"  written {clock_text(message.created_at, now, zone)}", "dim"),
    ]
    if message.sent_at is not None:
        parts.append((f"  sent {clock_text(message.sent_at, now, zone)}", "dim"))
    if message.channel:
        parts.append((f"  → {terminal_safe(message.channel)}", "dim"))
    if message.event_id is not None:
        parts.append((f"  from event #{message.event_id}", "dim"))
    if message.approval_id:
        parts.append((f"  announces approval {terminal_safe(message.approval_id)}", "dim"))
    if message.status == "queued" and message.urgent:
        parts.append(("  goes out at once (the urgent lane)", "$text-warning"))
    elif message.status == "queued" and goes_out_at is not None:
        parts.append((f"  held by the send gap: goes out {clock_text(goes_out_at, now, zone)}", "$text-warning"))
    if message.status == "sending" and message.next_try_at is not None:
        parts.append((f"  next try {clock_text(message.next_try_at, now, zone)}", "$text-warning"))
    return Content.assemble(*parts)


class MessageScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="message.close"),
        Binding("c", "copy", "Copy", id="message.copy", tooltip="copy the message's text"),
        Binding("s", "send_now", "Send now", id="message.send_now",
                tooltip="send this held message at once, on the urgent lane (asks first)"),
    ]

    def __init__(self, message: OutboxMessage, now: int, zone: tzinfo | None = None,
                 goes_out_at: int | None = None, *,
                 send_now: Callable[[int], Awaitable[bool]] | None = None,
                 reread: Callable[[], Awaitable[Reread]] | None = None) -> None:
        super().__init__()
        self.reread = reread  # the message and the next send as they stand now: the screen stays live
        self.message = message
        self.now = now
        self.zone = zone
        self.goes_out_at = goes_out_at
        self.send_now = send_now  # the console's: moves a held message to the urgent lane; False if it could not

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """send now only for a message the gap holds (queued, not urgent), and never --read-only."""
        if action == "send_now":
            message = self.message
            return (self.send_now is not None and message.status == "queued" and not message.urgent
                    and not read_only(self))
        return True

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        message = self.message
        with Vertical(id="message-dialog", classes="dialog") as dialog:
            dialog.border_title = f"Outbox message #{message.id}"
            dialog.border_subtitle = self._keys_line()
            yield Static(message_facts(message, self.now, self.zone, self.goes_out_at), id="message-facts")
            if message.error:
                yield Static(Content.assemble(("last send error: ", "bold"),
                                              (terminal_safe_lines(message.error), "$text-error")),
                             id="message-error")
            if message.batch_key:
                yield Static(Content.styled(f"idempotency key {terminal_safe(message.batch_key)}", "dim"),
                             id="message-key")
            with VerticalScroll(id="message-body"):
                yield Static(Content(terminal_safe_lines(message.body)), id="message-text")

    def on_mount(self) -> None:
        if self.reread is not None:
            self.set_interval(LIVE_SECONDS, self.refresh_view)

    async def refresh_view(self) -> None:
        """Once a second: the message as it stands (sent since, urgent now, a send failed), one row read."""
        if self.reread is None:
            return
        try:
            message, goes_out_at, now = await self.reread()
        except StoreError:
            return  # a busy or closing file: the next second reads again
        if message is None:
            return  # pruned meanwhile: what was read stays on screen
        if (message, goes_out_at, now) != (self.message, self.goes_out_at, self.now):
            self.message, self.goes_out_at, self.now = message, goes_out_at, now
            self._show()

    def _show(self) -> None:
        self.query_one("#message-facts", Static).update(
            message_facts(self.message, self.now, self.zone, self.goes_out_at))
        self.query_one("#message-dialog").border_subtitle = self._keys_line()
        self.refresh_bindings()

    def _keys_line(self) -> str:
        return ("s send now · " if self.check_action("send_now", ()) else "") + "c copy · esc close"

    def action_close(self) -> None:
        self.dismiss(None)

    def action_send_now(self) -> None:
        when = "" if self.goes_out_at is None else f" instead of {clock_text(self.goes_out_at, self.now, self.zone)}"
        self.app.push_screen(ConfirmScreen(f"Send message #{self.message.id} now, on the urgent lane{when}? The "
                                           "other held messages still wait for the gap.", yes_label="Send now"),
                             self._send_now_confirmed)

    async def _send_now_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed or self.send_now is None:
            return
        if await self.send_now(self.message.id):
            self.message = replace(self.message, urgent=True)
            self.notify(f"Message #{self.message.id} goes out at once (the urgent lane)", title="Send now")
        else:
            self.notify(f"Message #{self.message.id} is no longer held by the gap (sent, or urgent already)",
                        severity="warning")
        self._show()

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.message.body)
        self.notify("Copied the message's text", timeout=2)
