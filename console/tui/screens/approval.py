"""One approval, opened from the approvals pane: the exact call it is bound to (the tool and its full
arguments), where the run that asks came from, the conversation so far, and y / n to answer it here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import tzinfo
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.clock import Clock
from console.core import Approval, StoreError
from console.textsafe import terminal_safe
from console.timefmt import via_in_words
from console.trust.callview import cut_middle, ordered, origin_line, request_view
from console.tui.detail import clock_text
from console.tui.read_only import read_only
from console.tui.reads import ApprovalView
from console.tui.transcript import Line

Part = str | tuple[str, str]
REQUEST_WORDS = 400  # characters of the asking event's words shown beside the call
LINE_STYLE = {"turn": "bold", "model": "", "call": "$text-primary", "result": "dim", "note": "dim italic"}


TICK_SECONDS = 1.0
OUTCOME_STYLE = {"yes": "bold $text-success", "no": "bold $text-error", "expired": "bold $text-muted"}


class ApprovalScreen(ModalScreen[str | None]):
    """Dismissed with 'yes' or 'no' when the owner answers here, None when closed unanswered.

    Live while open: given a clock and a way to read the approval again, its countdown ticks each second and
    it is read again, so an answer from elsewhere (another console, the CLI, a phone) or its deadline shows
    as the outcome at once, and y / n go away: nothing here can be answered "too late"."""

    DEFAULT_CSS = """
    ApprovalScreen #approval-dialog { height: 90%; }
    ApprovalScreen #approval-body { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('yes')", "Yes", id="approval.yes"),
        Binding("n", "answer('no')", "No", id="approval.no"),
        Binding("escape,q", "close", "Close", id="approval.close"),
    ]

    def __init__(self, view: ApprovalView, now: int, zone: tzinfo | None = None, *, clock: Clock | None = None,
                 reread: Callable[[], Awaitable[Approval | None]] | None = None) -> None:
        super().__init__()
        self.view = view
        self.now = now
        self.zone = zone
        self.clock = clock
        self.reread = reread
        self._reading = False  # a read of the approval is under way

    def on_mount(self) -> None:
        self._show_state()
        if self.clock is not None:
            self.set_interval(TICK_SECONDS, self.tick)

    async def tick(self) -> None:
        """The clock's second: the countdown moves, and the approval is read again (one row)."""
        assert self.clock is not None
        self.now = self.clock.now()
        # The countdown shows seconds: it moves now, and the read goes on beside it. A read waits its turn on a
        # busy reader, and awaited here it held this tick and every one after it (the interval awaits its
        # callback): the countdown stood still for seconds.
        self._show_state()
        if self.reread is not None and self.view.approval.outcome is None and not self._reading:
            self._reading = True
            self.run_worker(self._read_again(self.reread), group="approval-reread")

    async def _read_again(self, reread: Callable[[], Awaitable[Approval | None]]) -> None:
        """One read of the approval (never two at once); the screen shows what it found."""
        try:
            fresh = await reread()
        except StoreError:
            fresh = None  # a busy or closing file: the next second reads again
        finally:
            self._reading = False
        if fresh is not None and fresh != self.view.approval:
            self.view = replace(self.view, approval=fresh)
            self._show_state()

    def settled(self) -> bool:
        """Answered (here or elsewhere) or past its deadline: nothing to answer any more."""
        approval = self.view.approval
        return approval.outcome is not None or self.now >= approval.expires_at

    def _show_state(self) -> None:
        approval = self.view.approval
        outcome = approval.outcome or ("expired" if self.settled() else None)
        self.query_one("#approval-deadline", Static).update(
            Content.styled(self._deadline(), OUTCOME_STYLE.get(outcome or "", "$text-warning")))
        if outcome is not None:
            for heading in self.query("#approval-call-heading").results(Static):
                heading.update(f"The call it asked about ({'it runs' if outcome == 'yes' else 'nothing runs'}):")
        dialog = self.query_one("#approval-dialog")
        dialog.border_subtitle = "esc close" if self.settled() else "y yes · n no · esc close"
        dialog.set_class(self.settled(), "-settled")
        if approval.outcome is not None or self.settled():
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "answer":
            return not self.settled() and not read_only(self)  # settled (or --read-only): the footer offers only esc
        return True

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        approval = self.view.approval
        with Vertical(id="approval-dialog", classes="dialog") as dialog:
            dialog.border_title = f"Approval {approval.request_id}"
            dialog.border_subtitle = "y yes · n no · esc close"
            with VerticalScroll(id="approval-body"):
                what = request_view(approval)
                asker = "" if approval.event_id is None else f" · asked by event #{approval.event_id}"
                yield Static(Content.assemble(
                    ("Request: ", "bold"), terminal_safe(approval.request_id), (asker, "dim"),
                ), id="approval-title")
                yield Static(id="approval-deadline")
                if what.call is not None:
                    tool, arguments = what.call
                    yield Static("Approve this call? Exactly this runs on yes:", classes="heading",
                                 id="approval-call-heading")
                    yield Static(Content.assemble((terminal_safe(tool), "bold")), id="approval-tool")
                    # Every argument on its own line, its whole value (wrapped by the screen, never cut).
                    yield Static(Content.assemble(*_argument_parts(arguments)), id="approval-arguments")
                else:
                    yield Static("A question for you (y answers yes, n no; nothing runs by itself):",
                                 classes="heading")
                    yield Static(Content.styled(f"“{what.question or what.action}”", "italic"),
                                 id="approval-question")
                if what.schedule:  # a schedule's preview (issue 35): when it fires, for how long, at what cost
                    yield Static("The schedule it makes", classes="heading", id="approval-schedule-heading")
                    yield Static(Content.assemble(*(part for label, text in what.schedule
                                                    for part in ((f"{label}: ", "bold"), f"{text}\n"))),
                                 id="approval-schedule")
                if self.view.request_words:  # the words the call answers, beside it
                    yield Static(Content.assemble(("Asked about: ", "bold"), (
                        f"“{cut_middle(terminal_safe(self.view.request_words), REQUEST_WORDS)}”", "italic")),
                        id="approval-request-words")
                if what.origin is not None:
                    yield Static(Content.styled(origin_line(what.origin),
                                                "dim" if what.origin.trusted else "$text-warning"),
                                 id="approval-origin")
                yield Static("Started by", classes="heading")
                yield Static(self._sources(), id="approval-sources")
                yield Static("The conversation so far", classes="heading")
                yield Static(self._conversation(), id="approval-conversation")

    def _deadline(self) -> str:
        """'waiting · expires 13:39 (in 51s)', 'answered yes from ntfy 13:38 (2m ago)', 'expired 13:39 ...'."""
        approval = self.view.approval
        if approval.outcome == "expired" or (approval.outcome is None and self.now >= approval.expires_at):
            at = approval.resolved_at if approval.outcome == "expired" else approval.expires_at
            return f"expired {clock_text(at, self.now, self.zone)}, unanswered: nothing runs"
        if approval.outcome is not None:
            via = via_in_words(approval.answered_via)
            return (f"answered {approval.outcome}{' ' + via if via else ''} "
                    f"{clock_text(approval.resolved_at, self.now, self.zone)}")
        return f"waiting · expires {clock_text(approval.expires_at, self.now, self.zone)}"

    def _sources(self) -> Content:
        sources = self.view.approval.sources or []
        if not sources:
            return Content.styled("not recorded", "dim")
        parts: list[Part] = []
        for source in sources:
            parts += [(f"event {source.get('event_id')}  ", "bold"),
                      terminal_safe(f"{source.get('source')}/{source.get('source_id')}"), "\n"]
        untrusted = (self.view.approval.details or {}).get("untrusted") if isinstance(
            self.view.approval.details, dict) else None
        if untrusted:
            parts.append((f"from outside ({', '.join(map(str, untrusted))}): an untrusted run", "$text-warning"))
        else:
            parts = parts[:-1]
        return Content.assemble(*parts)

    def _conversation(self) -> Content:
        if not self.view.conversation:
            return Content.styled("no saved conversation (the built-in agent asks without one)", "dim")
        parts: list[Part] = []
        for line in self.view.conversation:
            parts += [_styled(line), "\n"]
        return Content.assemble(*parts[:-1])

    def action_answer(self, answer: str) -> None:
        if not self.settled():
            self.dismiss(answer)

    def action_close(self) -> None:
        self.dismiss(None)


def _argument_parts(arguments: dict[str, object]) -> list[Part]:
    """name = value, one argument a line, identifying and short ones first (console.trust.callview's order)."""
    parts: list[Part] = []
    for name, value in ordered(arguments):
        parts += [(f"  {name}", "bold"), " = ", value, "\n"]
    return parts[:-1] or [("  (no arguments)", "dim")]


def _styled(line: Line) -> Part:
    return (terminal_safe(line.text), LINE_STYLE.get(line.kind, ""))
