"""The console: one screen of live panes over the inbox, driven by the runtime Engine.

The engine runs on the app's own event loop; every SQLite read happens on its reader thread
(`await engine.read(fn)`), so the screen never waits on the disk. Engine notices arrive as typed
messages and only mark panes dirty: a flush 0.1 s after the first mark re-reads each dirty pane at most
once, so a worker draining a backlog cannot flood the screen. Nothing is read while nothing changes: the
engine's watcher posts a notice on any commit to the inbox, and the once-a-second tick only redraws the
countdowns and ages from what the panes already hold.

Each pane reads, redraws and acts for itself (console/tui/panes.py: PaneHost, LivePane): the main screen
(console/tui/screens/main.py: MainScreen) lays them out, holds the main screen's keys and routes each to the pane
that does it, and opens the screens; the app runs the engine and decides when the panes are read. The inject
form's store and --demo's test keys are console/tui/demo.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
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
from console.tui.keys import binding_ids, key_clashes, key_rows, owner_keymap, unknown_key_ids
from console.tui.panes import PANES, FollowsInbox
from console.tui.screens.main import MainScreen
from console.tui.state import ConsoleState, default_state_path
from console.tui.textual_8_2 import has_registered_themes, keymap, withdraw_toast
from console.tui.theme_files import DEFAULT_THEME, load_themes, status_variables
from console.tui.undo import UndoStack
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.lease_pane import MODES

if TYPE_CHECKING:
    from textual.command import Provider

    from console.assembly import System
    from console.edges.receiver import WebhookReceiver

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
    # The keys that work on every screen; the main screen's own are on MainScreen (console/tui/screens/main.py).
    BINDINGS: ClassVar[list[BindingType]] = [
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
        self.undo = UndoStack()  # this console's undoable actions, newest last (tui/undo.py)
        self.start_error: str | None = None
        self._collector_held = False  # the garbage collector, held off from on_load until the first frame
        self._dirty: set[str] = set()
        self._busy: set[str] = set()
        self._flush_due = False
        self.main = MainScreen(self)  # the panes and the main screen's keys
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
            self.set_keymap(owner_keymap(dict(settings.keys)))
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
        return self.main.add_class(*(name for name in classes if name is not None), update=False)

    def get_driver_class(self) -> type[Driver]:
        """Textual's own driver, except that on Linux and macOS a closed terminal cannot wedge it."""
        driver = super().get_driver_class()
        if sys.platform != "win32":
            from textual.drivers.linux_driver import LinuxDriver

            from console.tui.terminal import HangupSafeDriver

            if driver is LinuxDriver:
                return HangupSafeDriver
        return driver

    def key_for(self, binding_id: str) -> str | None:
        return self.main.key_for(binding_id)

    def relabel(self, binding_id: str, description: str) -> None:
        self.main.relabel(binding_id, description)

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

    def panes_mounted(self) -> None:
        """The main screen's panes are mounted (after the app's on_mount): the first reads and the engine start.
        The first frame is drawn from plain reads; the engine starts once it is on the screen, because its
        start checks the inbox (up to START_CHECK_SECONDS on a large file) and builds the agent, whose tools'
        libraries take about a second to import (tests/tui/test_start_imports.py)."""
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
        if self.main.header is not None:
            self.main.header.refresh_activity()
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
            f"A run is in progress ({plural(len(running), 'event')}). Quit anyway? The run gets a few seconds to "
            "finish; what it does not finish goes back to pending for the next worker.", yes_label="Quit",
            destructive=True),
            partial(self._quit_confirmed, running))

    async def _quit_confirmed(self, running: list[int], confirmed: bool | None) -> None:
        if not confirmed:
            return
        # Said at once: the quit waits for the run (up to the engine's grace), and the screen must not look idle
        # meanwhile (it stood unchanged for 12 s).
        grace = self.engine.shutdown_grace
        ids = ", ".join(f"#{event_id}" for event_id in running)
        self.toast(f"Quitting — waiting for run {ids} (up to {grace:g}s)", title="Quitting", severity="warning",
                   timeout=grace + 5)
        # In a worker: awaited here, the wait held the app's messages, the toast among them, until it was over
        self.run_worker(self.action_quit(), group="quit", exclusive=True)

    async def _running_here(self) -> list[int]:
        """The events this console's own worker has claimed and not finished."""
        if not self.started or self.engine.mode != "active" or self.engine.gen is None:
            return []
        gen = self.engine.gen
        running = await self.read(lambda store: store.events(status="running", limit=self.settings.batch_cap))
        return sorted(event.id for event in running if event.claim_gen == gen)

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
        actions = [b.action.split("(")[0] for b in (*self.BINDINGS, *MainScreen.BINDINGS) if isinstance(b, Binding)]
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
        if notice.kind == "lease" and notice.detail in MODES and self.main.lease is not None:
            self.main.lease.role_told(notice.detail)
        self.mark(*NOTICE_PANES.get(notice.kind, PANES))
        # A notice can come before the first screen is pushed, or after the screens have gone (on_unmount).
        if notice.kind != "log" and self.screen_stack and isinstance(screen := self.screen, FollowsInbox):
            # The open event's detail, a run's timeline, the spend, the search results move with the inbox. A screen
            # on the stack whose widgets are not there (being composed, or taken down) has nothing to show it in:
            # it reads when composed, or never (a notice there crashed the console once, NoMatches).
            with contextlib.suppress(NoMatches):
                screen.inbox_changed()
        if notice.kind == "log" and notice.detail:
            self.notify(notice.detail, title="Engine", severity="warning", timeout=6)

    def mark(self, *panes: str) -> None:
        self._dirty.update(panes)
        if "events" in panes and self.main.header is not None:
            self.main.header.activity_stale = True
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
            for pane in self.main.panes.values():
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
        await self.main.panes[pane].reload()

    @property
    def known_sources(self) -> list[str]:
        return [] if self.main.header is None else self.main.header.sources

    async def settle(self) -> None:
        """Re-read every pane now (tests and snapshots wait on this instead of on time)."""
        if self.main.header is not None:
            await self.main.header.read_activity()
        for pane in PANES:
            await self._reload_pane(pane)
        self.query_one(ApprovalsPane).redraw()


def run_app(settings: Settings, *, read_only: bool = False) -> None:
    """Open the console on settings.db; read_only: a console that watches and changes nothing."""
    open_inbox(settings, read_only=read_only).close()  # a bad inbox fails here, before the screen
    _run(settings, demo=False, read_only=read_only)
    _leave_at_once()


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
    if keep is None:  # a kept folder is named by the command line once this returns
        _leave_at_once()


def _run(settings: Settings, *, demo: bool, read_only: bool = False) -> None:
    app = ConsoleApp(settings, state_path=default_state_path(), after_start=_start_demo if demo else None,
                     demo=demo, read_only=read_only)
    app.run()
    if app.start_error:
        raise StoreError(app.start_error)


def _leave_at_once() -> None:
    """End the process now that the console has closed everything it opened (the engine stopped, its lease
    released, every inbox connection closed, the terminal given back): the exit handlers run (telemetry's last
    export, the logs' flush), then the process ends without the interpreter taking its ~700 modules apart one
    object at a time, which kept the terminal waiting 0.3-1.1 s after the screen had gone (docs/performance.md).
    A thread still running is waited for as a normal exit would: then this returns and the exit is the usual one."""
    import atexit
    import threading
    from os import _exit  # os._exit: the process ends here (a from-import: Textual has a private `_exit` of its own)

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed terminal (a hangup) takes no more output
            stream.flush()
    _exit(0)


def _start_demo(app: ConsoleApp) -> None:
    start_demo_traffic(app, app.engine)


__all__ = ["ConsoleApp", "EngineNotice", "run_app", "run_demo_app"]
