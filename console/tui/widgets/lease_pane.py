"""The lease pane: who owns the inbox, for how long, and what fencing has refused."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Label, ProgressBar, Static

from console.textsafe import terminal_safe
from console.timefmt import agent_in_words
from console.tui.detail import human_span
from console.tui.reads import LeaseView

# (mode, holder, lease ttl) of this console's own engine
EngineInfo = Callable[[], tuple[str, str, int]]
Part = str | tuple[str, str]


class LeasePane(Vertical):
    def __init__(self, engine_info: EngineInfo, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.engine_info = engine_info
        self.border_title = "Lease"
        self.view: LeaseView | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="lease-who")
        with Horizontal(id="lease-left"):
            yield Label("left ", id="lease-left-label")
            yield ProgressBar(total=1, show_eta=False, show_percentage=False, id="lease-bar")
            yield Label("", id="lease-left-time")
        yield Static(id="lease-fencing")
        yield Static(id="lease-agent")

    def show(self, view: LeaseView) -> None:
        self.view = view
        mode, holder, ttl = self.engine_info()
        lease = view.lease
        mode_style = {"active": "$text-success bold", "stalled": "$text-error bold"}.get(mode, "$text-warning bold")
        who: list[Part] = [("mode ", "dim"), (mode, mode_style)]
        left = 0
        if lease is None:
            who += [("\nholder ", "dim"), "nobody yet"]
        else:
            who += [(" gen ", "dim"), (str(lease.gen), "bold"), ("\nholder ", "dim"), terminal_safe(lease.holder)]
            if lease.is_live(view.now):
                who.append((" (you)" if lease.holder == holder else " (other)", "dim"))
            left = max(0, lease.until - view.now)
        self.query_one("#lease-who", Static).update(Content.assemble(*who))
        self.query_one("#lease-bar", ProgressBar).update(total=max(ttl, left, 1), progress=left)
        lapsed = lease is not None and not lease.is_live(view.now)
        self.query_one("#lease-left-time", Label).update(" lapsed" if lapsed else f" {human_span(left)}")
        fencing: list[Part] = [
            ("takeovers ", "dim"), (str(view.takeovers), "bold"),
            ("\nrefused finishes ", "dim"), (str(view.refused), "$text-error bold" if view.refused else "bold"),
        ]
        for refusal in view.recent_refusals[:1]:
            ago = human_span(view.now - refusal.at)
            fencing.append(("\n↳ " + terminal_safe(f"{refusal.holder} gen {refusal.gen}, {ago} ago: {refusal.reason}"),
                            "dim"))
        self.query_one("#lease-fencing", Static).update(Content.assemble(*fencing))
        agent = view.agent
        words = "ready" if agent is None else agent_in_words(agent.state, agent.reason, agent.until, view.now, sep="")
        agent_style = {"ready": "", "waiting": "$text-warning", "paused": "$text-error bold"}
        state = "ready" if agent is None else agent.state
        self.query_one("#lease-agent", Static).update(
            Content.assemble(("agent ", "dim"), (words, agent_style.get(state, ""))))
