"""The header: which inbox, which agent, this console's mode, a badge while approvals wait, today's spend on
model calls against the daily budget, and a sparkline of events per minute; below it, a banner while nobody
holds a live lease on the inbox or a tool server is down."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from console.core import Store, StoreError
from console.spendfmt import dollars
from console.textsafe import terminal_safe
from console.timefmt import plural
from console.tui.detail import human_span
from console.tui.panes import PaneHost
from console.tui.read_order import ReadOrder
from console.tui.reads import (
    Activity,
    ChannelTrouble,
    HeaderFacts,
    SpendView,
    read_activity,
    read_header,
    read_spend,
)
from console.tui.render import show
from console.tui.widgets.lease_pane import tools_down_words

log = logging.getLogger("agent_console.tui")
ACTIVITY_SECONDS = 5  # the sparkline is read at most this often, and only when it can have changed


@dataclass(frozen=True)
class HeaderView:
    now: int
    mode: str
    facts: HeaderFacts | None = None
    activity: Activity | None = None
    webhooks: str | None = None
    resume_key: str | None = None  # the key that resumes a stalled worker, as the footer shows it

    def at(self, now: int) -> HeaderView:
        return replace(self, now=now)

    def moves_at(self, now: int) -> bool:
        """Whether the header reads differently at `now`: the banner appears when the lease lapses, and says
        how long ago it did."""
        if self.facts is None or self.facts.lease is None:
            return False
        return self.nobody_working or not self.facts.lease.is_live(now)

    @property
    def nobody_working(self) -> bool:
        """No live lease: no worker claims this inbox's events until one takes it."""
        if self.facts is None:
            return False
        lease = self.facts.lease
        return lease is None or not lease.is_live(self.now)


def banner_text(view: HeaderView) -> str:
    lease = view.facts.lease if view.facts else None
    if lease is None:
        why = "no worker has ever held its lease"
    else:
        why = (f"the lease of {terminal_safe(lease.holder)} (gen {lease.gen}) lapsed "
               f"{human_span(view.now - lease.until)} ago")
    if view.mode == "stalled":
        then = f"; press {view.resume_key} to resume this console's worker" if view.resume_key else ""
    elif view.mode == "standby":
        then = "; this console takes the lease over at its next try"
    else:
        then = "; run `agent-console run` or open the console to work it"
    return f"⚠ Nobody is working this inbox: {why}{then}"


class ConsoleHeader(Vertical):
    # Textual would prefix every rule below with ConsoleHeader, and the screen's -narrow rule would then match
    # nothing; each rule names ConsoleHeader itself.
    SCOPED_CSS = False
    DEFAULT_CSS = """
    ConsoleHeader {
        dock: top;
        height: auto;
        background: $panel;
    }
    ConsoleHeader > #header-line {
        height: 1;
    }
    ConsoleHeader #header-title {
        width: 1fr;
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    ConsoleHeader #header-spend {
        width: auto;
        height: 1;
    }
    ConsoleHeader #header-rate {
        width: auto;
        height: 1;
        color: $text-muted;
    }
    ConsoleHeader #header-sparkline {
        width: 20;
        height: 1;
    }
    ConsoleHeader #header-sparkline > .sparkline--max-color {
        color: $accent;
    }
    ConsoleHeader #header-sparkline > .sparkline--min-color {
        color: $primary 50%;
    }
    /* below 100 columns (HORIZONTAL_BREAKPOINTS): the inbox path needs the room more than the sparkline */
    Screen.-narrow ConsoleHeader #header-sparkline {
        width: 10;
    }
    ConsoleHeader > #header-banner {
        height: auto;
        padding: 0 1;
        background: $error 30%;
        color: $text;
        text-style: bold;
        display: none;
    }
    ConsoleHeader > #header-banner.-shown {
        display: block;
    }
    """

    view: reactive[HeaderView | None] = reactive(None, init=False, repaint=False)  # the watcher updates what changed

    def __init__(self, host: PaneHost, inbox: str, agent: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.inbox = inbox
        self.agent = agent
        self.activity: Activity | None = None
        self.sources: list[str] = []  # the inbox's sources, read with the sparkline
        self.activity_stale = True  # events came since the sparkline was read
        self._activity_read_at: int | None = None
        self.chain = host.settings.model_chain()
        self._model_in_use: str | None = None  # the model in use as last read (a change is a toast)
        self._channels_down: set[tuple[str, str, str]] = set()  # channels told down (_say_channels_down)
        self._reads = ReadOrder()
        self._activity_reads = ReadOrder()

    async def reload(self) -> None:
        host = self.host
        now = host.clock.now()
        ticket = self._reads.begin()
        facts = await host.read(read_header(now, host.settings.budget_defaults(), self.chain))
        if not self._reads.may_show(ticket):
            return  # a read begun after this one has shown newer facts
        self._say_model_switch(facts.models)
        self._say_channels_down(facts.channels_down)
        self.view = HeaderView(now, host.engine.mode, facts, self.activity, host.receiver_summary(),
                               host.key_for("console.stall"))

    def tick(self, now: int) -> None:
        if self.view is not None and self.view.moves_at(now):
            self.view = self.view.at(now)
        if self._activity_due(now):
            self.refresh_activity()

    def _activity_due(self, now: int) -> bool:
        """The sparkline moves when events arrive, when a minute ends (while it shows any) and while the
        rolling minute counts any."""
        read_at, activity = self._activity_read_at, self.activity
        if read_at is None or activity is None:
            return True
        if now - read_at < ACTIVITY_SECONDS:
            return False
        return (self.activity_stale or activity.last_60s > 0
                or (now // 60 != read_at // 60 and any(activity.per_minute)))

    async def edit_budgets(self) -> None:
        """b: the daily and monthly budgets the spend here is measured against, stored in the inbox."""
        host = self.host
        spend = await host.read(read_spend(host.clock.now(), host.settings.budget_defaults()))
        budgets = {"daily": spend.daily_budget_usd, "monthly": spend.monthly_budget_usd}
        sources = {"daily": spend.daily_from, "monthly": spend.monthly_from}
        from console.tui.screens.budget import BudgetScreen  # the modal screens load when first opened

        await self.app.push_screen(BudgetScreen(self._save_budgets, budgets, sources))

    async def _save_budgets(self, changed: dict[str, float] | None) -> str | None:
        """Store budgets in the inbox (None: clear the stored ones), as `agent-console budget` does."""
        host = self.host
        now = host.clock.now()

        def write(store: Store) -> None:
            if changed is None:
                store.clear_budgets()
            for kind, usd in (changed or {}).items():
                store.set_budget(kind, usd, now=now)

        try:
            await host.engine.write(write)
        except (ValueError, StoreError) as exc:
            return f"not stored: {exc}"
        host.mark("header", "lease")
        if changed is None:
            self.notify("The stored budgets are cleared: the config file's and environment's apply", title="Budget")
        else:
            said = ", ".join(f"{kind} ${usd:g}" if usd else f"{kind} no limit" for kind, usd in changed.items())
            self.notify(f"Stored in the inbox: {said}", title="Budget")
        return None

    @work(group="activity", exclusive=True)
    async def refresh_activity(self) -> None:
        if not self.host.started:
            return
        try:
            await self.read_activity()
        except StoreError as exc:
            log.warning("reading the activity failed: %s", exc)
            return
        if self.view is None:
            return
        # The console may be closing while the read ran: Textual removes the header's lines before the header,
        # so a header still attached can have nothing left to draw on (the app's own reloads and ticks do the same).
        with contextlib.suppress(NoMatches):
            self.view = replace(self.view, activity=self.activity)

    async def read_activity(self) -> None:
        host = self.host
        now = host.clock.now()
        self.activity_stale = False
        self._activity_read_at = now  # a tick while this reads does not read again
        ticket = self._activity_reads.begin()
        activity = await host.read(read_activity(now))
        sources = await host.read(lambda store: store.sources())
        if not self._activity_reads.may_show(ticket):
            return  # a read begun after this one has shown a newer sparkline
        self.activity, self.sources = activity, sources

    def compose(self) -> ComposeResult:
        with Horizontal(id="header-line"):
            yield Static(id="header-title")
            yield Static(id="header-spend")
            yield Static("ev/min", id="header-rate")
            yield Sparkline([0], id="header-sparkline")
        yield Static(id="header-banner")

    def watch_view(self, view: HeaderView | None) -> None:
        if view is None:
            return
        facts = view.facts
        mode = "read-only" if view.mode == "watching" else view.mode  # --read-only: a watch-only engine
        title = Content.assemble(
            ("agent-console ", "bold $text-primary"), (mode, "$text-success" if mode == "active" else "$text-warning"),
            *self._badge(facts), (" · agent ", "dim"), (self.agent, "bold"), *self._model(facts),
            *self._spend(facts.spend if facts else None), (" · ", "dim"), self.inbox,
            *((("  ", ""), (view.webhooks, "$text-accent")) if view.webhooks else ()),
        )
        show(self.query_one("#header-title", Static), title)
        show(self.query_one("#header-spend", Static), spend_gauge(facts.spend if facts else None))
        if view.activity is not None:
            show(self.query_one("#header-rate", Static), f" {view.activity.last_60s}/min ")
            self.query_one("#header-sparkline", Sparkline).data = view.activity.per_minute or [0]
        banner = self.query_one("#header-banner", Static)
        # Whole lines, at every width: the lease pane's tools line is cut, or below the fold, at 80x24.
        tools = tools_down_words(list(facts.tools_not_up)) if facts is not None else None
        lines = [banner_text(view)] if view.nobody_working else []
        if tools is not None:
            lines.append(f"⚠ {terminal_safe(tools)}")
        for trouble in facts.channels_down if facts is not None else ():
            lines.append(f"⚠ {terminal_safe(trouble.title())} — {terminal_safe(trouble.reason)}")
        fallback = fallback_words(list(facts.models)) if facts is not None else None
        if fallback is not None:
            lines.append(f"⚠ {terminal_safe(fallback)}")
        banner.set_class(bool(lines), "-shown")
        if lines:
            show(banner, Content("\n".join(lines)))

    def _say_channels_down(self, down: tuple[ChannelTrouble, ...]) -> None:
        """One toast when a phone or mail channel stops (paused, offline) or stops for another reason, as the lease
        pane says a tool server down; the banner keeps saying it while it lasts."""
        now_down = {(trouble.source, trouble.state, trouble.reason) for trouble in down}
        for trouble in down:
            if (trouble.source, trouble.state, trouble.reason) not in self._channels_down:
                self.notify(terminal_safe(trouble.reason), title=trouble.title(), severity="error", timeout=10,
                            markup=False)
        self._channels_down = now_down

    def _say_model_switch(self, models: tuple[dict[str, Any], ...]) -> None:
        """A toast when the model in use changes (a fallback takes over, the primary is back, none can answer)."""
        if not models:
            return
        in_use = next((row["name"] for row in models if row["in_use"]), "")
        before, self._model_in_use = self._model_in_use, in_use
        if before is None or before == in_use:
            return
        said = fallback_words(list(models))
        primary = models[0]["name"]
        words = said or (f"{primary} answers again" if in_use == primary else f"{in_use} answers")
        self.notify(terminal_safe(words), title="Model switched", timeout=10,
                    severity="information" if in_use == primary else "warning")

    @staticmethod
    def _model(facts: HeaderFacts | None) -> tuple[tuple[str, str], ...]:
        """' · model local' (the one in use: a fallback in warning colours, none in error colours)."""
        if facts is None or not facts.models:
            return ()
        in_use = next((row for row in facts.models if row["in_use"]), None)
        if in_use is None:
            return ((" · model ", "dim"), ("none can answer", "bold $text-error"))
        style = "bold" if in_use is facts.models[0] else "bold $text-warning"
        return ((" · model ", "dim"), (terminal_safe(in_use["name"]), style))

    @staticmethod
    def _badge(facts: HeaderFacts | None) -> tuple[tuple[str, str], ...]:
        """' ⚑ 2 approvals waiting', in reverse colours, so a question is seen from across the room."""
        if facts is None or not facts.waiting:
            return ()
        return (("  ", ""), (f" ⚑ {plural(facts.waiting, 'approval')} waiting ", "bold $text-warning reverse"))

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


GAUGE_CELLS = 8


def spend_gauge(spend: SpendView | None) -> Content:
    """Today's spend against the daily budget as a bar beside the sparkline (' $ ▰▰▰▱▱▱▱▱ 38% '), in the spend's
    colours (warning from 80%, error once reached, paused or unknown); nothing without a daily budget."""
    if spend is None or not spend.daily_budget_usd:
        return Content("")
    if spend.today_usd is None:
        return Content.styled(" $ ? ", "$text-error bold")
    share = spend.today_usd / spend.daily_budget_usd
    full = min(GAUGE_CELLS, int(share * GAUGE_CELLS + 0.5)) if share > 0 else 0
    if share > 0 and full == 0:
        full = 1  # anything spent shows
    style = "$text-success"
    if share >= 1 or spend.paused:
        style = "$text-error bold"
    elif share >= 0.8:
        style = "$text-warning"
    return Content.assemble((" $ ", "dim"), ("▰" * full, style), ("▱" * (GAUGE_CELLS - full), "dim"),
                            (f" {min(share, 9.99):.0%} ", style))


def fallback_words(models: list[dict[str, Any]]) -> str | None:
    """The banner's line while the primary cannot answer: who answers instead and why ('model: local answers;
    claude cooling until 14:05 — rate limited (429)'), or that none can; None while the primary answers."""
    if not models or models[0]["in_use"]:
        return None
    primary = models[0]
    why = f"{primary['name']} {primary['state']}" + (f": {primary['reason']}" if primary["reason"] else "")
    in_use = next((row["name"] for row in models if row["in_use"]), None)
    if in_use is None:
        return f"model: none can answer now ({why}); events wait, no attempt spent"
    return f"model: {in_use} answers ({why})"
