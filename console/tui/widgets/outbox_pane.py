"""The outbox pane: what is held (urgent marked), what was sent, when the next send is due, what failed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from console.textsafe import terminal_safe
from console.timefmt import coarse_span
from console.tui.detail import human_span
from console.tui.panes import PaneHost
from console.tui.read_only import READ_ONLY_FLASH, read_only
from console.tui.read_order import ReadOrder
from console.tui.reads import OutboxView, read_outbox
from console.tui.render import show
from console.tui.widgets.countdown_bar import Countdown, CountdownBar, quantized

Part = str | tuple[str, str]
NBSP = "\u00a0"


def one_line(text: str, width: int = 60) -> str:
    flat = terminal_safe(" ".join(text.split()))  # a reply may quote the sender's text
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def telegram_line(info: dict[str, Any] | None) -> list[Part]:
    """The Telegram channel, once it is in use: its state (and why, when it is not ok), paired chats, and the
    messages refused from chats that are not paired."""
    if not info or (info["state"] == "off" and not info["paired_chats"] and not info["refused_messages"]):
        return []
    state = str(info["state"])
    line: list[Part] = [("telegram ", "dim"), (state, "$text-success" if state == "ok" else "$text-warning bold")]
    if info.get("reason"):
        line.append((f" ({one_line(str(info['reason']), 50)})", "$text-warning"))
    line += [(f" · paired{NBSP}", "dim"), (str(len(info["paired_chats"])), "bold")]
    if info["refused_messages"]:
        line += [(f" · refused{NBSP}", "dim"), (str(info["refused_messages"]), "$text-warning bold")]
    return [*line, "\n"]


def email_line(info: dict[str, Any] | None) -> list[Part]:
    """The [email] source, once it is in use: its state (and why, when it is not ok) and the last UID stored."""
    if not info or (info["state"] == "off" and info.get("last_uid") is None):
        return []
    state = str(info["state"])
    line: list[Part] = [("email ", "dim"), (state, "$text-success" if state == "ok" else "$text-warning bold")]
    if info.get("reason"):
        line.append((f" ({one_line(str(info['reason']), 50)})", "$text-warning"))
    if info.get("last_uid") is not None:
        line += [(f" · last UID{NBSP}", "dim"), (str(info["last_uid"]), "bold")]
    return [*line, "\n"]


@dataclass(frozen=True)
class OutboxPaneView:
    """The outbox as read, and the send gap the countdown is measured against."""

    data: OutboxView
    gap: int

    @property
    def now(self) -> int:
        return self.data.now

    def at(self, now: int) -> OutboxPaneView:
        """The same outbox seen at a later second, without reading the file: the same view while nothing it
        shows moves (ages and countdowns past ten minutes count whole minutes), so nothing is redrawn."""
        if self.clock_texts(now) == self.clock_texts(self.now):
            return self
        return replace(self, data=replace(self.data, now=now))

    def countdown(self, now: int) -> Countdown:
        """The next send's countdown at `now`."""
        if self.data.next_send_at is None:
            return Countdown(None, idle="nothing queued")
        wait = max(0, self.data.next_send_at - now)
        return Countdown(quantized(wait), max(self.gap, wait, 1), label="next ", prefix="in ")

    def clock_texts(self, now: int) -> tuple[object, ...]:
        """What the pane shows that moves with the clock, as watch_view draws it at `now`."""
        data = self.data
        retries = tuple(human_span((message.next_try_at or now) - now) for message in data.troubled[:2])
        ages = tuple(coarse_span(now - (message.sent_at or now)) for message in data.sent)
        return (self.countdown(now), *retries, *ages)

    def counts_down(self) -> bool:
        """Something on screen moves with the clock: the next send's countdown, a retry's, or a send's age."""
        data = self.data
        return data.next_send_at is not None or bool(data.troubled) or bool(data.sent)


class OutboxPane(Vertical, can_focus=True):
    ALLOW_MAXIMIZE = True  # z zooms it (MainScreen.action_zoom)
    HELP = """
## Outbox
What the agent says to you: at most one send per gap (the countdown), urgent messages (**!**) at once.
A failed send is retried, never dropped. Messages held over the hourly cap (**⏸**) wait for you: **R** releases
them into the outbox (it asks first).
"""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("R", "release_held", "Release held", id="outbox.release_held",
                tooltip="send the messages held over the hourly cap (max_messages_per_hour); asks first"),
    ]

    DEFAULT_CSS = """
    OutboxPane > #outbox-lines {
        height: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    /* wraps in a narrow pane rather than lose its end (the failed count) */
    OutboxPane > #outbox-counts {
        height: auto;
    }
    """

    view: reactive[OutboxPaneView | None] = reactive(None, init=False, repaint=False)

    def __init__(self, host: PaneHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.border_title = "Outbox"
        self._reads = ReadOrder()

    async def reload(self) -> None:
        host = self.host
        ticket = self._reads.begin()
        outbox = await host.read(read_outbox(host.clock.now()))
        if self._reads.may_show(ticket):  # else a read begun after this one has shown newer facts
            self.view = OutboxPaneView(outbox, host.settings.outbox_gap)

    def tick(self, now: int) -> None:
        if self.view is not None and self.view.counts_down():
            self.view = self.view.at(now)

    async def send_now(self, message_id: int) -> bool:
        """An outbox message's screen's send now: a message the gap holds moves to the urgent lane."""
        now = self.host.clock.now()
        moved = await self.host.engine.write(lambda store: store.send_now(message_id, now=now))
        self.host.mark("outbox")
        return moved

    async def action_release_held(self) -> None:
        """R: every held message into the outbox, oldest first, after a yes with the count."""
        if read_only(self):
            self.host.toast(READ_ONLY_FLASH, title="Read-only", severity="warning", timeout=2)
            return
        held = await self.host.read(lambda store: store.held_count())
        if not held:
            self.host.toast("Nothing is held over the hourly cap", severity="warning")
            return
        from console.tui.screens.confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(
            f"Release {held} held message{'s' if held != 1 else ''}? They go out through the outbox in the order "
            "they were held; the hourly cap does not apply to what you release.", yes_label=f"Release {held}"),
            self._release_confirmed)

    async def _release_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed:
            return
        now = self.host.clock.now()
        released = await self.host.engine.write(lambda store: store.release_held(now=now))
        self.host.mark("outbox", "header")
        self.host.toast(f"{len(released)} held message{'s' if len(released) != 1 else ''} released into the outbox",
                        title="Released")

    def compose(self) -> ComposeResult:
        yield Static(id="outbox-counts")
        yield CountdownBar(id="outbox-next")
        yield Static(id="outbox-lines")

    def watch_view(self, view: OutboxPaneView | None) -> None:
        if view is None:
            return
        data, now = view.data, view.now
        counts = data.counts
        urgent = sum(1 for m in data.queued if m.urgent)
        # Non-breaking spaces keep each label with its number when a narrow pane wraps the line.
        head: list[Part] = [
            (f"queued{NBSP}", "dim"), (str(counts["queued"]), "bold"),
            (f"{NBSP}({urgent}{NBSP}urgent)" if urgent else "", "$text-accent"),
            (f" · sent{NBSP}", "dim"), (str(counts["sent"]), "bold"),
            (f" · failed{NBSP}", "dim"), (str(counts["failed"]), "$text-error bold" if counts["failed"] else "bold"),
        ]
        if counts.get("retrying"):
            head += [(f" · retrying{NBSP}", "dim"), (str(counts["retrying"]), "$text-warning bold")]
        if counts.get("held"):  # held over max_messages_per_hour until the owner releases them
            head += [(f" · held{NBSP}", "dim"), (str(counts["held"]), "$text-warning bold")]
        show(self.query_one("#outbox-counts", Static), Content.assemble(*head))
        self.query_one(CountdownBar).countdown = view.countdown(now)
        lines: list[Part] = telegram_line(data.telegram) + email_line(data.email)
        for message in data.troubled[:2]:
            retry = f", retry in {human_span((message.next_try_at or now) - now)}" if (
                message.status != "failed") else ""
            lines += [("✗ ", "$text-error"), (one_line(f"{message.error}{retry}"), "$text-error"), "\n"]
        for held in data.held[:2]:
            lines += [("⏸ ", "$text-warning bold"), (f"held #{held.id} ", "$text-warning"), one_line(held.body), "\n"]
        for message in data.queued[:3]:
            lines += [("! " if message.urgent else "· ", "$text-accent bold" if message.urgent else "dim"),
                      one_line(message.body), "\n"]
        # The urgent lane sends out of id order: the newest send first.
        for message in sorted(data.sent, key=lambda m: m.sent_at or 0, reverse=True)[:3]:
            ago = coarse_span(now - (message.sent_at or now))
            # The body first: a narrow pane cuts the end of the line, and the channel matters least.
            lines += [("✓ ", "$text-success"), (f"{ago} ago ", "dim"), one_line(message.body),
                      (f" → {message.channel}" if message.channel else "", "dim"), "\n"]
        show(self.query_one("#outbox-lines", Static), Content.assemble(*lines[:-1]) if lines else "")
