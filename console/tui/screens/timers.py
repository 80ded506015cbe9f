"""The timers: each one's schedule, next fire, catch-up policy and state, with pause, resume and run now.

What `agent-console timers` lists, live: it re-reads the timers once a second (a small table) and after
each key, so a countdown moves and a timer the scheduler fired shows its next time."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static
from textual.widgets.data_table import ColumnKey

from console.clock import Clock
from console.core import Store, StoreError, Timer
from console.core.models import origin_in_words
from console.core.timers import APPROVAL_EXPIRY_PREFIX
from console.textsafe import terminal_safe
from console.timefmt import relative, schedule_in_words
from console.tui.read_only import read_only
from console.tui.tables import clear_rows

T = TypeVar("T")
RunOn = Callable[[Callable[[Store], T]], Awaitable[T]]
REFRESH_SECONDS = 1.0
# What matters first comes first: at 80 columns the schedule and the last fire may scroll out of sight, and the
# line under the table repeats them in full for the highlighted timer.
COLUMNS = ("Timer", "Next fire", "Catch-up", "State", "Schedule", "Last fired")
# Textual's DataTable does not measure styled Content cells when it sizes a column: those columns get a width.
STYLED_WIDTHS = {"Next fire": 22, "State": 6}


@dataclass(frozen=True)
class TimersView:
    """The timers as the screen shows them, read in one go."""

    timers: tuple[Timer, ...]
    include_done: bool
    now: int


def read_timers(include_done: bool, now: int) -> Callable[[Store], TimersView]:
    return lambda store: TimersView(tuple(store.timers(include_done=include_done)), include_done, now)


def is_approval_expiry(timer: Timer) -> bool:
    return timer.id.startswith(APPROVAL_EXPIRY_PREFIX)


def state_words(timer: Timer) -> str:
    if timer.done:
        return "fired"
    return "paused" if timer.paused else "active"


def schedule_words(timer: Timer) -> str:
    if is_approval_expiry(timer):
        return "approval expiry"
    return schedule_in_words(timer.every, timer.cron, timer.tz, sep="")


def moment_text(at: int | None, now: int, zone: tzinfo | None) -> str:
    """'in 5m00s (22:18)', '3h00m ago (Tue 19:13)': how far, then the clock time (the weekday when it is not
    today), in a few columns."""
    if at is None:
        return "never"
    moment, today = datetime.fromtimestamp(at, zone), datetime.fromtimestamp(now, zone)
    clock = moment.strftime("%H:%M" if moment.date() == today.date() else "%a %H:%M")
    if abs(at - now) >= 6 * 86_400:
        clock = moment.strftime("%Y-%m-%d")
    return f"{'now' if at == now else relative(at, now, sep='')} ({clock})"


def timer_cells(timer: Timer, now: int, zone: tzinfo | None) -> tuple[str | Content, ...]:
    next_fire: str | Content = "—" if timer.done else moment_text(timer.due, now, zone)
    if timer.paused and not timer.done:
        # it does not fire while paused: its old due time would read as a promise (u resumes it)
        next_fire = Content.styled("— (paused)", "dim")
    state = state_words(timer)
    return (terminal_safe(timer.id), next_fire, timer.catch_up,
            Content.styled(state, "$text-warning" if state == "paused" else ("dim" if state == "fired" else "")),
            terminal_safe(schedule_words(timer)), moment_text(timer.last_fired_at, now, zone))


def timer_line(timer: Timer, now: int, zone: tzinfo | None) -> str:
    """The highlighted timer in full, under the table."""
    payload = json.dumps(timer.payload, ensure_ascii=False, sort_keys=True)
    set_by = "" if timer.origin is None else f" · set {origin_in_words(timer.origin)}"
    return terminal_safe(f"{timer.id}: {schedule_words(timer)} · catch-up {timer.catch_up} · last fired "
                         f"{moment_text(timer.last_fired_at, now, zone)}{set_by} · payload {payload}")


class TimersScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    TimersScreen {
        align: center middle;
    }
    TimersScreen #timers-dialog {
        background: $surface;
        border: thick $primary;
        border-title-color: $text-primary;
        padding: 0 1;
        width: 95%;
        max-width: 140;
        height: 90%;
    }
    TimersScreen #timers-line {
        height: auto;
        max-height: 3;
    }
    TimersScreen #timers-table {
        height: 1fr;
    }
    TimersScreen #timers-hint {
        color: $text-muted;
        height: auto;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause", id="timers.pause", tooltip="stop the highlighted timer firing"),
        Binding("u", "resume", "Resume", id="timers.resume",
                tooltip="let the highlighted timer fire again; what it missed catches up"),
        Binding("r", "run_now", "Run now", id="timers.run_now",
                tooltip="one extra occurrence now; the schedule stays as it is"),
        Binding("a", "toggle_all", "Fired too", id="timers.all", tooltip="show or hide one-off timers that fired"),
        Binding("escape,q", "close", "Close", id="timers.close"),
    ]

    view: reactive[TimersView | None] = reactive(None, always_update=True)

    def __init__(self, read: RunOn[Any], write: RunOn[Any], clock: Clock, zone: tzinfo | None = None) -> None:
        super().__init__()
        self._read = read
        self._write = write
        self._clock = clock
        self._zone = zone
        self.include_done = False
        self._columns: list[ColumnKey] = []
        self._shown_ids: list[str] = []  # the timers in the table, in its order

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="timers-dialog") as dialog:
            dialog.border_title = "Timers"
            dialog.border_subtitle = "p pause · u resume · r run now · a fired too · esc close"
            yield DataTable(id="timers-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="timers-line")
            yield Static("", id="timers-hint")

    async def on_mount(self) -> None:
        table = self.query_one(DataTable)
        self._columns = [table.add_column(label, width=STYLED_WIDTHS.get(label)) for label in COLUMNS]
        await self.reload()
        self.set_interval(REFRESH_SECONDS, self.reload)

    async def reload(self) -> None:
        self.view = await self._read(read_timers(self.include_done, self._clock.now()))

    def watch_view(self, view: TimersView | None) -> None:
        if view is None:
            return
        table = self.query_one(DataTable)
        ids = [timer.id for timer in view.timers]
        if ids == self._shown_ids:
            # The same timers: their cells change in place, so the cursor and a sideways scroll stay put while
            # the countdowns move (rebuilding the table would snap both back once a second).
            for timer in view.timers:
                for column, cell in zip(self._columns, timer_cells(timer, view.now, self._zone), strict=True):
                    table.update_cell(timer.id, column, cell)
        else:
            row = table.cursor_row
            chosen = self._shown_ids[row] if 0 <= row < len(self._shown_ids) else None
            clear_rows(table)
            for timer in view.timers:
                table.add_row(*timer_cells(timer, view.now, self._zone), key=timer.id)
            if chosen in ids:
                table.move_cursor(row=ids.index(chosen), animate=False)
            self._shown_ids = ids
        self._show_line()
        hint = self.query_one("#timers-hint", Static)
        if not view.timers:
            hint.update("No timers. Add one with: agent-console timers add ID --every SECONDS (or --cron, --at)")
        else:
            paused = sum(timer.paused for timer in view.timers)
            shown = "" if view.include_done else " (a shows one-offs that fired)"
            hint.update(f"{len(view.timers)} timer{'s' if len(view.timers) != 1 else ''}, {paused} paused{shown}")

    def on_data_table_row_highlighted(self) -> None:
        self._show_line()

    def _show_line(self) -> None:
        timer, view = self.selected(), self.view
        self.query_one("#timers-line", Static).update(
            "" if timer is None or view is None else timer_line(timer, view.now, self._zone))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("pause", "resume", "run_now") and read_only(self))

    def selected(self) -> Timer | None:
        view = self.view
        table = self.query_one(DataTable)
        if view is None or not view.timers or not 0 <= table.cursor_row < len(view.timers):
            return None
        return view.timers[table.cursor_row]

    async def _change(self, change: Callable[[Store, str], Any], timer: Timer) -> Any:
        try:
            return await self._write(lambda store: change(store, timer.id))
        except (ValueError, StoreError) as exc:  # an approval's expiry timer; a busy inbox
            self.notify(str(exc), severity="warning")
            return None
        finally:
            await self.reload()

    async def action_pause(self) -> None:
        await self._set_paused(True)

    async def action_resume(self) -> None:
        await self._set_paused(False)

    async def _set_paused(self, paused: bool) -> None:
        timer = self.selected()
        if timer is None:
            self.notify("No timer is highlighted", severity="warning")
            return
        if timer.paused == paused:
            self.notify(f"{timer.id} is already {'paused' if paused else 'active'}", severity="warning")
            return
        if await self._change(lambda store, timer_id: store.pause_timer(timer_id, paused), timer):
            self.notify(f"{timer.id} {'paused' if paused else 'resumed'}", title="Timers")

    async def action_run_now(self) -> None:
        timer = self.selected()
        if timer is None:
            self.notify("No timer is highlighted", severity="warning")
            return
        now = self._clock.now()
        outcome = await self._change(lambda store, timer_id: store.fire_timer_now(timer_id, now=now), timer)
        if outcome == "fired":
            self.notify(f"{timer.id} fired: its event is in the inbox", title="Timers")
        elif outcome == "duplicate":
            self.notify(f"{timer.id} already fired this second", severity="warning")
        elif outcome == "unknown":
            self.notify(f"{timer.id} is gone", severity="warning")

    async def action_toggle_all(self) -> None:
        self.include_done = not self.include_done
        await self.reload()

    def action_close(self) -> None:
        self.dismiss(None)
