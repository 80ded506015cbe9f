"""The command palette: every console action, each filter, and each theme."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content

from console.core import STATUSES
from console.tui.keys import key_for_id
from console.tui.screens.main import MainScreen
from console.tui.textual_8_2 import keymap
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.events_table import EventsTable

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp

# (title, help, action): the action is run with App.run_action, exactly as its key binding would.
ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("Inject an event", "Open the inject form: source, source id and JSON payload", "inject"),
    ("Show event detail", "Payload, attempt history, journal steps, why it has not run", "detail"),
    ("Approve the selected approval", "Answer yes to the approval highlighted in the approvals pane", "answer('yes')"),
    ("Decline the selected approval", "Answer no to the approval highlighted in the approvals pane", "answer('no')"),
    ("Retry the selected dead event", "Or every marked one (space marks): back to pending with a fresh attempt "
     "budget", "retry"),
    ("Discard the selected dead event", "Or every marked one: kept for the record, never run again (asks first)",
     "discard"),
    ("Undo the last action", "This console's last discard (every event of it dead again, not run), forgotten note, "
     "deleted timer or schedule", "undo"),
    ("Find events and outbox messages", "Search source, source id, payload text and error; open what is found",
     "search"),
    ("Read outbox messages", "The newest outbox messages, each openable in full", "outbox_messages"),
    ("Pick the filter from a list", "Each status with its count, each source", "pick_filter"),
    ("Sort the events", "Newest or oldest first, by status, by source (each turned round too)", "sort"),
    ("Retry all dead events matching the filter", "Asks for confirmation with the exact count", "retry_all"),
    ("Set the budgets", "Daily and monthly US dollars for model calls, stored in the inbox (agent-console budget)",
     "budget"),
    ("Show the timers", "Next fire and catch-up policy of each timer; pause, resume or run one now", "timers"),
    ("Show the spend", "Spend per day over 30 days, per model, as a bar chart against the daily budget", "spend"),
    ("Show the agent's notes", "Each note with where it came from (yours, a trusted run, an untrusted one); drop one",
     "notes"),
    ("Zoom the focused pane", "It fills the screen; z again puts it back", "zoom"),
    ("Show or hide the log pane", "The engine's log lines, live, under the events", "log_pane"),
    ("Stall or resume the worker", "Stop renewing the lease so another console takes over", "stall"),
    ("Quit, asking first while a run is in progress", "The q key; Textual's own Quit does not ask",
     "request_quit"),
    ("Inject a chat message", "A chat event with a unique source id", "quick_chat"),
    ("Inject a poison event", 'A {"poison": true} event: it fails every attempt and goes dead', "quick_poison"),
    ("Redeliver the last event", "The same source and source id again: the duplicate is refused", "quick_redeliver"),
    ("Inject a message that needs approval", 'Chat text "refund order 881"', "quick_approval"),
    ("Cycle the status filter", "all → pending → running → done → dead → discarded", "cycle_status"),
    ("Cycle the source filter", "all sources → each source in the inbox", "cycle_source"),
    ("Jump to the newest events", "Follow new events live", "newest"),
    ("Jump to the oldest events", "Page from the start of the inbox", "oldest"),
    ("Mark or unmark the selected event", "For retry (r) and discard (D) of several", "toggle_mark"),
    ("Mark a range downwards", "This event and the one below, moving down", "mark_range('down')"),
    ("Mark a range upwards", "This event and the one above, moving up", "mark_range('up')"),
    ("Unmark every event", "Clear the marks", "clear_marks"),
)
# The palette's actions that are the events table's own (run on the table, as its keys run them).
TABLE_ACTIONS = {"newest": "events.newest", "oldest": "events.oldest", "toggle_mark": "events.mark",
                 "clear_marks": "events.unmark", "mark_range('down')": "events.mark_down",
                 "mark_range('up')": "events.mark_up"}


def key_of(app: ConsoleApp, action: str) -> str | None:
    """The key that runs a palette action, after `[keys]` remaps (the palette teaches the keys)."""
    own = {"detail": "events.detail", **TABLE_ACTIONS}
    binding_id = own.get(action) or next(
        (b.id for b in (*app.BINDINGS, *MainScreen.BINDINGS) if isinstance(b, Binding) and b.action == action), None)
    return None if binding_id is None else key_for_id(binding_id, keymap(app))


def run(app: ConsoleApp, action: str) -> Callable[[], object]:
    if action in TABLE_ACTIONS:
        return partial(app.run_action, action, app.query_one(EventsTable))
    return partial(app.run_action, action, app.main if hasattr(MainScreen, f"action_{action.split('(')[0]}") else app)


def with_key(title: Content, key: str | None) -> Content:
    return title if key is None else title + Content.styled(f"  {key}", "$text-accent bold")


class ConsoleCommands(Provider):
    def _commands(self) -> list[tuple[str, str, str | None, Callable[[], object]]]:
        app: ConsoleApp = self.app  # type: ignore[assignment]
        found: list[tuple[str, str, str | None, Callable[[], object]]] = [
            (title, help_text, key_of(app, action), run(app, action))
            for title, help_text, action in ACTIONS
            if app.main.check_action(action.split("(")[0], ()) is not False  # the test keys: only in --demo
        ]
        events = app.query_one(EventsPane)
        for status in (None, *STATUSES):
            found.append((f"Filter: {status or 'all statuses'}", "Show only events in this state", None,
                          partial(events.set_status_filter, status)))
        for source in (None, *app.known_sources):
            found.append((f"Filter: {'all sources' if source is None else 'source ' + source}",
                          "Show only events from this source", None, partial(events.set_source_filter, source)))
        for name in sorted(app.console_themes):
            found.append((f"Theme: {name}", "Switch the colour theme (remembered)", None,
                          partial(app.use_theme, name)))
        return found

    async def discover(self) -> Hits:
        for title, help_text, key, command in self._commands():
            yield DiscoveryHit(with_key(Content(title), key), command, text=title, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, key, command in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, with_key(matcher.highlight(title), key), command, text=title, help=help_text)
