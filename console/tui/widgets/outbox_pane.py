"""The outbox pane: what is held (urgent marked), what was sent, when the next send is due, what failed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Label, ProgressBar, Static

from console.textsafe import terminal_safe
from console.tui.detail import human_span
from console.tui.reads import OutboxView

Part = str | tuple[str, str]
NBSP = "\u00a0"


def one_line(text: str, width: int = 60) -> str:
    flat = terminal_safe(" ".join(text.split()))  # a reply may quote the sender's text
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class OutboxPane(Vertical):
    def __init__(self, gap: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gap = gap
        self.border_title = "Outbox"
        self.view: OutboxView | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="outbox-counts")
        with Horizontal(id="outbox-next"):
            yield Label("next ", id="outbox-next-label")
            yield ProgressBar(total=1, show_eta=False, show_percentage=False, id="outbox-bar")
            yield Label("", id="outbox-next-time")
        yield Static(id="outbox-lines")

    def show(self, view: OutboxView) -> None:
        self.view = view
        counts = view.counts
        urgent = sum(1 for m in view.queued if m.urgent)
        # Non-breaking spaces keep each label with its number when a narrow pane wraps the line.
        head: list[Part] = [
            (f"queued{NBSP}", "dim"), (str(counts["queued"]), "bold"),
            (f"{NBSP}({urgent}{NBSP}urgent)" if urgent else "", "$text-accent"),
            (f" · sent{NBSP}", "dim"), (str(counts["sent"]), "bold"),
            (f" · failed{NBSP}", "dim"), (str(counts["failed"]), "$text-error bold" if counts["failed"] else "bold"),
        ]
        if counts.get("retrying"):
            head += [(f" · retrying{NBSP}", "dim"), (str(counts["retrying"]), "$text-warning bold")]
        self.query_one("#outbox-counts", Static).update(Content.assemble(*head))
        bar = self.query_one("#outbox-bar", ProgressBar)
        when = self.query_one("#outbox-next-time", Label)
        bar.display = view.next_send_at is not None
        self.query_one("#outbox-next-label", Label).display = view.next_send_at is not None
        if view.next_send_at is None:
            bar.update(total=1, progress=0)
            when.update("nothing held")
        else:
            wait = max(0, view.next_send_at - view.now)
            span = max(self.gap, wait, 1)
            bar.update(total=span, progress=span - wait)
            when.update(" now" if wait == 0 else f" in {human_span(wait)}")
        lines: list[Part] = []
        for message in view.troubled[:2]:
            retry = f", retry in {human_span((message.next_try_at or view.now) - view.now)}" if (
                message.status != "failed") else ""
            lines += [("✗ ", "$text-error"), (one_line(f"{message.error}{retry}"), "$text-error"), "\n"]
        for message in view.queued[:3]:
            lines += [("! " if message.urgent else "· ", "$text-accent bold" if message.urgent else "dim"),
                      one_line(message.body), "\n"]
        # The urgent lane sends out of id order: the newest send first.
        for message in sorted(view.sent, key=lambda m: m.sent_at or 0, reverse=True)[:3]:
            ago = human_span(view.now - (message.sent_at or view.now))
            # The body first: a narrow pane cuts the end of the line, and the channel matters least.
            lines += [("✓ ", "$text-success"), (f"{ago} ago ", "dim"), one_line(message.body),
                      (f" → {message.channel}" if message.channel else "", "dim"), "\n"]
        self.query_one("#outbox-lines", Static).update(Content.assemble(*lines[:-1]) if lines else "")
