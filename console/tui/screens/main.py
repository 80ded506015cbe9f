"""The console's main screen: the live panes laid out, and the keys that act on them.

The app (console/tui/app.py) runs the engine and decides when the panes are read; this screen holds what the
owner presses on the main screen and routes each key to the pane that does it, or opens the screen it names (each
of those imported when first opened: the first frame shows none of them). The app keeps the keys that work on
every screen: help (f1 / ?) and quit (q, ctrl+q).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol
from zoneinfo import ZoneInfo

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen

from console.tui.demo import DEMO_ACTIONS, InjectControls
from console.tui.detail import read_detail, read_neighbour
from console.tui.finding import read_message
from console.tui.log_lines import LogLines
from console.tui.panes import LivePane, PaneHost
from console.tui.read_only import MAIN_SCREEN_WRITES, READ_ONLY_FLASH
from console.tui.textual_8_2 import bindings_by_key, keymap, normalized_keys
from console.tui.undo import undo_last
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.console_footer import ConsoleFooter
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.events_table import EventsTable
from console.tui.widgets.lease_pane import LeasePane
from console.tui.widgets.outbox_pane import OutboxPane

if TYPE_CHECKING:
    from console.core import OutboxMessage
    from console.tui.detail import DetailView
    from console.tui.widgets.log_pane import LogPane


class MainHost(PaneHost, Protocol):
    """The console as its main screen sees it: what the panes see, and how it was started."""

    demo: bool  # --demo: the test keys are offered
    read_only: bool  # --read-only: no key that writes is offered
    deterministic: bool  # tests and snapshots: no blinking cursor
    inbox_label: str | None
    injector: InjectControls

    def panes_mounted(self) -> None:
        """The panes are there: read them for the first frame, then start the engine."""
        ...


class MainScreen(Screen[None]):
    # The footer shows the keys a newcomer needs first; f1 (or ?) lists the rest with what each does.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "inject", "Inject", id="console.inject", tooltip="store an event typed in a form"),
        Binding("y", "answer('yes')", "Yes", id="console.approve", tooltip="answer the highlighted approval yes"),
        Binding("n", "answer('no')", "No", id="console.decline", tooltip="answer the highlighted approval no"),
        Binding("r", "retry", "Retry", id="console.retry",
                tooltip="retry the marked events (or the selected one) if dead or discarded"),
        Binding("R", "retry_all", "Retry all", id="console.retry_all", show=False,
                tooltip="retry every dead event the filter shows (asks first)"),
        Binding("f", "cycle_status", "Filter", id="console.filter_status", tooltip="cycle the status filter"),
        Binding("s", "cycle_source", "Source", id="console.filter_source", show=False,
                tooltip="cycle the source filter"),
        Binding("slash", "search", "Find", id="console.search",
                tooltip="find events and outbox messages by source, id, payload text or error"),
        Binding("S", "sort", "Sort", id="console.sort", show=False,
                tooltip="sort the whole inbox: newest or oldest first, by status, by source (or click a header)"),
        Binding("F", "pick_filter", "Pick filter", id="console.filter_pick", show=False,
                tooltip="pick the status or source filter from a list"),
        Binding("u,ctrl+z", "undo", "Undo", id="console.undo", show=False,
                tooltip="take back this console's last discard, forgotten note or deleted timer"),
        Binding("D,delete", "discard", "Discard", id="console.discard", show=False,
                tooltip="discard the marked events (or the selected one): kept for the record, never run"),
        Binding("o", "outbox_messages", "Outbox", id="console.outbox_messages", show=False,
                tooltip="the newest outbox messages, each openable in full"),
        Binding("b", "budget", "Budget", id="console.budget", show=False,
                tooltip="set the daily and monthly budgets for model calls"),
        Binding("t", "timers", "Timers", id="console.timers", show=False,
                tooltip="the timers: next fire, catch-up policy; pause, resume or run one now"),
        Binding("dollar_sign", "spend", "Spend", id="console.spend", show=False,
                tooltip="the spend per day over 30 days, per model, against the daily budget"),
        Binding("m", "notes", "Notes", id="console.notes", show=False,
                tooltip="the agent's notes, each with where it came from"),
        Binding("x", "stall", "Stall", id="console.stall",
                tooltip="stop (or resume) renewing the lease: another console takes over"),
        Binding("c", "quick_chat", "Chat", id="console.quick_chat", show=False, tooltip="inject a chat message"),
        Binding("p", "quick_poison", "Poison", id="console.quick_poison", show=False,
                tooltip="inject an event that fails every run and goes dead"),
        Binding("d", "quick_redeliver", "Redeliver", id="console.quick_redeliver", show=False,
                tooltip="the last event again: refused as a duplicate"),
        Binding("a", "quick_approval", "Needs approval", id="console.quick_approval", show=False,
                tooltip='chat "refund order 881": the agent asks first'),
        Binding("z", "zoom", "Zoom", id="console.zoom", show=False,
                tooltip="the focused pane fills the screen; z again puts it back"),
        Binding("L", "log_pane", "Log", id="console.log", show=False,
                tooltip="the engine's log lines, live, under the events; L again hides them"),
    ]

    def __init__(self, console: MainHost, *, classes: str = "") -> None:
        super().__init__(id="_default", classes=classes)
        self.console = console
        self.panes: dict[str, LivePane] = {}  # by widget id (PANES), filled by compose
        self.header: ConsoleHeader | None = None
        self.lease: LeasePane | None = None
        self.log_lines = LogLines(console.clock.now, ZoneInfo(console.settings.timezone))
        self.log_pane: LogPane | None = None  # mounted the first time L is pressed

    def compose(self) -> ComposeResult:
        console = self.console
        header = ConsoleHeader(console, self._inbox_label(), console.engine.agent_name, id="header")
        events, lease = EventsPane(console, id="events"), LeasePane(console, id="lease")
        approvals, outbox = ApprovalsPane(console, id="approvals"), OutboxPane(console, id="outbox")
        self.header, self.lease = header, lease
        self.panes = {"events": events, "lease": lease, "approvals": approvals, "outbox": outbox, "header": header}
        yield header
        yield events
        with Horizontal(id="bottom"):
            yield lease
            yield approvals
            yield outbox
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.query_one(EventsTable).focus()
        self.log_lines.attach(self._new_log_lines)  # before the engine starts: its first lines are kept too
        self.console.panes_mounted()

    def on_unmount(self) -> None:
        self.log_lines.detach()

    def _new_log_lines(self, lines: list[str]) -> None:
        if self.log_pane is not None:
            self.log_pane.add_lines(lines)

    def _inbox_label(self) -> str:
        settings = self.console.settings
        if self.console.inbox_label is not None:
            return self.console.inbox_label
        if isinstance(settings.db, str):
            return settings.db  # a PostgreSQL URL (it never carries a password)
        with contextlib.suppress(ValueError):
            return "~/" + str(settings.db.relative_to(Path.home()))
        return str(settings.db)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The test keys exist only in `--demo` (hidden from the footer, the help panel and the palette); in
        --read-only no key that writes is offered."""
        if self.console.read_only and action in MAIN_SCREEN_WRITES:
            return False
        return self.console.demo or action not in DEMO_ACTIONS

    def on_key(self, event: events.Key) -> None:
        """--read-only: a key that would write answers with a short flash rather than with nothing (the footer
        still offers none of them). The key reaches the screen before the bindings are looked up."""
        if not self.console.read_only:
            return
        remapped = keymap(self.app)
        for binding in self.BINDINGS:
            if not isinstance(binding, Binding) or binding.action.split("(")[0] not in MAIN_SCREEN_WRITES:
                continue
            if binding.action in DEMO_ACTIONS and not self.console.demo:
                continue  # not a key of this console at all
            keys = normalized_keys(remapped.get(binding.id or "", binding.key)).split(",")
            if event.key in keys:
                event.stop()
                event.prevent_default()
                self.console.toast(READ_ONLY_FLASH, title="Read-only", severity="warning", timeout=2)
                return

    def key_for(self, binding_id: str) -> str | None:
        """The key that runs a binding as the footer shows it, after `[keys]` remaps; None when it is not
        available here (a demo key outside the demo). The app's own keys (help, quit) are looked up too."""
        for node in (self, self.app):
            for bindings in bindings_by_key(node).values():
                for binding in bindings:
                    if binding.id != binding_id:
                        continue
                    if node.check_action(binding.action.split("(")[0], ()) is False:
                        return None
                    key = keymap(self.app).get(binding_id, binding.key).split(",")[0].strip()
                    return self.app.get_key_display(binding.with_key(key, key_display=None))
        return None

    def relabel(self, binding_id: str, description: str) -> None:
        """A binding's footer label changed in place (Textual has no public call for it); remaps still apply,
        as they are looked up by id."""
        by_key = bindings_by_key(self)
        for key, bindings in by_key.items():
            by_key[key] = [
                replace(b, description=description) if b.id == binding_id else b for b in bindings]
        self.refresh_bindings()

    # --- actions --------------------------------------------------------------------------------
    @on(EventsTable.RowSelected)
    async def _row_selected(self, message: EventsTable.RowSelected) -> None:
        if isinstance(message.data_table, EventsTable):
            await self.action_detail()

    async def action_detail(self) -> None:
        event = self.query_one(EventsPane).selected_event()
        if event is None:
            self.notify("No event selected", severity="warning")
            return
        await self.open_detail(event.id)

    async def open_detail(self, event_id: int) -> None:
        console = self.console
        zone = ZoneInfo(console.settings.timezone)
        events = self.query_one(EventsPane)

        async def load(event_id: int) -> DetailView:
            return await console.read(read_detail(event_id, now=console.clock.now(), holder=console.engine.holder,
                                                  mode=console.engine.mode, zone=zone,
                                                  resume_key=self.key_for("console.stall")))

        async def neighbour(event_id: int, older: bool) -> int | None:
            return await console.read(read_neighbour(event_id, events.filter, older=older))

        from console.tui.screens.detail import DetailHost, DetailScreen

        host = DetailHost(load, neighbour, events.retry_event, self.query_one(ApprovalsPane).answer,
                          events.restore_event, self.open_timeline)
        await self.app.push_screen(DetailScreen(await load(event_id), host, zone))

    async def open_timeline(self, event_id: int) -> None:
        from console.tui.screens.timeline import TimelineScreen

        console = self.console
        await self.app.push_screen(TimelineScreen(event_id, console.read, console.clock,
                                                  ZoneInfo(console.settings.timezone)))

    async def open_message(self, message_id: int) -> None:
        console = self.console
        message = await console.read(read_message(message_id))
        if message is None:
            self.notify(f"Outbox message {message_id} is gone (pruned)", severity="warning")
            return
        now = console.clock.now()
        goes_out_at = await console.read(lambda store: store.next_send_at(now=now))
        from console.tui.screens.message import MessageScreen

        async def reread() -> tuple[OutboxMessage | None, int | None, int]:
            now = console.clock.now()
            return await console.read(lambda store: (store.outbox_message(message_id), store.next_send_at(now=now),
                                                     now))

        await self.app.push_screen(MessageScreen(message, now, ZoneInfo(console.settings.timezone), goes_out_at,
                                                send_now=self.query_one(OutboxPane).send_now, reread=reread))

    async def action_search(self, start_in_outbox: bool = False) -> None:
        from console.tui.screens.search import SearchScreen

        console = self.console
        await self.app.push_screen(SearchScreen(console.read, self.query_one(EventsPane).filter, self.open_detail,
                                               self.open_message, now=console.clock.now(),
                                               start_in_outbox=start_in_outbox))

    async def action_outbox_messages(self) -> None:
        await self.action_search(start_in_outbox=True)

    async def action_inject(self) -> None:
        await self.app.push_screen(await self.console.injector.form(blink=not self.console.deterministic))

    async def action_quick_chat(self) -> None:
        await self.console.injector.quick_chat()

    async def action_quick_poison(self) -> None:
        await self.console.injector.quick_poison()

    async def action_quick_approval(self) -> None:
        await self.console.injector.quick_approval()

    async def action_quick_redeliver(self) -> None:
        await self.console.injector.redeliver()

    async def action_answer(self, answer: str) -> None:
        await self.query_one(ApprovalsPane).answer_selected(answer)

    async def action_retry(self) -> None:
        await self.query_one(EventsPane).retry()

    async def action_retry_all(self) -> None:
        await self.query_one(EventsPane).retry_all()

    async def action_discard(self) -> None:
        await self.query_one(EventsPane).discard()

    async def action_cycle_status(self) -> None:
        await self.query_one(EventsPane).cycle_status()

    async def action_cycle_source(self) -> None:
        await self.query_one(EventsPane).cycle_source()

    async def action_pick_filter(self) -> None:
        await self.query_one(EventsPane).pick_filter()

    async def action_sort(self, order: str = "") -> None:
        await self.query_one(EventsPane).sort(order)

    async def action_budget(self) -> None:
        await self.query_one(ConsoleHeader).edit_budgets()

    async def action_timers(self) -> None:
        from console.tui.screens.timers import TimersScreen

        console = self.console
        await self.app.push_screen(TimersScreen(console.read, console.engine.write, console.clock,
                                               ZoneInfo(console.settings.timezone), undo=console.undo))

    async def action_spend(self) -> None:
        from console.tui.screens.spend import SpendScreen

        console = self.console
        await self.app.push_screen(SpendScreen(console.read, console.clock.now, console.settings.budget_defaults()))

    async def action_notes(self) -> None:
        from console.tui.screens.notes import NotesScreen

        await self.app.push_screen(NotesScreen(self.console.read, self.console.engine.write, undo=self.console.undo))

    async def action_undo(self) -> None:
        """u: the last undoable action of this console taken back (tui/undo.py)."""
        await undo_last(self.console.undo, self.console.toast)

    def action_zoom(self) -> None:
        """z: the focused pane fills the screen (Textual's maximize, of the pane around the focused table); z again
        puts it back."""
        if self.maximized is not None:
            self.minimize()
        elif self.focused is not None and not self.maximize(self.focused):
            self.notify("This pane cannot be zoomed", severity="warning", timeout=2)

    async def action_log_pane(self) -> None:
        """L: the log pane, shown with every line kept so far and focused; L again hides it."""
        from textual.widgets import Log

        from console.tui.widgets.log_pane import LogPane  # the first frame has no log pane

        pane = self.log_pane
        if pane is None:
            pane = self.log_pane = LogPane(lambda: list(self.log_lines.lines), id="log")
            await self.mount(pane, before="#bottom")
        elif pane.display:
            pane.display = False
            if self.maximized is pane:
                self.minimize()
            self.query_one(EventsTable).focus()
            return
        else:
            pane.display = True
            pane.show_kept()
        pane.query_one(Log).focus()

    def action_stall(self) -> None:
        self.query_one(LeasePane).stall()
