"""The header: which inbox, which agent, this console's mode, today's spend on model calls against the daily
budget, and a sparkline of events per minute."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Sparkline, Static

from console.spendfmt import dollars
from console.tui.reads import Activity, SpendView


class ConsoleHeader(Horizontal):
    def __init__(self, inbox: str, agent: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.inbox = inbox
        self.agent = agent

    def compose(self) -> ComposeResult:
        yield Static(id="header-title")
        yield Static("ev/min", id="header-rate")
        yield Sparkline([0], id="header-sparkline")

    def show(self, mode: str, activity: Activity | None, webhooks: str | None = None,
             spend: SpendView | None = None) -> None:
        title = Content.assemble(
            ("agent-console ", "bold $text-primary"), (mode, "$text-success" if mode == "active" else "$text-warning"),
            (" · agent ", "dim"), (self.agent, "bold"), *self._spend(spend), (" · ", "dim"), self.inbox,
            *((("  ", ""), (webhooks, "$text-accent")) if webhooks else ()),
        )
        self.query_one("#header-title", Static).update(title)
        if activity is not None:
            self.query_one("#header-rate", Static).update(f" {activity.last_60s}/min ")
            self.query_one("#header-sparkline", Sparkline).data = activity.per_minute or [0]

    @staticmethod
    def _spend(spend: SpendView | None) -> tuple[tuple[str, str], ...]:
        """' · today $0.42 of $5.00': warning colours from 80% of the budget, error colours once reached or
        when the spend is unknown (a model without a price) under a budget."""
        if spend is None:
            return ()
        shown = dollars(spend.today_usd)
        if spend.daily_budget_usd is None:
            return ((" · today ", "dim"), (shown, ""))
        style = ""
        if spend.today_usd is None or spend.today_usd >= spend.daily_budget_usd or spend.paused:
            style = "$text-error bold"
        elif spend.today_usd >= 0.8 * spend.daily_budget_usd:
            style = "$text-warning"
        return ((" · today ", "dim"), (shown, style), (f" of {dollars(spend.daily_budget_usd)}", "dim"))
