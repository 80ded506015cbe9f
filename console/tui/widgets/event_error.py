"""Under the events table: the selected event's whole error, and when it died or is tried again."""

from __future__ import annotations

from datetime import tzinfo

from textual.content import Content
from textual.widgets import Static

from console.core import Event
from console.textsafe import terminal_safe_lines
from console.tui.detail import clock_text, human_span


def error_lines(event: Event, now: int, zone: tzinfo | None = None) -> list[tuple[str, str]]:
    """(text, style) parts saying what went wrong with event, or that nothing did."""
    if not event.error:
        return [(f"#{event.id} {event.status} · no error", "$text-muted")]
    # A dead or discarded row's updated_at is when it died or was discarded: nothing else writes such a row.
    if event.status == "dead":
        head = f"#{event.id} died {clock_text(event.updated_at, now, zone)} after {event.attempts} attempt" \
               f"{'s' if event.attempts != 1 else ''}: "
    elif event.status == "discarded":
        head = f"#{event.id} discarded {clock_text(event.updated_at, now, zone)}; it had failed: "
    elif event.status == "pending" and event.attempts:
        wait = event.next_attempt_at - now
        when = f"next try in {human_span(wait)}" if wait > 0 else "its next try is due"
        head = f"#{event.id} failed attempt {event.attempts}, {when}: "
    else:
        head = f"#{event.id} {event.status}, last error: "
    style = "$text-error" if event.status in ("dead", "pending") else "$text-muted"
    return [(head, "bold"), (terminal_safe_lines(event.error), style)]


class EventError(Static):
    """Always two lines high, so moving the cursor never changes how many rows the table holds: a page
    is read for the rows that fit. A longer error scrolls here; the detail (enter) shows it all too."""

    DEFAULT_CSS = """
    EventError {
        height: 2;
        overflow-y: auto;
        padding: 0 1;
        background: $boost;
        scrollbar-size-vertical: 1;
    }
    """

    def show(self, event: Event | None, now: int, zone: tzinfo | None = None) -> None:
        self.update(Content.assemble(*error_lines(event, now, zone)) if event is not None else "")
