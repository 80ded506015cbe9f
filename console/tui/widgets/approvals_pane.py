"""The approvals pane: pending yes/no questions with a countdown each, and recent outcomes."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Resize
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from console.core import Approval
from console.textsafe import terminal_safe
from console.timefmt import VIA_SHORT, coarse_span
from console.tui.reads import ApprovalsView
from console.tui.render import show
from console.tui.widgets.countdown_bar import bar_text, quantized

BAR_CELLS = 6
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}
GAP = "  "


def countdown_bar(approval: Approval, now: int, cells: int = BAR_CELLS) -> str:
    """A text bar that empties as the deadline nears, then the time left."""
    span = max(1, approval.expires_at - approval.requested_at)
    left = approval.seconds_left(now)
    return bar_text(quantized(left), span, cells) + f" {coarse_span(left)}"


def approval_cell(approval: Approval, now: int, width: int) -> tuple[Text, int]:
    """The row for one approval and its height: the countdown, the request id, the action (the tool call it is
    bound to) and where the run that asks came from; on one line when it fits, else the action above the rest.

    A narrow pane (80 columns shares the width with two other panes) keeps the action readable by giving
    it a line of its own instead of cutting it after a few letters.
    """
    bar = countdown_bar(approval, now)
    action = terminal_safe(approval.action)  # an agent words it from the event, which the sender wrote
    ident = terminal_safe(approval.request_id)
    origin = started_by(approval)
    where = f"  ← {origin}" if origin else ""  # where the run that asks came from: a webhook's name stands out
    one_line = f"{bar:<{BAR_CELLS + 6}}{GAP}{action}{where}{GAP}{ident}"
    if len(one_line) <= width:
        return Text.assemble(f"{bar:<{BAR_CELLS + 6}}{GAP}{action}{where}", (f"{GAP}{ident}", "dim")), 1
    action = action if len(action) <= width else action[: max(1, width - 1)] + "…"
    return Text.assemble(action, "\n", (f"{bar} {ident}", "dim"), where), 2


def started_by(approval: Approval) -> str:
    """Where the run that asks came from, in a word or two: its events' sources."""
    names = sorted({str(s.get("source")) for s in approval.sources or [] if isinstance(s, dict)})
    return terminal_safe(", ".join(names))


def at(view: ApprovalsView, now: int) -> ApprovalsView:
    """The same approvals seen at a later second (their countdowns move), without reading the file."""
    return replace(view, now=now)


class ApprovalsPane(Vertical):
    HELP = """
## Approvals
Questions the agent asked before acting, soonest deadline first: the tool call each is bound to and where
the run that asks came from. **y** / **n** answer the highlighted one; **enter** opens it (the full
arguments and the conversation so far). Unanswered, it expires. The first outcome stands, wherever it came
from: the recent outcomes below say where (console, CLI, ntfy, Telegram, or the deadline). An answer whose event
died before the conversation heard it (crashes or failures spent its attempts) is listed in red or amber above
them: on a yes, whether the approved call ran, and which event to retry (the retry runs it once).
"""

    DEFAULT_CSS = """
    ApprovalsPane > #approvals-empty {
        height: 1;
        color: $text-muted;
    }
    ApprovalsPane > #approvals-table {
        height: 1fr;
        min-height: 2;
        scrollbar-size: 0 0;
    }
    ApprovalsPane > #approvals-stranded {
        height: auto;
        max-height: 6;
        display: none;
    }
    ApprovalsPane > #approvals-resolved {
        height: auto;
        max-height: 5;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    class Arrived(Message):
        """Approvals that were not waiting in the previous view (none on the first view: nothing arrived)."""

        def __init__(self, approvals: list[Approval]) -> None:
            super().__init__()
            self.approvals = approvals

    class Expired(Message):
        """Approvals that were waiting in the previous view and have since expired unanswered."""

        def __init__(self, approvals: list[Approval]) -> None:
            super().__init__()
            self.approvals = approvals

    view: reactive[ApprovalsView | None] = reactive(None, init=False, repaint=False)  # the watcher updates what changed

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Approvals"
        self._rows: list[tuple[str, Text, int]] = []
        self._width = 0  # the width the rows were laid out for: a new width lays them out again

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(cursor_type="row", show_header=False, id="approvals-table")
        table.add_column("approval", key="approval")
        yield Static("no question waiting", id="approvals-empty")
        yield table
        yield Static(id="approvals-stranded")
        yield Static(id="approvals-resolved")

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#approvals-table", DataTable)

    def selected(self) -> Approval | None:
        view = self.view
        if view is None or not view.pending:
            return None
        row = self.table.cursor_row if self.table.row_count == len(view.pending) else 0
        return view.pending[min(max(0, row), len(view.pending) - 1)]

    def watch_view(self, previous: ApprovalsView | None, view: ApprovalsView | None) -> None:
        if view is None:
            return
        self._render_rows(self._selected_in(previous))
        subtitle = f"{len(view.pending)} waiting"
        if self.border_subtitle != subtitle:
            self.border_subtitle = subtitle
        lines: list[str | tuple[str, str]] = [("recent", "dim") if view.resolved else ("nothing resolved yet", "dim")]
        for approval in view.resolved[:4]:
            lines += ["\n", (f"{approval.outcome:<8}", OUTCOME_STYLE.get(approval.outcome or "", "")),
                      terminal_safe(approval.action)]
            if approval.answered_via:  # where the answer came from: console, CLI, ntfy, Telegram, deadline
                lines.append((f" · {VIA_SHORT.get(approval.answered_via, approval.answered_via)}", "dim"))
        show(self.query_one("#approvals-resolved", Static), Content.assemble(*lines))
        self._show_stranded(view)
        if previous is None:
            return
        waiting_before = {a.request_id for a in previous.pending}
        arrived = [a for a in view.pending if a.request_id not in waiting_before]
        expired = [a for a in view.resolved if a.outcome == "expired" and a.request_id in waiting_before]
        if arrived:
            self.post_message(self.Arrived(arrived))
        if expired:
            self.post_message(self.Expired(expired))

    def _show_stranded(self, view: ApprovalsView) -> None:
        """Answers whose event died before the conversation heard them: on a yes, a call the owner approved
        that may not have happened. Wrapped, never cut: the line says what to retry."""
        stranded = self.query_one("#approvals-stranded", Static)
        stranded.display = bool(view.stranded)
        parts: list[str | tuple[str, str]] = []
        for answer in view.stranded:
            style = "$text-error" if answer.outcome == "yes" else "$text-warning"
            parts += [*(["\n"] if parts else []), (f"{answer.outcome:<8}", style), terminal_safe(answer.action),
                      ": ", (terminal_safe(answer.in_words()), style)]
        show(stranded, Content.assemble(*parts))

    def _selected_in(self, view: ApprovalsView | None) -> Approval | None:
        if view is None or not view.pending or self.table.row_count != len(view.pending):
            return None
        return view.pending[min(max(0, self.table.cursor_row), len(view.pending) - 1)]

    def _render_rows(self, keep: Approval | None) -> None:
        view = self.view
        if view is None:
            return
        table = self.table
        width = max(1, table.scrollable_content_region.width - 2)  # the cell's own padding
        rows = [(approval.request_id, *approval_cell(approval, view.now, width)) for approval in view.pending]
        if width == self._width and rows == self._rows and table.row_count == len(rows):
            # The same text: nothing to redraw. Countdowns past ten minutes change once a minute (coarse_span),
            # so an idle console rebuilds this table once a minute, not every second.
            return
        self._rows, self._width = rows, width
        table.clear()
        self.query_one("#approvals-empty", Static).display = not view.pending
        for request_id, cell, height in rows:
            table.add_row(cell, key=request_id, height=height)
        if not view.pending:
            return
        index = next((i for i, a in enumerate(view.pending) if keep and a.request_id == keep.request_id), 0)
        table.move_cursor(row=index, animate=False, scroll=False)

    def redraw(self) -> None:
        """Lay the rows out again even if their text is the same (settle: a screen drawn the same every time)."""
        self._rows, self._width = [], 0
        self._render_rows(self.selected())

    @on(Resize)
    def _resized(self) -> None:
        keep = self.selected()
        self.call_after_refresh(self._render_rows, keep)
