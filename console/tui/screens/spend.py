"""The spend screen ($): what the model calls cost per day over the last 30 days, per model, as a bar chart with the
daily budget across it; today's spend against that budget, the month's against the monthly one, each model's
30 days. Read from the spend ledger (Store.daily_spend_by_model, spend_summary); live while open: read again when
the engine says something committed (a call settled) and once a minute (the day rolls over). Closed, it reads
nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.core import Store
from console.core.models import BudgetDefaults
from console.core.spend import NANOS_PER_USD, DailySpend
from console.spendfmt import dollars
from console.textsafe import terminal_safe
from console.tui.rereads import FoldedReads

DAYS = 30
REFRESH_SECONDS = 60.0  # besides every commit: today becomes yesterday at midnight with nothing committed
Read = Callable[[Callable[[Store], Any]], Awaitable[Any]]


@dataclass(frozen=True)
class SpendChartView:
    """The spend as the screen shows it, read in one go at `now`."""

    daily: DailySpend
    summary: dict[str, Any]  # Store.spend_summary: today_usd, month_usd, the budgets (None: no limit)
    now: int


def read_spend_chart(now: int, defaults: BudgetDefaults) -> Callable[[Store], SpendChartView]:
    def read(store: Store) -> SpendChartView:
        return SpendChartView(store.daily_spend_by_model(days=DAYS, zone=defaults.zone, now=now),
                              store.spend_summary(defaults, now=now), now)

    return read


def against(spent: float | None, budget: float | None, what: str) -> Content:
    """'today $0.42 of $5.00 (8%)', in the header gauge's colours: warning from 80%, error once reached or when
    a call without a price makes the spend unknown under a budget."""
    if budget is None:
        return Content.assemble((f"{what} ", "dim"), dollars(spent), (" (no budget)", "dim"))
    style = ""
    if spent is None or spent >= budget:
        style = "$text-error"
    elif spent >= 0.8 * budget:
        style = "$text-warning"
    share = "" if spent is None else f" ({spent / budget:.0%})"
    return Content.assemble((f"{what} ", "dim"), (dollars(spent), style), (f" of {dollars(budget)}{share}", "dim"))


def summary_line(view: SpendChartView) -> Content:
    """Today against the daily budget, the month against the monthly one, the 30 days."""
    summary = view.summary
    total = sum(view.daily.model_total(model) for model in view.daily.nanos)
    return Content.assemble(
        against(summary["today_usd"], summary["daily_budget_usd"], "today"), (" · ", "dim"),
        against(summary["month_usd"], summary["monthly_budget_usd"], "this month"), (" · ", "dim"),
        (f"{DAYS} days ", "dim"), dollars(total / NANOS_PER_USD))


def model_lines(view: SpendChartView, shown: str | None, colours: Callable[[int], str]) -> Content:
    """One line per model: its colour in the chart, its 30 days and today, calls without a price; the one shown
    alone marked ▸."""
    daily = view.daily
    if not daily.nanos:
        return Content.styled(f"No model calls in the last {DAYS} days.", "dim")
    parts: list[str | tuple[str, str]] = []
    for index, model in enumerate(daily.nanos):
        unpriced = daily.unpriced.get(model, 0)
        parts += [
            ("▸ " if model == shown else "  ", "bold"), (f"■ {terminal_safe(model)}", colours(index)),
            f"  {dollars(daily.model_total(model) / NANOS_PER_USD)}",
            (f" in {DAYS} days · today {dollars(daily.nanos[model][-1] / NANOS_PER_USD)}", "dim"),
            (f" · {unpriced} call{'s' if unpriced != 1 else ''} without a price" if unpriced else "", "$text-warning"),
            "\n"]
    return Content.assemble(*parts[:-1])


class SpendScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    SpendScreen {
        align: center middle;
    }
    SpendScreen #spend-summary, SpendScreen #spend-models {
        height: auto;
    }
    SpendScreen #spend-models {
        max-height: 5;
    }
    SpendScreen SpendChart {
        height: 1fr;
        min-height: 6;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "next_model", "Model", id="spend.model",
                tooltip="the chart of one model, the next each time; all models stacked after the last"),
        Binding("escape,q", "close", "Close", id="spend.close"),
    ]

    view: reactive[SpendChartView | None] = reactive(None, always_update=True, init=False)

    def __init__(self, read: Read, now: Callable[[], int], defaults: BudgetDefaults) -> None:
        super().__init__()
        self._read = read
        self._now = now
        self._defaults = defaults
        self.model: str | None = None  # the one model charted alone; None: all of them, stacked
        self._reads = FoldedReads(self, self._reload, "spend-read")

    def compose(self) -> ComposeResult:
        from console.tui.widgets.spend_chart import SpendChart  # plotext loads when the screen first opens

        yield Footer(compact=True)
        with Vertical(id="spend-dialog", classes="dialog") as dialog:
            dialog.border_title = f"Spend on model calls, the last {DAYS} days"
            dialog.border_subtitle = "m one model / all · esc close"
            yield Static(id="spend-summary")
            yield SpendChart()
            yield Static(id="spend-models")

    def on_mount(self) -> None:
        self.inbox_changed()
        self.set_interval(REFRESH_SECONDS, self.inbox_changed)

    def inbox_changed(self) -> None:
        """Read again (panes.FollowsInbox)."""
        self._reads()

    async def _reload(self) -> None:
        self.view = await self._read(read_spend_chart(self._now(), self._defaults))

    def watch_view(self, view: SpendChartView | None) -> None:
        from console.tui.widgets.spend_chart import SpendChart, model_colour

        if view is None:
            return
        if self.model is not None and self.model not in view.daily.nanos:
            self.model = None
        self.query_one("#spend-summary", Static).update(summary_line(view))
        self.query_one("#spend-models", Static).update(model_lines(view, self.model, model_colour))
        chart = self.query_one(SpendChart)
        chart.display = bool(view.daily.nanos)
        chart.show(view.daily, view.summary["daily_budget_usd"], self.model)

    def action_next_model(self) -> None:
        """m: all models stacked → the first alone → the next → ... → all again."""
        view = self.view
        models = [] if view is None else list(view.daily.nanos)
        if not models:
            self.notify(f"No model calls in the last {DAYS} days", severity="warning", timeout=3)
            return
        at = -1 if self.model is None else models.index(self.model)
        self.model = models[at + 1] if at + 1 < len(models) else None
        self.view = view

    def action_close(self) -> None:
        self.dismiss(None)
