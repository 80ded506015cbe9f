"""The lease pane: who owns the inbox, for how long, and what fencing has refused."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.widgets import Static

from console.textsafe import terminal_safe
from console.timefmt import agent_in_words
from console.tui.detail import human_span
from console.tui.reads import LeaseView
from console.tui.render import show
from console.tui.widgets.countdown_bar import Countdown, CountdownBar

Part = str | tuple[str, str]
Said = tuple[str, str, SeverityLevel]
# The engine's modes (console.runtime.host.Mode), as its "lease" notices name them.
MODES = ("stopped", "starting", "active", "standby", "stalled", "halted")


def role_change_words(before: str, after: str, gen: int | None) -> Said | None:
    """(title, words, severity) of a toast when this console's role changed by itself: it took the lease
    over, or another worker took it; None for its start, its stop and the stall key's own changes."""
    of = "" if gen is None else f" (generation {gen})"
    if before in ("standby", "halted") and after == "active":
        return ("Now active", f"This console holds the lease{of}: it runs the inbox's events now", "information")
    if before in ("active", "stalled") and after == "standby":
        return ("Taken over" if before == "active" else "Standby", f"Another worker holds the lease{of}: this "
                "console is standby and takes over if that lease lapses", "warning")
    if after == "halted" and before not in ("starting", "halted"):
        return ("Halted", "This console's worker stopped taking events (the lease pane says why)", "error")
    return None


def stall_words(stalled: bool, mode: str, key: str | None) -> tuple[str, str]:
    """(title, words) for the stall key, worded for the role this console had when it was pressed."""
    again = f" ({key} resumes it)" if key else ""
    if stalled and mode == "active":
        return ("Worker stalled", "This console stops renewing its lease; another console or `agent-console "
                f"run` takes over when it lapses{again}")
    if stalled:
        return ("Worker stalled", f"This console is {mode} and now will not take over when the lease lapses"
                f"{again}")
    if mode == "stalled":
        return ("Worker resumed", "This console renews its lease again if it still holds it, or takes over "
                "when the holder's lease lapses")
    return ("Worker resumed", "This console takes part again")


def tools_down_words(tools: list[dict[str, Any]]) -> str | None:
    """The lease pane's line for the MCP servers that are not up ("tools: shop down — SHOP_TOKEN not set —
    retrying"); None while every server is up (or none was started yet)."""
    said = [f"{tool['server']} down — {tool['reason']} — retrying" if tool["state"] == "down"
            else f"{tool['server']} starting" for tool in tools if tool["state"] != "up"]
    return "tools: " + "; ".join(said) if said else None


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
    LeasePane > #lease-tools {
        height: auto;
        display: none;
    }
    LeasePane > #lease-tools.-down {
        display: block;
    }
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
        yield Static(id="lease-tools")

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
        tools = self.query_one("#lease-tools", Static)
        down = tools_down_words(data.tools)
        tools.set_class(down is not None, "-down")
        show(tools, Content.assemble((terminal_safe(down or ""), "$text-error bold")))
