"""The console: one screen of live panes over the inbox, driven by the runtime Engine.

The engine runs on the app's own event loop; every SQLite read happens on its reader thread
(`await engine.read(fn)`), so the screen never waits on the disk. Engine notices arrive as typed
messages and only mark panes dirty: a flush 0.1 s after the first mark re-reads each dirty pane at most
once, so a worker draining a backlog cannot flood the screen. Nothing is read while nothing changes: the
engine's watcher posts a notice on any commit to the inbox, and the once-a-second tick only redraws the
countdowns and ages from what the panes already hold.

Each pane reads, redraws and acts for itself (console/tui/panes.py: PaneHost, LivePane): the app lays them
out, holds the main screen's keys and routes each to the pane that does it, opens the screens, and decides
when the panes are read. The inject form's store and --demo's test keys are console/tui/demo.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from zoneinfo import ZoneInfo

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.driver import Driver
from textual.message import Message
from textual.notifications import Notification, Notify, SeverityLevel
from textual.screen import Screen
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from console import telemetry
from console.clock import Clock, WallClock
from console.config import ConfigError, Settings, open_inbox
from console.core import Store, StoreError
from console.demo import demo_world
from console.notices import Notice, NoticeKind
from console.textsafe import terminal_safe, terminal_safe_lines
from console.timefmt import plural
from console.tui.backend import ConsoleEngine
from console.tui.demo import DEMO_ACTIONS, InjectControls, start_demo_traffic
from console.tui.detail import read_detail, read_neighbour
from console.tui.finding import read_message
from console.tui.keys import binding_ids, key_clashes, key_rows, unknown_key_ids
from console.tui.panes import PANES, LivePane
from console.tui.read_only import MAIN_SCREEN_WRITES
from console.tui.state import ConsoleState, default_state_path
from console.tui.textual_8_2 import bindings_by_key, has_registered_themes, keymap, withdraw_toast
from console.tui.theme_files import DEFAULT_THEME, load_themes, status_variables
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.console_footer import ConsoleFooter
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.events_table import EventsTable
from console.tui.widgets.lease_pane import MODES, LeasePane
from console.tui.widgets.outbox_pane import OutboxPane

if TYPE_CHECKING:
    from textual.command import Provider

    from console.assembly import System
    from console.edges.receiver import WebhookReceiver
    from console.tui.detail import DetailView
    from console.tui.screens.detail import DetailScreen

# The modal screens (detail, search, keys, message, timers, notes, confirm, inject) and the palette's commands are
# imported when first opened: the first frame shows none of them, and their widgets (TextArea and its syntax
# highlighting among them) are a good part of the console's own import time (tests/tui/test_start_imports.py).

T = TypeVar("T")
log = logging.getLogger("agent_console.tui")

NOTICE_PANES: dict[NoticeKind, tuple[str, ...]] = {
    "events": PANES,
    "run": ("events", "lease", "outbox", "header"),
    "lease": ("lease", "header", "events"),
    "approvals": ("approvals", "events", "header"),  # the header counts the waiting ones
    "outbox": ("outbox",),
    "timers": ("events",),
    "log": ("header", "outbox"),  # a phone or mail channel that stopped is told through the log: its banner
}
FLUSH_SECONDS = 0.1  # each pane re-reads at most ten times a second
TICK_SECONDS = 1.0  # countdowns and ages move with the clock even when nothing changes: redrawn, not re-read


def screenshot_folder() -> Path:
    """The Downloads folder when this machine has one, else one of our own that is made on demand (Textual's
    default, Downloads, does not exist on a server and the screenshot was lost)."""
    import platformdirs

    downloads = Path(platformdirs.user_downloads_dir())
    if downloads.is_dir():
        return downloads
    folder = Path(platformdirs.user_state_dir("agent-console")) / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def breakpoint_class(size: int, breakpoints: Sequence[tuple[int, str]]) -> str | None:
    """The class of the largest breakpoint the size reaches (Textual's rule), None below them all."""
    reached = [(least, name) for least, name in breakpoints if size >= least]
    return max(reached)[1] if reached else None


class EngineNotice(Message):
    """A change notice from the runtime, delivered on the app's message queue."""

    def __init__(self, notice: Notice) -> None:
        super().__init__()
        self.notice = notice


def console_commands() -> type[Provider]:
    """The palette's console commands, imported when the palette first opens."""
    from console.tui.commands import ConsoleCommands

    return ConsoleCommands


class ConsoleApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "agent-console"
    COMMANDS = App.COMMANDS | {console_commands}
    BINDING_GROUP_TITLE = "Console"
    # Screen.-narrow in app.tcss; App types it as an instance attribute, so it cannot be a ClassVar here
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (20, "-tall")]  # noqa: RUF012  (Screen.-short in app.tcss)
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
        Binding("D,delete", "discard", "Discard", id="console.discard", show=False,
                tooltip="discard the marked events (or the selected one): kept for the record, never run"),
        Binding("o", "outbox_messages", "Outbox", id="console.outbox_messages", show=False,
                tooltip="the newest outbox messages, each openable in full"),
        Binding("b", "budget", "Budget", id="console.budget", show=False,
                tooltip="set the daily and monthly budgets for model calls"),
        Binding("t", "timers", "Timers", id="console.timers", show=False,
                tooltip="the timers: next fire, catch-up policy; pause, resume or run one now"),
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
        Binding("f1,question_mark", "toggle_help", "Keys", id="console.help",
                tooltip="every key on a full screen, filtered as you type"),
        Binding("q", "request_quit", "Quit", id="console.quit_asking",
                tooltip="quit; asks first while a run is in progress"),
        Binding("ctrl+q", "quit", "Quit", id="console.quit", priority=True, show=False,
                tooltip="the run finishes, the lease is released"),
    ]

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        system: System | None = None,
        holder: str | None = None,
        deterministic: bool = False,
        state_path: Path | None = None,
        user_theme_dir: Path | None = None,
        install_defaults: bool = True,
        after_start: Callable[[ConsoleApp], Any] | None = None,
        inbox_label: str | None = None,
        demo: bool = False,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.demo = demo
        self.read_only = read_only  # --read-only: a watch-only engine, and no action that writes (tui/read_only.py)
        if system is None:
            from console.assembly import assemble_console

            system = assemble_console(settings, clock=clock or WallClock(), holder=holder,
                                      install_defaults=install_defaults, read_only=read_only)
        assert system.engine is not None, "the console runs an engine"
        self.system = system  # the engine and the webhook receiver beside it, started and stopped together
        self.engine: ConsoleEngine = system.engine
        self.clock: Clock = clock or system.engine.clock
        self.deterministic = deterministic
        self.state = ConsoleState(state_path)
        self.after_start = after_start
        self.inbox_label = inbox_label
        self.started = False
        self.start_error: str | None = None
        self._collector_held = False  # the garbage collector, held off from on_load until the first frame
        self._dirty: set[str] = set()
        self._busy: set[str] = set()
        self._flush_due = False
        self._panes: dict[str, LivePane] = {}  # by widget id (PANES), filled by compose
        self._header: ConsoleHeader | None = None
        self._lease: LeasePane | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.injector = InjectControls(self)  # i, and --demo's test keys
        loaded = load_themes(user_theme_dir)
        self.console_themes = {theme.name: theme for theme in loaded.themes}
        self._theme_errors = loaded.errors
        for theme in loaded.themes:
            self.register_theme(theme)
        remembered = self.state.read().get("theme")
        for choice in (remembered, settings.theme, DEFAULT_THEME):
            if isinstance(choice, str) and choice in self.available_themes:
                self.theme = choice
                break
        if settings.keys:
            self.set_keymap(dict(settings.keys))
        # Without [keys] there is nothing to check (and the checks would import every screen to read its keys).
        self._key_problems = unknown_key_ids(dict(settings.keys), binding_ids()) if settings.keys else []
        self._key_clashes = key_clashes(keymap(self), () if demo else DEMO_ACTIONS) if settings.keys else []

    def get_default_screen(self) -> Screen[Any]:
        """The main screen, made with the breakpoint classes of the terminal's size (-wide or -narrow, -tall or
        -short). Textual sets them on the first resize, after every widget has its styles, and that change of the
        screen's classes styled all of them again (28 widgets, about a tenth of the first frame's CSS work)."""
        width, height = self.size
        classes = [breakpoint_class(width, self.HORIZONTAL_BREAKPOINTS),
                   breakpoint_class(height, self.VERTICAL_BREAKPOINTS)]
        return Screen(id="_default", classes=" ".join(name for name in classes if name is not None))

    def get_driver_class(self) -> type[Driver]:
        """Textual's own driver, except that on Linux and macOS a closed terminal cannot wedge it."""
        driver = super().get_driver_class()
        if sys.platform != "win32":
            from textual.drivers.linux_driver import LinuxDriver

            from console.tui.terminal import HangupSafeDriver

            if driver is LinuxDriver:
                return HangupSafeDriver
        return driver

    # --- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        header = ConsoleHeader(self, self._inbox_label(), self.engine.agent_name, id="header")
        events, lease = EventsPane(self, id="events"), LeasePane(self, id="lease")
        approvals, outbox = ApprovalsPane(self, id="approvals"), OutboxPane(self, id="outbox")
        self._header, self._lease = header, lease
        self._panes = {"events": events, "lease": lease, "approvals": approvals, "outbox": outbox, "header": header}
        yield header
        yield events
        with Horizontal(id="bottom"):
            yield lease
            yield approvals
            yield outbox
        yield ConsoleFooter()

    def _inbox_label(self) -> str:
        if self.inbox_label is not None:
            return self.inbox_label
        if isinstance(self.settings.db, str):
            return self.settings.db  # a PostgreSQL URL (it never carries a password)
        path = self.settings.db
        with contextlib.suppress(ValueError):
            return "~/" + str(path.relative_to(Path.home()))
        return str(path)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The test keys exist only in `--demo` (hidden from the footer, the help panel and the palette)."""
        if self.read_only and action in MAIN_SCREEN_WRITES:
            return False
        return self.demo or action not in DEMO_ACTIONS

    def key_for(self, binding_id: str) -> str | None:
        """The key that runs a binding as the footer shows it, after `[keys]` remaps; None when it is not
        available here (a demo key outside the demo)."""
        for bindings in bindings_by_key(self).values():
            for binding in bindings:
                if binding.id != binding_id:
                    continue
                if self.check_action(binding.action.split("(")[0], ()) is False:
                    return None
                key = keymap(self).get(binding_id, binding.key).split(",")[0].strip()
                return self.get_key_display(binding.with_key(key, key_display=None))
        return None

    def relabel(self, binding_id: str, description: str) -> None:
        """A binding's footer label changed in place (Textual has no public call for it); remaps still apply,
        as they are looked up by id."""
        by_key = bindings_by_key(self)
        for key, bindings in by_key.items():
            by_key[key] = [
                replace(b, description=description) if b.id == binding_id else b for b in bindings]
        self.refresh_bindings()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        theme = self.current_theme if has_registered_themes(self) else None
        return {**super().get_theme_variable_defaults(), **status_variables(theme)}

    # --- lifecycle ------------------------------------------------------------------------------
    def on_load(self) -> None:
        """Hold Python's garbage collector off until the first frame is drawn. What the start creates (the
        widgets, their styles, the panes' first views) all lives on, yet the collector walked it again and again,
        and once every object of every module loaded: about a tenth of the start's CPU time here
        (docs/performance.md, "Start to the first frame"). It runs again once the frame is on the screen."""
        if gc.isenabled():
            gc.disable()
            self._collector_held = True

    def _release_collector(self) -> None:
        if self._collector_held:
            self._collector_held = False
            gc.enable()

    async def on_mount(self) -> None:
        if not self.is_headless:
            # A closed terminal (SIGHUP), a `kill` (SIGTERM) or SIGINT quits like ctrl+q: the lease is released
            # at once instead of making the next console wait a whole TTL in standby.
            from console.assembly import on_stop_signals

            on_stop_signals(lambda: self.call_later(self.action_quit))
        if self._theme_errors:
            self.notify("\n".join(self._theme_errors), title="Theme file skipped", severity="warning", timeout=10)
        if self._key_problems:
            for problem in self._key_problems:
                log.warning("%s", problem)
            self.notify("\n".join(self._key_problems), title="Config: [keys] entries ignored", severity="warning",
                        timeout=15)
        if self._key_clashes:
            for clash in self._key_clashes:
                log.warning("%s", clash)
            self.notify("\n".join(self._key_clashes), title="Config: [keys] clash", severity="warning", timeout=20)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.query_one(EventsTable).focus()
        # The first frame is drawn from plain reads; the engine starts once it is on the screen, because its
        # start checks the inbox (up to START_CHECK_SECONDS on a large file) and builds the agent, whose tools'
        # libraries take about a second to import (tests/tui/test_start_imports.py).
        self.mark(*PANES)
        first_reads = self._flush_dirty(before_start=True)
        self.run_worker(self._start_engine(first_reads), group="engine", exit_on_error=False)

    async def _start_engine(self, first_reads: Sequence[Worker[None]] = ()) -> None:
        for read in first_reads:
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await read.wait()
        drawn = asyncio.Event()
        self.call_after_refresh(drawn.set)
        await drawn.wait()
        self._release_collector()
        try:
            await self.system.start(on_receiver_error=self._receiver_not_started, on_retry=self._start_retried)
        except (StoreError, ConfigError) as exc:
            self.start_error = str(exc)
            self.exit(return_code=2, message=str(exc))
            return
        self.started = True
        self._unsubscribe = self.engine.subscribe(self._post_notice)
        self.mark(*PANES)
        self.set_interval(TICK_SECONDS, self._tick)
        if self._header is not None:
            self._header.refresh_activity()
        self._flush_dirty()
        if self.after_start is not None:
            self.after_start(self)

    async def on_unmount(self) -> None:
        self._release_collector()  # closed before its first frame
        await self.shutdown_engine()

    def _start_retried(self, line: str) -> None:
        """A passing fault at start (the inbox's server unreachable, its lock busy): the start is tried again."""
        self.notify(line, title="Not started yet", severity="warning", timeout=10)

    def _receiver_not_started(self, exc: Exception) -> None:
        """The webhook receiver runs inside the console when the config enables it (not --read-only: it stores);
        one that cannot start is told here, and the console runs without it."""
        self.notify(str(exc), title="Webhook receiver not started", severity="error", timeout=15)

    @property
    def receiver(self) -> WebhookReceiver | None:
        return self.system.receiver

    def receiver_summary(self) -> str | None:
        if self.receiver is None:
            return None
        counts = self.receiver.counts
        refused = sum(n for verdict, n in counts.items() if verdict not in ("stored", "duplicate", "challenge"))
        return f"hooks {self.receiver.url} · {counts['stored']} stored · {counts['duplicate']} dup · {refused} refused"

    async def shutdown_engine(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.started = False
        await self.system.stop()  # the receiver, then the engine: the run finishes, the lease is released

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every toast as plain text with control characters escaped: toasts quote source ids, approval
        actions and errors, which a sender wrote (markup from them would be read as styles and links)."""
        self.toast(message, title=title, severity=severity, timeout=timeout)

    def toast(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
              timeout: float | None = None) -> Notification:
        """notify, handing back the toast so that it can be taken away early (an approval settled elsewhere)."""
        if title == "Screenshot":  # Textual's own "Saved screenshot to [$text-success]'PATH'"
            message = message.replace("[$text-success]", "")
        notification = Notification(terminal_safe_lines(message), terminal_safe(title), severity,
                                    self.NOTIFICATION_TIMEOUT if timeout is None else timeout, markup=False)
        self.post_message(Notify(notification))
        return notification

    def untoast(self, notification: Notification) -> None:
        """Take a toast away before its time (an approval settled elsewhere); gone already is fine."""
        withdraw_toast(self, notification)

    async def action_quit(self) -> None:
        await self.shutdown_engine()  # releases the lease before the screen goes away
        self.exit()

    async def action_request_quit(self) -> None:
        """q: quit at once when idle; while this console's worker is running events, ask first."""
        running = await self._running_here()
        if not running:
            await self.action_quit()
            return
        from console.tui.screens.confirm import ConfirmScreen

        self.push_screen(ConfirmScreen(
            f"A run is in progress ({plural(running, 'event')}). Quit anyway? The run gets a few seconds to "
            "finish; what it does not finish goes back to pending for the next worker.", yes_label="Quit",
            destructive=True),
            self._quit_confirmed)

    async def _quit_confirmed(self, confirmed: bool | None) -> None:
        if confirmed:
            await self.action_quit()

    async def _running_here(self) -> int:
        """How many events this console's own worker has claimed and not finished."""
        if not self.started or self.engine.mode != "active" or self.engine.gen is None:
            return 0
        gen = self.engine.gen
        running = await self.read(lambda store: store.events(status="running", limit=self.settings.batch_cap))
        return sum(1 for event in running if event.claim_gen == gen)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot, saved where a folder exists (see screenshot_folder)."""
        if path is None:
            try:
                path = str(screenshot_folder())
            except OSError as exc:
                self.notify(f"no folder to save it in: {exc}", title="Screenshot", severity="error")
                return None
        return super().deliver_screenshot(filename, path, time_format)

    def action_toggle_help(self) -> None:
        """f1 / ?: every key on a full screen, filterable (the focused pane's few lines of help above them)."""
        from console.tui.screens.keys import KeysScreen, plain_help

        if isinstance(self.screen, KeysScreen):
            self.screen.dismiss(None)
            return
        helps = [help_text for node in (self.focused.ancestors_with_self if self.focused else ())
                 if isinstance(help_text := getattr(node, "HELP", None), str)]
        actions = [b.action.split("(")[0] for b in self.BINDINGS if isinstance(b, Binding)]
        rows = key_rows(keymap(self), None if self.demo else [a for a in actions if a not in DEMO_ACTIONS])
        self.push_screen(KeysScreen(rows, plain_help(helps[0]) if helps else ""))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own commands, with "Keys" opening the console's help screen instead of its side panel."""
        for command in super().get_system_commands(screen):
            if command.title == "Keys":
                yield command._replace(help="Every key, filterable, after [keys] remaps (f1 / ?)",
                                       callback=self.action_toggle_help)
            else:
                yield command

    def _theme_changed(self, theme: Any) -> None:
        self.mark(*PANES)
        if theme.name in self.console_themes or theme.name in self.available_themes:
            problem = self.state.remember("theme", theme.name)
            if problem:
                self.notify(problem, severity="warning")

    def use_theme(self, name: str) -> None:
        self.theme = name

    # --- reading --------------------------------------------------------------------------------
    async def read(self, fn: Callable[[Store], T]) -> T:
        return await self.engine.read(fn)

    def _post_notice(self, notice: Notice) -> None:
        self.post_message(EngineNotice(notice))

    @on(EngineNotice)
    def _on_notice(self, message: EngineNotice) -> None:
        notice = message.notice
        if notice.kind == "lease" and notice.detail in MODES and self._lease is not None:
            self._lease.role_told(notice.detail)
        self.mark(*NOTICE_PANES.get(notice.kind, PANES))
        # A notice can come before the first screen is pushed, or after the screens have gone (on_unmount).
        if notice.kind != "log" and self.screen_stack and (detail := self._open_detail_screen()) is not None:
            detail.refresh_view()  # the open event's status, attempts, steps and replies move with the inbox
        if notice.kind == "log" and notice.detail:
            self.notify(notice.detail, title="Engine", severity="warning", timeout=6)

    def _open_detail_screen(self) -> DetailScreen | None:
        """The event detail screen when it is the one showing (its module is loaded only once one was opened)."""
        if "console.tui.screens.detail" not in sys.modules:
            return None
        from console.tui.screens.detail import DetailScreen

        screen = self.screen
        return screen if isinstance(screen, DetailScreen) else None

    def mark(self, *panes: str) -> None:
        self._dirty.update(panes)
        if "events" in panes and self._header is not None:
            self._header.activity_stale = True
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """One flush FLUSH_SECONDS after the first mark: no timer runs while nothing is dirty."""
        if self.started and not self._flush_due and self._dirty - self._busy:
            self._flush_due = True
            self.set_timer(FLUSH_SECONDS, self._flush_dirty)

    def _flush_dirty(self, *, before_start: bool = False) -> list[Worker[None]]:
        """Read every dirty pane again (each on its own worker, which it returns). Before the engine has
        started only the first frame's reads run (before_start)."""
        self._flush_due = False
        if not self.started and not before_start:
            return []
        reads = []
        for pane in sorted(self._dirty - self._busy):
            self._dirty.discard(pane)
            self._busy.add(pane)
            reads.append(self._reload(pane))
        return reads

    def _tick(self) -> None:
        """Once a second: each pane redraws what moves with the clock from the view it holds (no reads), and
        marks itself to be read again only when time alone can have changed it (an agent's wait ending)."""
        now = self.clock.now()
        with contextlib.suppress(NoMatches):  # the console is closing: its panes have gone before the timer
            for pane in self._panes.values():
                pane.tick(now)

    @work(group="reload")
    async def _reload(self, pane: str) -> None:
        try:
            await self._reload_pane(pane)
        except StoreError as exc:
            log.warning("reading %s failed: %s", pane, exc)
        except NoMatches:
            pass  # the screen is closing: the pane has gone
        finally:
            self._busy.discard(pane)
            self._schedule_flush()  # marked again while it was read

    async def _reload_pane(self, pane: str) -> None:
        await self._panes[pane].reload()

    @property
    def known_sources(self) -> list[str]:
        return [] if self._header is None else self._header.sources

    async def settle(self) -> None:
        """Re-read every pane now (tests and snapshots wait on this instead of on time)."""
        if self._header is not None:
            await self._header.read_activity()
        for pane in PANES:
            await self._reload_pane(pane)
        self.query_one(ApprovalsPane).redraw()

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
        zone = ZoneInfo(self.settings.timezone)
        events = self.query_one(EventsPane)

        async def load(event_id: int) -> DetailView:
            return await self.read(read_detail(event_id, now=self.clock.now(), holder=self.engine.holder,
                                               mode=self.engine.mode, zone=zone,
                                               resume_key=self.key_for("console.stall")))

        async def neighbour(event_id: int, older: bool) -> int | None:
            return await self.read(read_neighbour(event_id, events.filter, older=older))

        from console.tui.screens.detail import DetailHost, DetailScreen

        host = DetailHost(load, neighbour, events.retry_event, self.query_one(ApprovalsPane).answer,
                          events.restore_event)
        await self.push_screen(DetailScreen(await load(event_id), host, zone))

    async def open_message(self, message_id: int) -> None:
        message = await self.read(read_message(message_id))
        if message is None:
            self.notify(f"Outbox message {message_id} is gone (pruned)", severity="warning")
            return
        now = self.clock.now()
        goes_out_at = await self.read(lambda store: store.next_send_at(now=now))
        from console.tui.screens.message import MessageScreen

        await self.push_screen(MessageScreen(message, now, ZoneInfo(self.settings.timezone), goes_out_at,
                                             send_now=self.query_one(OutboxPane).send_now))

    async def action_search(self, start_in_outbox: bool = False) -> None:
        from console.tui.screens.search import SearchScreen

        await self.push_screen(SearchScreen(self.read, self.query_one(EventsPane).filter, self.open_detail,
                                            self.open_message, now=self.clock.now(), start_in_outbox=start_in_outbox))

    async def action_outbox_messages(self) -> None:
        await self.action_search(start_in_outbox=True)

    async def action_inject(self) -> None:
        await self.push_screen(await self.injector.form(blink=not self.deterministic))

    async def action_quick_chat(self) -> None:
        await self.injector.quick_chat()

    async def action_quick_poison(self) -> None:
        await self.injector.quick_poison()

    async def action_quick_approval(self) -> None:
        await self.injector.quick_approval()

    async def action_quick_redeliver(self) -> None:
        await self.injector.redeliver()

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

        await self.push_screen(TimersScreen(self.read, self.engine.write, self.clock, ZoneInfo(self.settings.timezone)))

    async def action_notes(self) -> None:
        from console.tui.screens.notes import NotesScreen

        await self.push_screen(NotesScreen(self.read, self.engine.write))

    def action_stall(self) -> None:
        self.query_one(LeasePane).stall()


def run_app(settings: Settings, *, read_only: bool = False) -> None:
    """Open the console on settings.db; read_only: a console that watches and changes nothing."""
    open_inbox(settings, read_only=read_only).close()  # a bad inbox fails here, before the screen
    _run(settings, demo=False, read_only=read_only)


def run_demo_app(*, keep: Path | None = None) -> None:
    """`--demo`: the console in the demo's world of its own (console/demo.py), with scripted traffic. Its folder is
    removed on quit, or with `keep` kept there."""
    with demo_world(keep) as settings:
        try:
            _run(settings, demo=True)
        finally:
            # The last spans are written now, while the folder is there: the SDK's own flush at exit came after
            # the folder was removed and made it again (a leftover agent-console-demo-* folder, 0755).
            telemetry.configure(None)


def _run(settings: Settings, *, demo: bool, read_only: bool = False) -> None:
    app = ConsoleApp(settings, state_path=default_state_path(), after_start=_start_demo if demo else None,
                     demo=demo, read_only=read_only)
    app.run()
    if app.start_error:
        raise StoreError(app.start_error)


def _start_demo(app: ConsoleApp) -> None:
    start_demo_traffic(app, app.engine)


__all__ = ["ConsoleApp", "EngineNotice", "run_app", "run_demo_app"]
