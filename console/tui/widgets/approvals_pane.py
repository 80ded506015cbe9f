"""The approvals pane: pending yes/no questions with a countdown each, and recent outcomes."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Resize
from textual.widgets import DataTable, Static

from console.core import Approval
from console.textsafe import terminal_safe
from console.timefmt import VIA_SHORT
from console.tui.detail import human_span
from console.tui.reads import ApprovalsView

BAR_CELLS = 6
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}
GAP = "  "


def countdown_bar(approval: Approval, now: int, cells: int = BAR_CELLS) -> str:
    """A text bar that empties as the deadline nears, then the time left."""
    span = max(1, approval.expires_at - approval.requested_at)
    left = approval.seconds_left(now)
    full = round(cells * left / span)
    return "▰" * full + "▱" * (cells - full) + f" {human_span(left)}"


def approval_cell(approval: Approval, now: int, width: int) -> tuple[Text, int]:
    """The row for one approval and its height: on one line when it fits, else the action above its countdown.

    A narrow pane (80 columns shares the width with two other panes) keeps the action readable by giving
    it a line of its own instead of cutting it after a few letters.
    """
    bar = countdown_bar(approval, now)
    action = terminal_safe(approval.action)  # an agent words it from the event, which the sender wrote
    origin = started_by(approval)
    where = f"  ← {origin}" if origin else ""  # where the run that asks came from: a webhook's name stands out
    one_line = f"{bar:<{BAR_CELLS + 6}}{GAP}{action}{where}"
    if len(one_line) <= width:
        return Text(one_line), 1
    action = action if len(action) <= width else action[: max(1, width - 1)] + "…"
    return Text.assemble(action, "\n", (bar, "dim"), where), 2


def started_by(approval: Approval) -> str:
    """Where the run that asks came from, in a word or two: its events' sources."""
    names = sorted({str(s.get("source")) for s in approval.sources or [] if isinstance(s, dict)})
    return terminal_safe(", ".join(names))


class ApprovalsPane(Vertical):
    HELP = """
## Approvals
Questions the agent asked before acting, soonest deadline first: the tool call each is bound to and where
the run that asks came from. **y** / **n** answer the highlighted one; **enter** opens it (the full
arguments and the conversation so far). Unanswered, it expires. The first outcome stands, wherever it came
from: the recent outcomes below say where (console, CLI, ntfy, Telegram, or the deadline).
"""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Approvals"
        self.view: ApprovalsView | None = None

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(cursor_type="row", show_header=False, id="approvals-table")
        table.add_column("approval", key="approval")
        yield Static("no question waiting", id="approvals-empty")
        yield table
        yield Static(id="approvals-resolved")

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#approvals-table", DataTable)

    def selected(self) -> Approval | None:
        if self.view is None or not self.view.pending:
            return None
        return self.view.pending[min(max(0, self.table.cursor_row), len(self.view.pending) - 1)]

    def show(self, view: ApprovalsView) -> list[Approval]:
        """Render; returns the approvals that expired since the previous view (for a notification)."""
        previous = self.view
        keep = self.selected()
        self.view = view
        self._render_rows(keep)
        self.border_subtitle = f"{len(view.pending)} waiting"
        lines: list[str | tuple[str, str]] = [("recent", "dim") if view.resolved else ("nothing resolved yet", "dim")]
        for approval in view.resolved[:4]:
            lines += ["\n", (f"{approval.outcome:<8}", OUTCOME_STYLE.get(approval.outcome or "", "")),
                      terminal_safe(approval.action)]
            if approval.answered_via:  # where the answer came from: console, CLI, ntfy, Telegram, deadline
                lines.append((f" · {VIA_SHORT.get(approval.answered_via, approval.answered_via)}", "dim"))
        self.query_one("#approvals-resolved", Static).update(Content.assemble(*lines))
        if previous is None:
            return []
        waiting_before = {a.request_id for a in previous.pending}
        return [a for a in view.resolved if a.outcome == "expired" and a.request_id in waiting_before]

    def _render_rows(self, keep: Approval | None) -> None:
        view = self.view
        if view is None:
            return
        table = self.table
        width = max(1, table.scrollable_content_region.width - 2)  # the cell's own padding
        table.clear()
        self.query_one("#approvals-empty", Static).display = not view.pending
        for approval in view.pending:
            cell, height = approval_cell(approval, view.now, width)
            table.add_row(cell, key=approval.request_id, height=height)
        if not view.pending:
            return
        index = next((i for i, a in enumerate(view.pending) if keep and a.request_id == keep.request_id), 0)
        table.move_cursor(row=index, animate=False, scroll=False)

    @on(Resize)
    def _resized(self) -> None:
        keep = self.selected()
        self.call_after_refresh(self._render_rows, keep)
