"""A one-line countdown: a label, a bar that empties as a deadline nears, and the time left in words."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from console.timefmt import SECONDS_SHOWN_BELOW, coarse_span

FULL, EMPTY = "▰", "▱"


def quantized(seconds: int) -> int:
    """`seconds` as coarse_span shows it: rounded down to the minute from ten minutes up (a view that holds the
    quantized value compares equal within the minute, and nothing is redrawn)."""
    return seconds if seconds < SECONDS_SHOWN_BELOW else seconds - seconds % 60


def bar_cells(left: int, span: int, cells: int) -> tuple[int, int]:
    """(full, empty) cells for `left` seconds of a `span`-second countdown: full when it starts, empty at zero."""
    cells = max(0, cells)
    full = round(cells * min(max(0, left), span) / max(1, span))
    return full, cells - full


def bar_text(left: int, span: int, cells: int) -> str:
    full, empty = bar_cells(left, span, cells)
    return FULL * full + EMPTY * empty


@dataclass(frozen=True)
class Countdown:
    """What a CountdownBar shows. left None: nothing counts down, and `idle` says why."""

    left: int | None
    span: int = 1
    label: str = ""
    prefix: str = ""  # before the time left: "in " for a send, "" for a lease
    idle: str = ""
    done: str = "now"  # the time-left text once it reaches zero ("lapsed" for a lease)


class CountdownBar(Widget):
    """`left` of `span` seconds as a bar that fills the width left over by its label and its time text."""

    DEFAULT_CSS = """
    CountdownBar {
        height: 1;
        width: 1fr;
    }
    """

    countdown: reactive[Countdown] = reactive(Countdown(None), layout=False)

    def render(self) -> Content:
        countdown = self.countdown
        label = (countdown.label, "$text-muted")
        if countdown.left is None:
            return Content.assemble(label, countdown.idle)
        left = max(0, countdown.left)
        when = f" {countdown.done}" if left == 0 else f" {countdown.prefix}{coarse_span(left)}"
        full, empty = bar_cells(left, countdown.span, self.size.width - len(countdown.label) - len(when))
        return Content.assemble(label, (FULL * full, "$accent"), (EMPTY * empty, "$foreground 30%"),
                                (when, "$text-warning" if left == 0 else ""))
