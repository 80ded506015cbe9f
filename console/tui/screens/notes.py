"""The agent's notes (remember / forget), each with where it came from: yours, a trusted run's, or a run's that
had read untrusted content (marked: the agent is shown those only as quoted data, and reading them makes its
run untrusted; docs/security.md). What `agent-console memory` lists; d forgets the highlighted note, and u (here or
on the main screen) puts it back as it was: the console's undo."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from console.core import MemoryEntry, Store, StoreError
from console.textsafe import terminal_safe
from console.tui.read_only import read_only
from console.tui.tables import clear_rows
from console.tui.undo import Undoable, UndoStack, undo_last

T = TypeVar("T")
RunOn = Callable[[Callable[[Store], T]], Awaitable[T]]
COLUMNS = ("Note", "From", "Value")
CELL_CHARS = 40  # of a value in the table; the line under it shows the highlighted note whole


def origin_cell(note: MemoryEntry) -> str | Content:
    if note.trusted:
        return terminal_safe(note.origin_in_words())
    origin = note.origin if isinstance(note.origin, dict) else {}
    run = " ".join(str(part) for part in (origin.get("source"), f"#{origin.get('event_id')}") if part)
    return Content.styled(terminal_safe(f"untrusted ({run})"), "$text-warning")


def note_cells(note: MemoryEntry) -> tuple[str | Content, ...]:
    value = " ".join(note.value.split())
    shown = value if len(value) <= CELL_CHARS else value[: CELL_CHARS - 1] + "…"
    return terminal_safe(note.key), origin_cell(note), terminal_safe(shown)


def note_line(note: MemoryEntry) -> str:
    """The highlighted note in full, with its origin in words."""
    return terminal_safe(f"{note.key} ({note.origin_in_words()}): {note.value}")


class NotesScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    NotesScreen {
        align: center middle;
    }
    NotesScreen #notes-dialog {
        background: $surface;
        border: thick $primary;
        border-title-color: $text-primary;
        padding: 0 1;
        width: 95%;
        max-width: 140;
        height: 90%;
    }
    NotesScreen #notes-line {
        height: auto;
        max-height: 6;
    }
    NotesScreen #notes-table {
        height: 1fr;
    }
    NotesScreen #notes-hint {
        color: $text-muted;
        height: auto;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drop", "Drop", id="notes.drop", tooltip="forget the highlighted note (u puts it back)"),
        # the console's undo (a modal screen hides the main screen's keys)
        Binding("u,ctrl+z", "undo", "Undo", id="notes.undo", tooltip="take back the console's last action"),
        Binding("escape,q", "close", "Close", id="notes.close"),
    ]

    notes: reactive[tuple[MemoryEntry, ...] | None] = reactive(None, always_update=True)

    def __init__(self, read: RunOn[Any], write: RunOn[Any], undo: UndoStack | None = None) -> None:
        super().__init__()
        self._read = read
        self._write = write
        self._undo = undo

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="notes-dialog") as dialog:
            dialog.border_title = "Notes"
            dialog.border_subtitle = "d drop · u undo · esc close"
            yield DataTable(id="notes-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="notes-line")
            yield Static("", id="notes-hint")

    async def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        await self.reload()

    async def reload(self) -> None:
        self.notes = tuple(await self._read(lambda store: store.memory()))

    def watch_notes(self, notes: tuple[MemoryEntry, ...] | None) -> None:
        if notes is None:
            return
        table = self.query_one(DataTable)
        row = table.cursor_row
        clear_rows(table)
        for note in notes:
            table.add_row(*note_cells(note), key=note.key)
        if notes:
            table.move_cursor(row=min(max(row, 0), len(notes) - 1), animate=False)
        self._show_line()
        untrusted = sum(not note.trusted for note in notes)
        self.query_one("#notes-hint", Static).update(
            "No notes. The agent keeps them with remember; agent-console memory set KEY VALUE writes one."
            if not notes else
            f"{len(notes)} note{'s' if len(notes) != 1 else ''}, {untrusted} from runs that read untrusted content "
            "(shown to the agent only as quoted data)")

    def on_data_table_row_highlighted(self) -> None:
        self._show_line()

    def _show_line(self) -> None:
        note = self.selected()
        self.query_one("#notes-line", Static).update("" if note is None else note_line(note))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("drop", "undo") and read_only(self))

    def selected(self) -> MemoryEntry | None:
        notes = self.notes
        row = self.query_one(DataTable).cursor_row
        if not notes or not 0 <= row < len(notes):
            return None
        return notes[row]

    async def action_drop(self) -> None:
        note = self.selected()
        if note is None:
            self.notify("No note is highlighted", severity="warning")
            return
        try:
            dropped = await self._write(lambda store: store.forget_memory(note.key))
        except StoreError as exc:
            self.notify(str(exc), severity="warning")
            return
        finally:
            await self.reload()
        if dropped is None:
            return
        if self._undo is not None:
            self._undo.push(Undoable(f"forgot the note {dropped.key}", partial(self._put_back, dropped)))
        self.notify(terminal_safe(f"Forgot {note.key}") + (" · u puts it back" if self._undo is not None else ""),
                    title="Notes", markup=False)

    async def _put_back(self, note: MemoryEntry) -> str:
        back = await self._write(lambda store: store.put_back_memory(note))
        if self.is_attached:
            await self.reload()
        return terminal_safe(f"The note {note.key} is back" if back else
                             f"The note {note.key} was written again since: the newer one stands")

    async def action_undo(self) -> None:
        await undo_last(self._undo, self.notify)

    def action_close(self) -> None:
        self.dismiss(None)
