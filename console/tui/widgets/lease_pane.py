"""The lease pane: who owns the inbox, for how long, and what fencing has refused."""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from console.textsafe import terminal_safe
from console.timefmt import agent_in_words
from console.tui.detail import human_span
from console.tui.reads import LeaseView
from console.tui.render import show
from console.tui.widgets.countdown_bar import Countdown, CountdownBar

Part = str | tuple[str, str]


@dataclass(frozen=True)
class LeasePaneView:
    """The lease as the file holds it, and this console's own engine: its mode, holder and lease TTL."""

    data: LeaseView
    mode: str
    holder: str
    ttl: int

    @property
    def now(self) -> int:
        return self.data.now

    def at(self, now: int) -> LeasePaneView:
        """The same facts seen at a later second: what a countdown redraw needs, without reading the file."""
        return replace(self, data=replace(self.data, now=now))

    def counts_down(self) -> bool:
        lease, agent = self.data.lease, self.data.agent
        return (lease is not None and lease.until >= self.now) or (agent is not None and agent.until is not None)

    def stale(self, now: int) -> bool:
        """The agent's wait or pause was due to end by now: its state is read again."""
        agent = self.data.agent
        return agent is not None and agent.until is not None and agent.until <= now


class LeasePane(Vertical):
    HELP = """
## Lease
One worker at a time owns the inbox: the lease's holder and generation, the time left before it lapses
unless renewed, takeovers, and late finishes refused because a newer generation took over (fencing).
**x** stalls this console's worker (it stops renewing, so another console or `agent-console run` takes
over) and resumes it.
"""

    DEFAULT_CSS = """
    LeasePane > #lease-fencing, LeasePane > #lease-agent {
        height: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    /* wraps in a narrow pane rather than lose its end (the holder's "(you)") */
    LeasePane > #lease-who {
        height: auto;
    }
    """

    view: reactive[LeasePaneView | None] = reactive(None, init=False, repaint=False)  # the watcher updates what changed

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Lease"

    def compose(self) -> ComposeResult:
        yield Static(id="lease-who")
        yield CountdownBar(id="lease-left")
        yield Static(id="lease-fencing")
        yield Static(id="lease-agent")

    def watch_view(self, view: LeasePaneView | None) -> None:
        if view is None:
            return
        data, now = view.data, view.now
        lease = data.lease
        mode_style = {"active": "$text-success bold", "stalled": "$text-error bold", "halted": "$text-error bold"}.get(
            view.mode, "$text-warning bold")
        who: list[Part] = [("mode ", "dim"), (view.mode, mode_style)]
        countdown = Countdown(None, label="left ", idle="no lease")
        if lease is None:
            who += [("\nholder ", "dim"), "nobody yet"]
        else:
            who += [(" gen ", "dim"), (str(lease.gen), "bold"), ("\nholder ", "dim"), terminal_safe(lease.holder)]
            if lease.is_live(now):
                who.append((" (you)" if lease.holder == view.holder else " (other)", "dim"))
            left = max(0, lease.until - now)
            countdown = Countdown(left, max(view.ttl, left, 1), label="left ", done="lapsed")
        show(self.query_one("#lease-who", Static), Content.assemble(*who))
        self.query_one(CountdownBar).countdown = countdown
        fencing: list[Part] = [
            ("takeovers ", "dim"), (str(data.takeovers), "bold"),
            ("\nrefused finishes ", "dim"), (str(data.refused), "$text-error bold" if data.refused else "bold"),
        ]
        for refusal in data.recent_refusals[:1]:
            ago = human_span(now - refusal.at)
            fencing.append(("\n↳ " + terminal_safe(f"{refusal.holder} gen {refusal.gen}, {ago} ago: {refusal.reason}"),
                            "dim"))
        show(self.query_one("#lease-fencing", Static), Content.assemble(*fencing))
        agent = data.agent
        words = "ready" if agent is None else agent_in_words(agent.state, agent.reason, agent.until, now, sep="")
        agent_style = {"ready": "", "waiting": "$text-warning", "paused": "$text-error bold"}
        state = "ready" if agent is None else agent.state
        show(self.query_one("#lease-agent", Static),
            Content.assemble(("agent ", "dim"), (words, agent_style.get(state, ""))))
