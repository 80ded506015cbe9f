"""The approvals pane: pending yes/no questions with a countdown each, and recent outcomes."""

from __future__ import annotations

from dataclasses import replace
from zoneinfo import ZoneInfo

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Resize
from textual.notifications import Notification
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from console.core import Approval
from console.textsafe import terminal_safe
from console.timefmt import VIA_SHORT, coarse_span, span
from console.trust.callview import (
    APPROVAL_OPENING,
    MIN_VALUE,
    QUESTION_OPENING,
    RequestView,
    cut_middle,
    identifier_text,
    request_view,
    wrapped,
)
from console.tui.panes import PaneHost
from console.tui.read_order import ReadOrder
from console.tui.reads import ApprovalsView, read_approval, read_approvals
from console.tui.render import show
from console.tui.tables import clear_rows, measure_now
from console.tui.widgets.countdown_bar import bar_text, quantized

BAR_CELLS = 6
RESOLVED_LINES = 4  # lines of recent outcomes under the waiting ones at least (the newest first)
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}
GAP = "  "
CONFIRM_AFTER_SECONDS = 60  # with confirm_approvals, a yes with more time than this left asks once more


def countdown_bar(approval: Approval, now: int, cells: int = BAR_CELLS) -> str:
    """A text bar that empties as the deadline nears, then the time left."""
    span = max(1, approval.expires_at - approval.requested_at)
    left = approval.seconds_left(now)
    return bar_text(quantized(left), span, cells) + f" {coarse_span(left)}"


def outcome_lines(approval: Approval, width: int) -> list[list[str | tuple[str, str]]]:
    """A settled approval as the recent outcomes show it within `width`: its outcome, the call (the identifying
    argument first and whole) and where the answer came from (console, CLI, ntfy, Telegram, deadline); over
    more lines only where one does not hold them, nothing cut."""
    outcome: tuple[str, str] = (f"{approval.outcome:<8}", OUTCOME_STYLE.get(approval.outcome or "", ""))
    via = f" · {VIA_SHORT.get(approval.answered_via, approval.answered_via)}" if approval.answered_via else ""
    asked = request_view(approval)
    if asked.call is None:  # a question: its words on the one line, as far as they go (the detail has them all)
        return [[outcome, asked.compact(), (via, "dim")]]
    call = asked.brief(width - len(outcome[0]) - len(via))
    if len(outcome[0]) + len(call) + len(via) <= width:
        return [[outcome, call, (via, "dim")]]
    beside = width - len(outcome[0])
    lines: list[list[str | tuple[str, str]]]
    if len(identifier_text(asked.call[0])) + 1 <= beside:  # the tool's name and "(" beside the outcome
        lines = [[line] for line in asked.brief_lines(beside)]
        lines[0].insert(0, outcome)
    else:
        lines = [[outcome]]
        lines += [[line] for line in asked.brief_lines(width)]
    for line in (lines[-1], lines[0]):
        if sum(cell_len(part if isinstance(part, str) else part[0]) for part in line) + len(via) <= width:
            line.append((via, "dim"))
            return lines
    return [*lines, [(via.removeprefix(" "), "dim")]] if via else lines


def approval_cell(approval: Approval, now: int, width: int, lines: int = 12) -> tuple[Text, int]:
    """The row for one approval and its height: what it asks (the tool call with every argument named, or a
    question in its words), the countdown and request id, and where the run that asks came from. On one line
    when it all fits; else wrapped, never cut: a narrow pane (80 columns shares the width with two other panes)
    shows the whole call over as many lines as it takes, long values shortened in their middle."""
    what = request_view(approval)
    bar = countdown_bar(approval, now)
    ident = terminal_safe(approval.request_id)
    origin = what.origin
    where = f"  {origin.short()}" if origin else ""
    where_style = "" if origin is None or origin.trusted else "$text-warning"
    asks = f"“{what.compact()}”" if what.is_question else what.compact()  # a question in quotes, in italics
    asks_style = "italic" if what.is_question else ""
    one_line = f"{bar:<{BAR_CELLS + 6}}{GAP}{asks}{where}{GAP}{ident}"
    if len(one_line) <= width:
        return Text.assemble(f"{bar:<{BAR_CELLS + 6}}{GAP}", (asks, asks_style), (where, where_style),
                             (f"{GAP}{ident}", "dim")), 1
    where_lines = [] if origin is None else wrapped(origin.short(), width, rest="  ")
    # Long values are shortened in their middle until the whole row fits the pane's height (every argument's
    # name stays whatever the size); the approval's screen shows every value whole.
    room = max(1, lines - 1 - len(where_lines))
    value_limit = max(MIN_VALUE, 3 * width)
    asks_lines = _asks_lines(what, width, value_limit)
    while len(asks_lines) > room and value_limit > MIN_VALUE:
        value_limit = max(MIN_VALUE, value_limit * 3 // 4)
        asks_lines = _asks_lines(what, width, value_limit)
    parts: list[str | tuple[str, str]] = []
    for line in asks_lines:
        parts += [(line, asks_style), "\n"]
    # The request id is what the owner answers by (`approve ID`): never cut. Beside the countdown when both fit,
    # else on lines of its own.
    ident_lines = [f"{bar} {ident}"] if len(bar) + 1 + len(ident) <= width else \
        [bar, *(ident[i:i + max(1, width)] for i in range(0, len(ident), max(1, width)))]
    parts.append(("\n".join(ident_lines), "dim"))
    for line in where_lines:
        parts += ["\n", (line, where_style)]
    return Text.assemble(*parts), len(asks_lines) + len(ident_lines) + len(where_lines)


ROOMY_CALL = 60  # characters of a call on one line past which the pane asks for more room while it waits


def wants_room(view: ApprovalsView) -> bool:
    """Whether a waiting call is too long for the pane at its usual size: the console then gives the pane more
    room (taller, wider) until it is answered. Decided by what is asked, not by the pane's size, so growing
    the pane cannot make it shrink again."""
    return any(not what.is_question and len(what.compact()) > ROOMY_CALL
               for what in map(request_view, view.pending))


def _asks_lines(what: RequestView, width: int, value_limit: int) -> list[str]:
    if what.is_question:
        return wrapped(f"“{cut_middle(what.question or what.action, 2 * value_limit)}”", width, rest=" ")
    return what.lines(width, value_limit)


def at(view: ApprovalsView, now: int) -> ApprovalsView:
    """The same approvals seen at a later second (their countdowns move), without reading the file: the same
    view while no countdown's text moves (past ten minutes they count whole minutes), so nothing is redrawn."""
    if all(countdown_bar(approval, now) == countdown_bar(approval, view.now) for approval in view.pending):
        return view
    return replace(view, now=now)


class ApprovalsPane(Vertical):
    ALLOW_MAXIMIZE = True  # z zooms it (MainScreen.action_zoom)
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

    view: reactive[ApprovalsView | None] = reactive(None, init=False, repaint=False)  # the watcher updates what changed

    def __init__(self, host: PaneHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.border_title = "Approvals"
        self._rows: list[tuple[str, Text, int]] = []
        self._width = 0  # the width the rows were laid out for: a new width lays them out again
        self.toasts: dict[str, Notification] = {}  # request id -> its "Approval needed" toast
        self._reads = ReadOrder()

    async def reload(self) -> None:
        ticket = self._reads.begin()
        view = await self.host.read(read_approvals(self.host.clock.now()))
        if not self._reads.may_show(ticket):
            return  # a read begun after this one has shown newer facts
        self.view = view
        self._drop_settled_toasts({a.request_id for a in view.pending})
        # A waiting call too long for the pane gets the room to show all it asks: the row of panes it sits in
        # grows (app.tcss: #bottom.-asking).
        if self.parent is not None:
            self.parent.set_class(wants_room(view), "-asking")

    def tick(self, now: int) -> None:
        if self.view is not None and self.view.pending:
            self.view = at(self.view, now)

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
        waiting = len(view.pending) if view.waiting is None else view.waiting
        subtitle = f"{waiting} waiting" + (f", the {len(view.pending)} soonest shown" if waiting > len(view.pending)
                                           else "")
        if self.border_subtitle != subtitle:
            self.border_subtitle = subtitle
        self._show_resolved(view)
        self._show_stranded(view)
        if previous is None:
            return
        # Approvals that were not waiting in the previous view (none on the first view: nothing arrived), and
        # those that were and have since expired unanswered.
        waiting_before = {a.request_id for a in previous.pending}
        arrived = [a for a in view.pending if a.request_id not in waiting_before]
        expired = [a for a in view.resolved if a.outcome == "expired" and a.request_id in waiting_before]
        if arrived:
            self._say_arrived(arrived)
        for approval in expired:
            self.notify(f"{request_view(approval).compact()} ({approval.request_id}) expired unanswered",
                        title="Approval expired", severity="warning", timeout=8)

    def _say_arrived(self, approvals: list[Approval]) -> None:
        """A new question must not go unseen: a toast (and the terminal's bell when the config asks)."""
        host = self.host
        yes, no = host.key_for("console.approve"), host.key_for("console.decline")
        keys = f"{yes} / {no} answer it, enter opens it" if yes and no else "enter opens it"
        for approval in approvals[:3]:
            what = request_view(approval)
            where = f"\n{what.origin.short()}" if what.origin else ""
            asks = f"“{what.compact()}”" if what.is_question else what.compact()
            self.toasts[approval.request_id] = host.toast(
                f"{asks}{where}\n{approval.request_id} · {keys}",
                title=QUESTION_OPENING if what.is_question else APPROVAL_OPENING, severity="warning", timeout=20)
        if len(approvals) > 3:
            self.notify(f"and {len(approvals) - 3} more", title="Approval needed", severity="warning")
        if host.settings.approval_bell:
            self.app.bell()

    def _drop_settled_toasts(self, waiting: set[str]) -> None:
        """An "Approval needed" toast goes once its approval is settled (here, elsewhere or by the clock)."""
        for request_id in set(self.toasts) - waiting:
            self.host.untoast(self.toasts.pop(request_id))

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
        # The pane's own size, not the table's: on a resize the pane knows its new size first (the table is
        # laid out after), and a row measured for the old size would be cut for nothing or overflow.
        resolved = self.query_one("#approvals-resolved", Static)
        width = max(1, self.content_size.width - 2)  # the cell's own padding
        height = max(4, self.content_size.height - resolved.outer_size.height)
        rows = [(approval.request_id, *approval_cell(approval, view.now, width, height)) for approval in view.pending]
        if width == self._width and rows == self._rows and table.row_count == len(rows):
            # The same text: nothing to redraw. Countdowns past ten minutes change once a minute (coarse_span),
            # so an idle console rebuilds this table once a minute, not every second.
            return
        self._rows, self._width = rows, width
        clear_rows(table)
        self.query_one("#approvals-empty", Static).display = not view.pending
        for request_id, cell, height in rows:
            table.add_row(cell, key=request_id, height=height)
        measure_now(table, "approval", [cell for _, cell, _ in rows])
        if not view.pending:
            return
        index = next((i for i, a in enumerate(view.pending) if keep and a.request_id == keep.request_id), 0)
        table.move_cursor(row=index, animate=False, scroll=False)

    @property
    def laid_out(self) -> bool:
        """Whether the rows were laid out for the pane's present width (a resize lays them out after it)."""
        return self._width == max(1, self.content_size.width - 2)

    def redraw(self) -> None:
        """Lay the rows out again even if their text is the same (settle: a screen drawn the same every time)."""
        self._rows, self._width = [], 0
        self._render_rows(self.selected())

    def _show_resolved(self, view: ApprovalsView) -> None:
        """The recent outcomes, each leading with the argument that identifies what was acted on, whole
        (brief_call): on one line where it fits, else the call over lines of its own (RequestView.brief_lines)."""
        width = max(12, self.content_size.width)
        # With nothing waiting, the outcomes may have the pane's room but the table's least; else RESOLVED_LINES.
        room = RESOLVED_LINES if view.pending else max(RESOLVED_LINES, self.content_size.height - 4)
        lines: list[list[str | tuple[str, str]]] = [
            [("recent", "dim") if view.resolved else ("nothing resolved yet", "dim")]]
        for approval in view.resolved[:room]:
            entry = outcome_lines(approval, width)
            if len(lines) > 1 and len(lines) - 1 + len(entry) > room:
                break  # as many as have room, the newest first: never a cut one
            lines += entry
        resolved = self.query_one("#approvals-resolved", Static)
        resolved.styles.max_height = room + 1
        show(resolved,
             Content.assemble(*[part for index, line in enumerate(lines) for part in (["\n"] if index else []) + line]))

    @on(Resize)
    def _resized(self) -> None:
        keep = self.selected()
        self.call_after_refresh(self._render_rows, keep)
        if self.view is not None:
            self.call_after_refresh(self._show_resolved, self.view)

    # --- the approval flow: y / n here, enter opens the approval's screen, the detail's y / n -----------
    @on(DataTable.RowSelected, "#approvals-table")
    def _approval_selected(self, message: DataTable.RowSelected) -> None:
        message.stop()
        self.open_selected()

    @work(exclusive=True, group="approval-screen")
    async def open_selected(self) -> None:
        """The highlighted approval on its own screen; answering there is the same as y / n here."""
        approval = self.selected()
        if approval is None:
            self.notify("No approval is waiting", severity="warning")
            return
        host = self.host
        view = await host.read(read_approval(approval.request_id))
        if view is None:
            return
        request_id = approval.request_id
        from console.tui.screens.approval import ApprovalScreen  # the modal screens load when first opened

        answer = await self.app.push_screen_wait(ApprovalScreen(
            view, host.clock.now(), ZoneInfo(host.settings.timezone), clock=host.clock,
            reread=lambda: host.read(lambda store: store.approval(request_id))))
        if answer in ("yes", "no"):
            await self.answer(approval, answer)

    async def answer_selected(self, answer: str) -> None:
        approval = self.selected()
        if approval is None:
            self.notify("No approval is waiting", severity="warning")
            return
        await self.answer(approval, answer)

    async def answer(self, approval: Approval, answer: str) -> None:
        """Every y / n of the console comes here. With `confirm_approvals` set, a yes with more than a minute left
        to think asks once more (a stray key must not refund an order); a yes about to expire does not wait."""
        left = approval.expires_at - self.host.clock.now()
        if answer == "yes" and self.host.settings.confirm_approvals and left > CONFIRM_AFTER_SECONDS:
            async def confirmed(sure: bool | None) -> None:
                if sure:
                    await self._settle_answer(approval, answer)

            question = (f"Approve {request_view(approval).compact()} ({approval.request_id})? "
                        f"It has {span(left)} left to answer.")
            from console.tui.screens.confirm import ConfirmScreen

            self.app.push_screen(ConfirmScreen(question, yes_label="Approve", destructive=True), confirmed)
            return
        await self._settle_answer(approval, answer)

    async def _settle_answer(self, approval: Approval, answer: str) -> None:
        outcome = await self.host.engine.answer(approval.request_id, answer)
        self.host.mark("approvals", "events")
        if outcome == answer:
            self.notify(f"{request_view(approval).compact()}: {outcome}", title="Answered")
        else:
            self.notify(f"{request_view(approval).compact()}: the outcome that stands is {outcome}", title="Too late",
                        severity="warning")
