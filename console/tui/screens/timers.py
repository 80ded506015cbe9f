"""The timers: each one's schedule, next fire, catch-up policy and state, with pause, resume and run now; and
under them, once there are any, the agent's own schedules (issue 35): who asked for each, its next fires, last
outcome, spend this month and expiry, with pause, resume, delete and renew.

What `agent-console timers` and `agent-console schedules` list, live: it re-reads them once a second (small
tables) and after each key, so a countdown moves and a timer the scheduler fired shows its next time."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import partial
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
from console.core.schedules import RemovedSchedule
from console.core.timers import APPROVAL_EXPIRY_PREFIX
from console.textsafe import terminal_safe
from console.timefmt import relative, schedule_in_words
from console.tui.read_only import read_only
from console.tui.tables import clear_rows
from console.tui.undo import Undoable, UndoStack, undo_last

T = TypeVar("T")
RunOn = Callable[[Callable[[Store], T]], Awaitable[T]]
REFRESH_SECONDS = 1.0
# What matters first comes first: at 80 columns the schedule and the last fire may scroll out of sight, and the
# line under the table repeats them in full for the highlighted timer.
COLUMNS = ("Timer", "Next fire", "Catch-up", "State", "Schedule", "Last fired")
# Textual's DataTable does not measure styled Content cells when it sizes a column: those columns get a width.
STYLED_WIDTHS = {"Next fire": 22, "State": 6}
SCHEDULE_COLUMNS = ("Schedule", "State", "Next fires", "Last outcome", "This month", "Expires", "Asked by")
SCHEDULE_WIDTHS = {"State": 8}


@dataclass(frozen=True)
class TimersView:
    """The timers as the screen shows them, read in one go."""

    timers: tuple[Timer, ...]
    include_done: bool
    now: int
    schedules: tuple[dict[str, Any], ...] = ()  # Store.schedule_rows


def read_timers(include_done: bool, now: int, zone: str = "UTC") -> Callable[[Store], TimersView]:
    return lambda store: TimersView(tuple(store.timers(include_done=include_done)), include_done, now,
                                    tuple(store.schedule_rows(now=now, zone=zone)))


def schedule_cells(row: dict[str, Any], now: int, zone: tzinfo | None) -> tuple[str | Content, ...]:
    """One schedule's row: its id and title, state (why it is paused under the table), its next fires, how its
    last occurrence went, this month's spend, when it expires and who asked for it (⚠ when it runs untrusted)."""
    state = str(row["state"])
    fires = ", ".join(moment_text(moment, now, zone) for moment in row["next_fires"][:2]) or "—"
    expires = "never" if row["expires"] is None else moment_text(int(row["expires"]), now, zone)
    style = {"paused": "$text-warning", "expired": "$text-error", "done": "dim"}.get(state, "")
    origin = str(row["origin"]) if row["trusted"] else f"⚠ {row['origin']}"
    return (terminal_safe(f"{row['id']} {row['title']}"), Content.styled(state, style), fires,
            terminal_safe(str(row["last_outcome"] or "not yet")), f"${row['spend_month']:.2f}", expires,
            terminal_safe(origin))


def schedule_line(row: dict[str, Any], now: int, zone: tzinfo | None) -> str:
    """The highlighted schedule in full, under the tables."""
    why = f" ({row['paused_reason']})" if row["paused_reason"] else ""
    tools = "as the policy allows" if row["tools"] is None else ", ".join(row["tools"]) or "none"
    return terminal_safe(f"{row['id']} {row['state']}{why}: {row['interval']} · instruction {row['instruction']!r} "
                         f"· tools {tools} · asked by {row['origin']} · e renews for 30 days, d deletes")


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
    TimersScreen #schedules-title {
        color: $text-primary;
        height: 1;
        display: none;
    }
    TimersScreen #schedules-table {
        height: auto;
        max-height: 12;
        display: none;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause", id="timers.pause", tooltip="stop the highlighted timer firing"),
        Binding("u", "resume", "Resume", id="timers.resume",
                tooltip="let the highlighted timer fire again; what it missed catches up"),
        Binding("r", "run_now", "Run now", id="timers.run_now",
                tooltip="one extra occurrence now; the schedule stays as it is"),
        Binding("D,delete", "delete_timer", "Delete", id="timers.delete_timer",
                tooltip="delete the highlighted timer (ctrl+z here, u on the main screen, puts it back)"),
        # the console's undo (a modal screen hides the main screen's keys; u resumes a timer here)
        Binding("ctrl+z", "undo", "Undo", id="timers.undo", show=False,
                tooltip="take back the console's last action (a timer or schedule deleted here)"),
        Binding("a", "toggle_all", "Fired too", id="timers.all", tooltip="show or hide one-off timers that fired"),
        # The schedules' keys are named on their table's title line, shown only once there are schedules.
        Binding("e", "renew", "Renew", id="timers.renew", show=False,
                tooltip="run the highlighted schedule 30 more days"),
        Binding("d", "delete", "Delete", id="timers.delete", show=False,
                tooltip="delete the highlighted schedule (ctrl+z here, u on the main screen, puts it back)"),
        Binding("escape,q", "close", "Close", id="timers.close"),
    ]

    view: reactive[TimersView | None] = reactive(None, always_update=True)

    def __init__(self, read: RunOn[Any], write: RunOn[Any], clock: Clock, zone: tzinfo | None = None,
                 undo: UndoStack | None = None) -> None:
        super().__init__()
        self._undo = undo
        self._read = read
        self._write = write
        self._clock = clock
        self._zone = zone
        self.include_done = False
        self._columns: list[ColumnKey] = []
        self._shown_ids: list[str] = []  # the timers in the table, in its order
        self._schedule_columns: list[ColumnKey] = []
        self._shown_schedules: list[str] = []

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="timers-dialog") as dialog:
            dialog.border_title = "Timers"
            dialog.border_subtitle = "p pause · u resume · r run now · D delete · a fired too · esc close"
            yield DataTable(id="timers-table", cursor_type="row", zebra_stripes=True)
            yield Static("Schedules (the agent's own): p pause · u resume · e renew · d delete", id="schedules-title")
            yield DataTable(id="schedules-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="timers-line")
            yield Static("", id="timers-hint")

    async def on_mount(self) -> None:
        table = self.query_one("#timers-table", DataTable)
        self._columns = [table.add_column(label, width=STYLED_WIDTHS.get(label)) for label in COLUMNS]
        schedules = self.query_one("#schedules-table", DataTable)
        self._schedule_columns = [schedules.add_column(label, width=SCHEDULE_WIDTHS.get(label))
                                  for label in SCHEDULE_COLUMNS]
        await self.reload()
        self.set_interval(REFRESH_SECONDS, self.reload)

    async def reload(self) -> None:
        zone = getattr(self._zone, "key", None) or "UTC"  # a ZoneInfo's name, for the month the spend counts in
        self.view = await self._read(read_timers(self.include_done, self._clock.now(), zone))

    def watch_view(self, view: TimersView | None) -> None:
        if view is None:
            return
        self._show_schedules(view)
        table = self.query_one("#timers-table", DataTable)
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

    def _show_schedules(self, view: TimersView) -> None:
        """The schedules' table, shown only once there are any (a console without them looks as before)."""
        table = self.query_one("#schedules-table", DataTable)
        shown = bool(view.schedules)
        table.display = shown
        self.query_one("#schedules-title", Static).display = shown
        ids = [str(row["id"]) for row in view.schedules]
        if ids == self._shown_schedules:
            for row in view.schedules:
                for column, cell in zip(self._schedule_columns, schedule_cells(row, view.now, self._zone),
                                        strict=True):
                    table.update_cell(str(row["id"]), column, cell)
            return
        cursor = table.cursor_row
        chosen = self._shown_schedules[cursor] if 0 <= cursor < len(self._shown_schedules) else None
        clear_rows(table)
        for row in view.schedules:
            table.add_row(*schedule_cells(row, view.now, self._zone), key=str(row["id"]))
        if chosen in ids:
            table.move_cursor(row=ids.index(chosen), animate=False)
        self._shown_schedules = ids

    def on_data_table_row_highlighted(self) -> None:
        self._show_line()

    def on_descendant_focus(self) -> None:
        # tab between the two tables: the line speaks of the focused table's row at once, not at the next reload
        self._show_line()

    def _show_line(self) -> None:
        view = self.view
        if self._on_schedules():
            row = self.selected_schedule()
            self.query_one("#timers-line", Static).update(
                "" if row is None or view is None else schedule_line(row, view.now, self._zone))
            return
        timer = self.selected()
        self.query_one("#timers-line", Static).update(
            "" if timer is None or view is None else timer_line(timer, view.now, self._zone))

    def _on_schedules(self) -> bool:
        """Whether the keys act on the schedules' table (it has the focus)."""
        return self.focused is self.query_one("#schedules-table", DataTable)

    def selected_schedule(self) -> dict[str, Any] | None:
        view = self.view
        table = self.query_one("#schedules-table", DataTable)
        if view is None or not view.schedules or not 0 <= table.cursor_row < len(view.schedules):
            return None
        return view.schedules[table.cursor_row]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("pause", "resume", "run_now", "renew", "delete", "delete_timer", "undo")
                    and read_only(self))

    def selected(self) -> Timer | None:
        view = self.view
        table = self.query_one("#timers-table", DataTable)
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
        if self._on_schedules():
            await self._steer_schedule("pause" if paused else "resume")
            return
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

    async def action_renew(self) -> None:
        await self._steer_schedule("renew")

    async def action_delete(self) -> None:
        await self._steer_schedule("delete")

    async def _steer_schedule(self, verb: str) -> None:
        """Pause, resume, renew or delete the highlighted schedule (tab moves to the schedules' table)."""
        row = self.selected_schedule() if self._on_schedules() else None
        if row is None:
            self.notify("No schedule is highlighted (tab to the schedules)", severity="warning")
            return
        schedule_id, now = str(row["id"]), self._clock.now()

        def steer(store: Store) -> object:
            if verb == "pause":
                return store.pause_schedule(schedule_id, now=now)
            if verb == "resume":
                return store.resume_schedule(schedule_id, now=now)
            if verb == "renew":
                return store.renew_schedule(schedule_id, now=now) is not None
            return store.take_schedule(schedule_id)  # its rows kept for the undo

        try:
            done = await self._write(steer)
        except StoreError as exc:  # a busy inbox
            self.notify(str(exc), severity="warning")
            return
        finally:
            await self.reload()
        words = {"pause": "paused", "resume": "resumed", "renew": "renewed for 30 days", "delete": "deleted"}[verb]
        if not done:
            self.notify(f"schedule {schedule_id} is gone", severity="warning")
            return
        undo = ""
        if isinstance(done, RemovedSchedule) and self._undo is not None:
            removed = done
            self._undo.push(Undoable(terminal_safe(f"deleted schedule {schedule_id} ({row['title']})"), partial(
                self._put_back, lambda store: store.put_back_schedule(removed), f"schedule {schedule_id} is back",
                f"A schedule {schedule_id} was made again since: the newer one stands")))
            undo = " · ctrl+z here (u on the main screen) puts it back"
        self.notify(terminal_safe(f"schedule {schedule_id} {words}{undo}"), title="Schedules", markup=False)


    async def action_delete_timer(self) -> None:
        """D: the highlighted timer deleted, at once: the console's undo puts it back whole (on the schedules'
        table, the highlighted schedule, as d does)."""
        if self._on_schedules():
            await self._steer_schedule("delete")
            return
        timer = self.selected()
        if timer is None:
            self.notify("No timer is highlighted", severity="warning")
            return
        removed = await self._change(lambda store, timer_id: store.take_timer(timer_id), timer)
        if removed is None:
            return
        if self._undo is not None:
            self._undo.push(Undoable(f"deleted the timer {timer.id}", partial(
                self._put_back, lambda store: store.put_back_timer(removed), f"The timer {timer.id} is back",
                f"A timer {timer.id} was set again since: the newer one stands")))
        self.notify(terminal_safe(f"Deleted the timer {timer.id}") + (
            " · ctrl+z here (u on the main screen) puts it back" if self._undo is not None else ""),
            title="Timers", markup=False)

    async def _put_back(self, put_back: Callable[[Store], bool], back: str, newer: str) -> str:
        """An undo of a delete here: the rows written again (`newer` when one of that id was made since)."""
        done = await self._write(put_back)
        if self.is_attached:
            await self.reload()
        return terminal_safe(back if done else newer)

    async def action_toggle_all(self) -> None:
        self.include_done = not self.include_done
        await self.reload()

    async def action_undo(self) -> None:
        await undo_last(self._undo, self.notify)

    def action_close(self) -> None:
        self.dismiss(None)
