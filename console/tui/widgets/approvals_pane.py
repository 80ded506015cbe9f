"""The approvals pane: pending yes/no questions with a countdown each, and recent outcomes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Static

from console.core import Approval
from console.tui.detail import human_span
from console.tui.reads import ApprovalsView

BAR_CELLS = 6
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}


def countdown_bar(approval: Approval, now: int, cells: int = BAR_CELLS) -> str:
    """A text bar that empties as the deadline nears, then the time left."""
    span = max(1, approval.expires_at - approval.requested_at)
    left = approval.seconds_left(now)
    full = round(cells * left / span)
    return "▰" * full + "▱" * (cells - full) + f" {human_span(left)}"


class ApprovalsPane(Vertical):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Approvals"
        self.view: ApprovalsView | None = None

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(cursor_type="row", show_header=False, id="approvals-table")
        table.add_column("left", key="left", width=BAR_CELLS + 6)
        table.add_column("action", key="action")
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
        table = self.table
        table.clear()
        for approval in view.pending:
            table.add_row(countdown_bar(approval, view.now), Text(approval.action), key=approval.request_id)
        if view.pending:
            index = next((i for i, a in enumerate(view.pending) if keep and a.request_id == keep.request_id), 0)
            table.move_cursor(row=index, animate=False, scroll=False)
        self.border_subtitle = f"{len(view.pending)} waiting"
        lines: list[str | tuple[str, str]] = [("recent", "dim") if view.resolved else ("nothing resolved yet", "dim")]
        for approval in view.resolved[:4]:
            lines += ["\n", (f"{approval.outcome:<8}", OUTCOME_STYLE.get(approval.outcome or "", "")), approval.action]
        self.query_one("#approvals-resolved", Static).update(Content.assemble(*lines))
        if previous is None:
            return []
        waiting_before = {a.request_id for a in previous.pending}
        return [a for a in view.resolved if a.outcome == "expired" and a.request_id in waiting_before]
