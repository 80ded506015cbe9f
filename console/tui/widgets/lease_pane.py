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

from console.core.tool_health import sandbox_words
from console.textsafe import terminal_safe
from console.timefmt import agent_in_words
from console.tui.detail import human_span
from console.tui.panes import PaneHost
from console.tui.read_order import ReadOrder
from console.tui.reads import LeaseView, read_lease
from console.tui.render import show
from console.tui.widgets.countdown_bar import Countdown, CountdownBar

Part = str | tuple[str, str]
Said = tuple[str, str, SeverityLevel]
RENEWED_STEP = 10  # seconds: the steps the countdown of a lease this console holds and renews moves in
# The engine's modes (console.runtime.host.Mode), as its "lease" notices name them.
MODES = ("stopped", "starting", "active", "standby", "stalled", "halted", "watching")


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
    """The lease pane's line for the MCP servers that need a word ("tools: shop down — SHOP_TOKEN not set —
    retrying; gh refused 2 connections: evil.example:443; notes runs bare (sandbox = false)"); None while every
    server is up in its sandbox with nothing refused (or none was started yet)."""
    said = []
    for tool in tools:
        if tool["state"] == "down":
            said.append(f"{tool['server']} down — {tool['reason']} — retrying")
        elif tool["state"] == "starting":
            said.append(f"{tool['server']} starting")
        said += sandbox_words(tool)
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

    def left_shown(self, now: int) -> int | None:
        """The seconds left the countdown shows at `now` (None: no lease). To the second, except on a lease this
        console holds and renews (active) while more than half its TTL is left: the worker renews it every third
        of the TTL, so its seconds only say how long ago that was, and it counts down in steps of RENEWED_STEP
        (rounded down: never more time than there is; under one step, to the second: a short lease_ttl never
        reads 0s while renewed). Below half its TTL a renewal is late, and a lease held by
        another worker, or by this one stalled, lapses at the end of it: their seconds matter."""
        lease = self.data.lease
        if lease is None:
            return None
        left = max(0, lease.until - now)
        if self.mode == "active" and lease.holder == self.holder and left > self.ttl // 2 and left >= RENEWED_STEP:
            return left - left % RENEWED_STEP
        return left

    def moving(self, now: int) -> tuple[object, ...]:
        """Everything the pane shows that moves with the clock, as it reads at `now`."""
        lease, agent = self.data.lease, self.data.agent
        return (self.left_shown(now), lease is not None and lease.is_live(now),
                [human_span(now - refusal.at) for refusal in self.data.recent_refusals[:1]],
                None if agent is None else agent_in_words(agent.state, agent.reason, agent.until, now, sep=""))

    def at(self, now: int) -> LeasePaneView:
        """The same facts seen at a later second, without reading the file: the same view while nothing the pane
        shows moves (a renewed lease's countdown in its steps), so nothing is redrawn."""
        if self.moving(now) == self.moving(self.now):
            return self
        return replace(self, data=replace(self.data, now=now))

    def counts_down(self) -> bool:
        lease, agent = self.data.lease, self.data.agent
        return (lease is not None and lease.until >= self.now) or (agent is not None and agent.until is not None)

    def stale(self, now: int) -> bool:
        """The agent's wait or pause was due to end by now: its state is read again."""
        agent = self.data.agent
        return agent is not None and agent.until is not None and agent.until <= now


class LeasePane(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms it (MainScreen.action_zoom)
    HELP = """
## Lease
One worker at a time owns the inbox: the lease's holder and generation, the time left before it lapses
unless renewed, takeovers, and late finishes refused because a newer generation took over (fencing).
**x** stalls this console's worker (it stops renewing, so another console or `agent-console run` takes
over) and resumes it. A lease this console holds and renews counts down in steps of ten seconds (it is renewed
every third of its TTL); below half its TTL (a renewal late), stalled, or held by another worker, to the second.
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

    def __init__(self, host: PaneHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.border_title = "Lease"
        self._role = "starting"  # the engine's mode as last told (role_change_words)
        self._role_change: tuple[str, str] | None = None  # a change of role not said yet
        self._tools_down: set[str] = set()  # MCP servers told down (_say_tools_down)
        self.stalled = False  # x: this console's worker stopped renewing (or taking) the lease
        self._held_gen: int | None = None  # the generation this console held the lease under, as last read
        self._reads = ReadOrder()

    async def reload(self) -> None:
        host = self.host
        ticket = self._reads.begin()
        data = await host.read(read_lease(host.clock.now()))
        if not self._reads.may_show(ticket):
            return  # a read begun after this one has shown newer facts
        self.view = LeasePaneView(data, host.engine.mode, host.engine.holder, host.settings.lease_ttl)
        told = self._say_role_change(None if data.lease is None else data.lease.gen)
        self._say_lease_lost(data, host.engine.holder, host.engine.mode, told)
        self._say_tools_down(data.tools)

    def _say_lease_lost(self, data: LeaseView, own: str, mode: str, told: str | None) -> None:
        """A toast when another worker took the lease this console held, naming it and its generation, whatever
        this console's mode (a stalled console stays stalled: no change of role says it)."""
        lease = data.lease
        if lease is not None and lease.holder == own:
            self._held_gen = lease.gen
            return
        if lease is None or self._held_gen is None or lease.gen <= self._held_gen:
            return
        self._held_gen = None
        if told == "Taken over":
            return  # the change of role said it, with the generation
        self.notify(terminal_safe(f"{lease.holder} holds the lease now (generation {lease.gen}); this console is "
                                  f"{mode}"), title="Taken over", severity="warning", timeout=8, markup=False)

    def tick(self, now: int) -> None:
        if self.view is None:
            return
        if self.view.stale(now):
            self.host.mark("lease")
        elif self.view.counts_down():
            self.view = self.view.at(now)

    def stall(self) -> None:
        """x: this console's worker stops renewing its lease (another console or `agent-console run` takes
        over when it lapses), or takes part again."""
        host = self.host
        was = host.engine.mode
        self.stalled = not self.stalled
        host.engine.stall(self.stalled)
        host.relabel("console.stall", "Resume" if self.stalled else "Stall")
        host.mark("lease", "header")
        title, words = stall_words(self.stalled, was, host.key_for("console.stall"))
        self.notify(words, title=title, severity="warning" if self.stalled else "information")

    def role_told(self, mode: str) -> None:
        """Each of the engine's mode changes as it is told (a read may come after two of them): one that is a
        change of role is said once the lease is read again, with the lease's generation."""
        if role_change_words(self._role, mode, None) is not None:
            self._role_change = (self._role, mode)
        self._role = mode

    def _say_role_change(self, gen: int | None) -> str | None:
        """A toast when this console's role changed by itself (standby → active, taken over), with the
        generation; the stall key's own toasts say what it did. Returns the toast's title, if one was shown."""
        if self._role_change is None:
            return None
        said = role_change_words(*self._role_change, gen)
        self._role_change = None
        if said is None:
            return None
        title, words, severity = said
        self.notify(words, title=title, severity=severity, timeout=8)
        return title

    def _say_tools_down(self, tools: list[dict[str, Any]]) -> None:
        """One toast when an MCP server goes down (the pane keeps saying it while it stays down)."""
        down = {tool["server"]: tool["reason"] for tool in tools if tool["state"] == "down"}
        for server in sorted(set(down) - self._tools_down):
            self.notify(terminal_safe(f"{server}: {down[server]} — retrying; its tools are unavailable"),
                        title="Tool server down", severity="error", timeout=10)
        self._tools_down = set(down)

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
            left = view.left_shown(now) or 0
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
