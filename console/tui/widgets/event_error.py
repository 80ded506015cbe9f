"""Under the events table: the selected event's whole error, and when it died or is tried again."""

from __future__ import annotations

from datetime import tzinfo

from textual.content import Content
from textual.widgets import Static

from console.core import Event, StrandedAnswer
from console.core.models import death_in_words
from console.textsafe import terminal_safe, terminal_safe_lines
from console.tui.detail import clock_text, human_span
from console.tui.render import show


def error_lines(event: Event, now: int, zone: tzinfo | None = None,
                stranded: StrandedAnswer | None = None) -> list[tuple[str, str]]:
    """(text, style) parts saying what went wrong with event, or that nothing did. stranded: the answer a dead
    approval event carries, said first (on a yes, a call the owner approved that may not have happened)."""
    # A dead or discarded row's updated_at is when it died or was discarded: nothing else writes such a row.
    # Why it died is built from its fields (dead_reason, attempts, error), as the detail and the CLI say it.
    died = death_in_words(event.dead_reason, event.attempts, event.error)
    if event.status == "dead" and stranded is not None:
        return [(f"#{event.id} {stranded.outcome} to {terminal_safe(stranded.action)}: ", "bold"),
                (terminal_safe(stranded.in_words()), "$text-error")]
    if event.status == "dead":
        return [(f"#{event.id} died {clock_text(event.updated_at, now, zone)}: ", "bold"),
                (terminal_safe_lines(died), "$text-error")]
    if event.status == "discarded" and (event.dead_reason is not None or event.error):
        gone = f"#{event.id} discarded {clock_text(event.updated_at, now, zone)}; "
        if event.dead_reason is not None:
            return [(f"{gone}it had died: ", "bold"), (terminal_safe_lines(died), "$text-muted")]
        return [(f"{gone}last error: ", "bold"), (terminal_safe_lines(event.error or ""), "$text-muted")]
    batch_failure = event.batch_failure_in_words()
    if batch_failure is not None:  # a poison event's batch-mate: the run's error was the poison event's
        return [(f"#{event.id} {event.status} · ", "bold"), (batch_failure, "$text-warning")]
    if not event.error:
        return [(f"#{event.id} {event.status} · no error", "$text-muted")]
    if event.status == "pending" and event.attempts:
        wait = event.next_attempt_at - now
        when = f"next try in {human_span(wait)}" if wait > 0 else "its next try is due"
        head = f"#{event.id} failed attempt {event.attempts}, {when}: "
    else:
        head = f"#{event.id} {event.status}, last error: "
    style = "$text-error" if event.status == "pending" else "$text-muted"
    return [(head, "bold"), (terminal_safe_lines(event.error), style)]


def moves_with_clock(event: Event) -> bool:
    """Whether error_lines says something that changes as time passes: when a dead or discarded event went
    ("died 3m ago"), or when a failed one is tried again ("next try in 42s"). The rest is drawn once."""
    return event.status in ("dead", "discarded") or (event.status == "pending" and bool(event.attempts)
                                                      and bool(event.error))


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

    def show(self, event: Event | None, now: int, zone: tzinfo | None = None,
             stranded: StrandedAnswer | None = None) -> None:
        # Called every second (its countdowns move with the clock): drawn only when its words change.
        show(self, Content.assemble(*error_lines(event, now, zone, stranded)) if event is not None else "")
