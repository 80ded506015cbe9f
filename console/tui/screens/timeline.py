"""A run's timeline (t in an event's detail): the event's runs step by step in time order (each run from its claim,
model turns, tool calls allowed / asked / refused with their outcome, approval waits, replies sent, the waits before
a retry), each with its clock time, how long it took and a bar across the run's span, so where the time went shows
at a glance. Live: read again whenever the engine says something committed, and a step still going grows with the
clock. What it shows is built in tui/timeline.py from the inbox's own records."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, tzinfo
from typing import Any, ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.clock import Clock
from console.core import Store
from console.textsafe import terminal_safe
from console.timefmt import span
from console.tui.rereads import FoldedReads
from console.tui.timeline import RunTimeline, Step, read_timeline

Read = Callable[[Callable[[Store], Any]], Awaitable[Any]]
TICK_SECONDS = 1.0  # a step still going grows with the clock (drawn again, nothing read)
KIND_STYLE = {"run": "$text-muted", "turn": "$text-primary", "call": "$text-success", "approval": "$text-warning",
              "send": "$text-secondary", "retry": "$text-error", "step": "$text-accent"}
HINT_STYLE = {"warning": "$text-warning", "error": "$text-error"}
KIND_WORDS = {"run": "run", "turn": "model", "call": "tool", "approval": "approval", "send": "send",
              "retry": "retry", "step": "step"}
KIND_COLUMN = 100  # from this content width on, a column names each step's kind (the bar's colour says it too)
MIN_BAR, MAX_BAR = 12, 48


def took_text(step: Step, now: int) -> str:
    seconds = step.took(now)
    text = "<1s" if seconds == 0 and step.end is not None else span(seconds)
    return ("…" if step.end is None else "") + text


def bar(step: Step, first: int, last: int, now: int, width: int) -> str:
    """The step's place in the run's span, `width` cells: where it started, as long as it took (at least one
    cell; a moment is a thin mark)."""
    whole = max(1, last - first)
    start = min(width - 1, round((step.start - first) / whole * width))
    end = now if step.end is None else step.end
    length = max(1, round((end - step.start) / whole * width))
    length = min(length, width - start)
    mark = "▏" if end == step.start else "█" * length
    return (" " * start + mark).ljust(width)


def wrap_offsets(text: str, width: int) -> list[int]:
    """Where to break `text` into lines of at most `width` (at a space when there is one): nothing is cut."""
    offsets, start = [], 0
    while len(text) - start > width:
        space = text.rfind(" ", start + 1, start + width + 1)
        start = space + 1 if space > start else start + width
        offsets.append(start)
    return offsets


def step_lines(timeline: RunTimeline, now: int, zone: tzinfo | None, width: int) -> Content:
    """One step a row: its clock time, how long it took, its kind (when there is room), its bar, then what it is
    and how it went, wrapped under itself (never cut: a tool's name and a request id are whole)."""
    if timeline.event is None:
        return Content.styled(f"event #{timeline.event_id} does not exist", "dim")
    if not timeline.steps:
        return Content.styled("Not run yet: nothing to show.", "dim")
    first, last = timeline.bounds(now)
    kinds = width >= KIND_COLUMN
    fixed = 8 + 1 + 6 + 1 + (10 if kinds else 0) + 2 + 1
    cells = max(MIN_BAR, min(MAX_BAR, (width - fixed) // 3))
    room = max(20, width - fixed - cells)
    rows: list[Content] = []
    for step in timeline.steps:
        words = terminal_safe(step.label) + (f"  {terminal_safe(step.outcome)}" if step.outcome else "")
        said = Content(words)
        if step.outcome:
            said = said.stylize(HINT_STYLE.get(step.style, "dim"), len(words) - len(terminal_safe(step.outcome)))
        lines = said.divide(wrap_offsets(words, room))
        head = Content.assemble(
            (datetime.fromtimestamp(step.start, zone).strftime("%H:%M:%S"), "dim"), f" {took_text(step, now):>6} ",
            (f"{KIND_WORDS.get(step.kind, step.kind):<9} " if kinds else "", "bold"),
            ("▕", "dim"), (bar(step, first, last, now, cells), KIND_STYLE.get(step.kind, "")), ("▏", "dim"), " ")
        indent = " " * head.cell_length
        rows += [head + lines[0], *(Content(indent) + line for line in lines[1:])]
    return Content("\n").join(rows)


def summary_line(timeline: RunTimeline, now: int) -> Content:
    """'3 model turns 12s · 2 tool calls 1s · approval waits 1m30s · 1 send 3s · over 1m52s (going on)'."""
    if not timeline.steps:
        return Content("")
    parts: list[str] = []
    for kind, one, many in (("run", "attempt", "attempts"), ("turn", "model turn", "model turns"),
                            ("call", "tool call", "tool calls"), ("approval", "approval wait", "approval waits"),
                            ("send", "send", "sends"), ("retry", "retry wait", "retry waits")):
        count, seconds = timeline.total(kind, now)
        if count:
            parts.append(f"{count} {one if count == 1 else many} {span(seconds)}")
    first, last = timeline.bounds(now)
    going = any(step.end is None for step in timeline.steps)
    return Content.assemble(" · ".join(parts), (f" · over {span(last - first)}" + (" (going on)" if going else ""),
                                                 "dim"))


class TimelineScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    TimelineScreen {
        align: center middle;
    }
    TimelineScreen #timeline-summary {
        height: auto;
    }
    TimelineScreen #timeline-body {
        height: 1fr;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="timeline.close"),
    ]

    view: reactive[RunTimeline | None] = reactive(None, always_update=True, init=False)

    def __init__(self, event_id: int, read: Read, clock: Clock, zone: tzinfo | None = None) -> None:
        super().__init__()
        self.event_id = event_id
        self._read = read
        self._clock = clock
        self._zone = zone
        self._reads = FoldedReads(self, self._reload, "timeline-read")

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)
        with Vertical(id="timeline-dialog", classes="dialog") as dialog:
            dialog.border_title = f"Run timeline · event #{self.event_id}"
            dialog.border_subtitle = "esc close"
            yield Static(id="timeline-summary")
            with VerticalScroll(id="timeline-body"):
                yield Static(id="timeline-steps")

    def on_mount(self) -> None:
        self.inbox_changed()
        self.set_interval(TICK_SECONDS, self._tick)

    def inbox_changed(self) -> None:
        """Read again (panes.FollowsInbox)."""
        self._reads()

    async def _reload(self) -> None:
        self.view = await self._read(read_timeline(self.event_id, now=self._clock.now()))

    def _tick(self) -> None:
        view = self.view
        if view is not None and any(step.end is None for step in view.steps):
            self._draw(view)

    def watch_view(self, view: RunTimeline | None) -> None:
        if view is not None:
            self._draw(view)

    def on_resize(self, event: events.Resize) -> None:
        if self.view is not None:
            self._draw(self.view)

    def _draw(self, view: RunTimeline) -> None:
        now = max(view.now, self._clock.now())
        # the dialog's width (app.tcss: 95%, at most 140) less its border, padding and scrollbar: known from the
        # screen's size before the first layout, so the first drawing is already the right one
        width = min(140, self.size.width * 95 // 100) - 6
        self.query_one("#timeline-summary", Static).update(summary_line(view, now))
        self.query_one("#timeline-steps", Static).update(step_lines(view, now, self._zone, width))

    def action_close(self) -> None:
        self.dismiss(None)
