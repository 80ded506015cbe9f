"""The header: which inbox, which agent, this console's mode, and a sparkline of events per minute."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Sparkline, Static

from console.tui.reads import Activity


class ConsoleHeader(Horizontal):
    def __init__(self, inbox: str, agent: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.inbox = inbox
        self.agent = agent

    def compose(self) -> ComposeResult:
        yield Static(id="header-title")
        yield Static("ev/min", id="header-rate")
        yield Sparkline([0], id="header-sparkline")

    def show(self, mode: str, activity: Activity | None, webhooks: str | None = None) -> None:
        title = Content.assemble(
            ("agent-console ", "bold $text-primary"), (mode, "$text-success" if mode == "active" else "$text-warning"),
            (" · agent ", "dim"), (self.agent, "bold"), (" · ", "dim"), self.inbox,
            *((("  ", ""), (webhooks, "$text-accent")) if webhooks else ()),
        )
        self.query_one("#header-title", Static).update(title)
        if activity is not None:
            self.query_one("#header-rate", Static).update(f" {activity.last_60s}/min ")
            self.query_one("#header-sparkline", Sparkline).data = activity.per_minute or [0]
