"""Event detail: payload, attempt history, journal steps, replies, approvals and why a pending event has not run.

It reads and renders itself: `view` holds the snapshot it shows, re-read every second and whenever the engine
says something changed, so a status, an attempt or a step shows up while it is open. From here r retries the
event, y / n answer its waiting approval, c copies its payload, ] and [ move to the next and previous event."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.highlight import highlight
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.core import Approval, Event
from console.core.inbox import REVIVABLE
from console.core.models import PAYLOAD_DAMAGED
from console.textsafe import json_terminal_safe, terminal_safe
from console.timefmt import span, via_in_words
from console.trust.callview import origin_line, request_view
from console.tui.detail import DetailView, clock_text
from console.tui.read_only import READ_ONLY_WORDS, read_only
from console.tui.rereads import FoldedReads

Part = str | tuple[str, str]
STATUS_STYLE = {"pending": "$text-warning", "running": "$text-primary", "done": "$text-success",
                "dead": "$text-error", "discarded": "$text-muted"}
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}
TRANSCRIPT_STYLE = {"turn": "bold", "call": "$text-primary", "result": "dim", "note": "dim italic"}
HISTORY_STYLE = {"error": "$text-error", "dead": "$text-error", "refused": "$text-warning", "lost": "$text-warning",
                 "batch": "$text-warning", "finish": "$text-success"}
REFRESH_SECONDS = 1.0  # countdowns move, and a change another process made shows within a second


def payload_json(payload: object) -> str:
    """The payload as indented JSON, with what a terminal would take for a command escaped."""
    return json_terminal_safe(json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True))


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class DetailHost:
    """What the screen asks of the console: read an event's detail, find the event beside one in the events
    table, and the console's own retry and answer paths (so a key here does what the same key does there)."""

    load: Callable[[int], Awaitable[DetailView]]
    neighbour: Callable[[int, bool], Awaitable[int | None]]  # (event id, older?) -> the id beside it
    retry: Callable[[Event], Awaitable[None]]
    answer: Callable[[Approval, str], Awaitable[None]]
    restore: Callable[[Event], Awaitable[None]] | None = None  # undo a discard: dead again, not run
    timeline: Callable[[int], Awaitable[None]] | None = None  # open an event's run timeline


def took_words(seconds: int) -> str:
    """How long a step took, from whole-second clock readings: 0 means claimed and committed within one
    second of the clock (so under a second), not "0s"."""
    return "took under 1s" if seconds <= 0 else f"took {span(seconds, sep='')}"


class DetailScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    DetailScreen #detail-dialog { height: 90%; }
    DetailScreen #detail-body { height: 1fr; }
    DetailScreen #detail-why { margin-top: 1; padding: 0 1; background: $boost; }
    DetailScreen .detail-optional { display: none; }
    DetailScreen .detail-optional.-shown { display: block; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="detail.close"),
        Binding("r", "retry", "Retry", id="detail.retry", tooltip="retry this event if it is dead or discarded"),
        Binding("u", "restore", "Restore", id="detail.restore",
                tooltip="undo this event's discard: dead again, not run"),
        Binding("y", "answer('yes')", "Yes", id="detail.approve", tooltip="answer this event's waiting approval yes"),
        Binding("n", "answer('no')", "No", id="detail.decline", tooltip="answer this event's waiting approval no"),
        # Not offered where they would not act (check_action), yet pressed there they say why: these run when
        # the bindings above are hidden (a key's bindings are tried in turn).
        Binding("r", "unoffered('retry')", "", show=False),
        Binding("y", "unoffered('answer')", "", show=False),
        Binding("n", "unoffered('answer')", "", show=False),
        Binding("c", "copy_payload", "Copy", id="detail.copy", tooltip="copy the payload as JSON"),
        Binding("t", "timeline", "Timeline", id="detail.timeline",
                tooltip="this event's runs step by step (model turns, tool calls, approval waits, sends), timed"),
        Binding("right_square_bracket", "step(True)", "Next", id="detail.next", key_display="]",
                tooltip="the next (older) event under the events table's filter"),
        Binding("left_square_bracket", "step(False)", "Prev", id="detail.previous", key_display="[",
                tooltip="the previous (newer) event under the events table's filter"),
    ]

    view: reactive[DetailView] = reactive(DetailView(0, 0, None), init=False)

    def __init__(self, view: DetailView, host: DetailHost, zone: tzinfo | None = None) -> None:
        super().__init__()
        self.host = host
        self.zone = zone
        self.set_reactive(DetailScreen.view, view)
        self._payload_shown: tuple[int, int | None] | None = None  # (event id, pruned_at) the payload shows
        self._target = view.event_id  # the event to read next: this one, or the one ] / [ moved to
        self._reads = FoldedReads(self, self._read, "detail-read")

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        with Vertical(id="detail-dialog", classes="dialog"):
            yield Static(id="detail-missing", classes="detail-optional")
            with VerticalScroll(id="detail-body"):
                yield Static(id="detail-title")
                yield Static(id="detail-why", classes="section")
                yield Static("Payload", classes="heading")
                yield Static(id="detail-payload")
                yield Static("Attempt history", classes="heading")
                yield Static(id="detail-history")
                yield Static("Transcript", id="detail-transcript-heading", classes="heading detail-optional")
                yield Static(id="detail-transcript", classes="detail-optional")
                yield Static("Journal steps", classes="heading")
                yield Static(id="detail-steps")
                yield Static("Model calls", classes="heading")
                yield Static(id="detail-spend")
                yield Static("Approvals", id="detail-approvals-heading", classes="heading detail-optional")
                yield Static(id="detail-approvals", classes="detail-optional")
                yield Static("Replies", id="detail-replies-heading", classes="heading detail-optional")
                yield Static(id="detail-replies", classes="detail-optional")

    def on_mount(self) -> None:
        self.watch_view(self.view)
        self.set_interval(REFRESH_SECONDS, self.refresh_view)

    # --- reading ----------------------------------------------------------------------------------
    def inbox_changed(self) -> None:
        """The engine said something committed (panes.FollowsInbox): read the event again."""
        self.refresh_view()

    def refresh_view(self, event_id: int | None = None) -> None:
        """Read the event again (or another one) and show it (calls while a read is under way fold into one more
        read after it)."""
        if event_id is not None:
            self._target = event_id
        self._reads()

    async def _read(self) -> None:
        self.view = await self.host.load(self._target)

    def watch_view(self, view: DetailView) -> None:
        dialog = self.query_one("#detail-dialog", Vertical)
        event = view.event
        missing = self.query_one("#detail-missing", Static)
        missing.set_class(event is None, "-shown")
        self.query_one("#detail-body").display = event is not None
        if event is None:
            dialog.border_title = "Event"
            missing.update(Content(terminal_safe(view.missing)))
            return
        dialog.border_title = f"Event #{event.id}"
        keys = ["r retry"] * (event.status in REVIVABLE) + ["y/n answer"] * (view.waiting_approval() is not None)
        dialog.border_subtitle = " · ".join([*keys, "t timeline", "c copy", "] next", "[ prev", "esc close"])
        self.refresh_bindings()  # r and y / n are offered only where they do something
        self.query_one("#detail-title", Static).update(self._title(event))
        self.query_one("#detail-why", Static).update(self._why())
        if self._payload_shown != (event.id, event.pruned_at):  # a payload never changes, but for its pruning
            self._payload_shown = (event.id, event.pruned_at)
            self.query_one("#detail-payload", Static).update(
                Content.styled(f"damaged: {PAYLOAD_DAMAGED}; not shown", "bold red") if event.damaged
                else Content.styled(f"pruned {clock_text(event.pruned_at, view.now, self.zone)}", "dim")
                if event.pruned_at is not None else highlight(payload_json(event.payload), language="json"))
        self.query_one("#detail-history", Static).update(self._history())
        self._optional("transcript", None if view.transcript.empty else self._transcript())
        self.query_one("#detail-steps", Static).update(self._steps())
        self.query_one("#detail-spend", Static).update(self._runs())
        self._optional("approvals", self._approvals() if view.approvals else None)
        self._optional("replies", self._replies() if view.replies else None)

    def _optional(self, name: str, content: Content | None) -> None:
        for widget in (self.query_one(f"#detail-{name}-heading"), self.query_one(f"#detail-{name}", Static)):
            widget.set_class(content is not None, "-shown")
        if content is not None:
            self.query_one(f"#detail-{name}", Static).update(content)

    # --- rendering --------------------------------------------------------------------------------
    def _title(self, event: Event) -> Content:
        return Content.assemble(
            (terminal_safe(event.source), "bold"), " / ", terminal_safe(event.source_id), "  ",
            (event.status, f"bold {STATUS_STYLE.get(event.status, '')}"),
            (f"  {plural(event.attempts, 'attempt')}", "dim"),
            (f"  gen {event.claim_gen}" if event.claim_gen is not None else "", "dim"),
            (f"  {plural(event.duplicates, 'duplicate')} refused" if event.duplicates else "", "dim"),
        )

    def _why(self) -> Content:
        why = self.view.why
        if why is None:
            return Content("")
        parts: list[Part] = [(why.title, "bold")]
        for sentence in why.sentences:  # they quote errors and approvals, which quote the sender
            parts += ["\n• ", terminal_safe(sentence)]
        return Content.assemble(*parts)

    def _transcript(self) -> Content:
        """The model's turns and each tool call it made: allowed / asked / denied, and what came back."""
        parts: list[Part] = []
        for line in self.view.transcript.lines:
            parts += [(terminal_safe(line.text), TRANSCRIPT_STYLE.get(line.kind, "")), "\n"]
        return Content.assemble(*parts[:-1])

    def _history(self) -> Content:
        view = self.view
        if not view.history:
            return Content.styled("no attempts yet", "dim")
        parts: list[Part] = []
        for line in view.history:
            parts += [(f"{line.kind:<8}", f"bold {HISTORY_STYLE.get(line.kind, '')}"),
                      (f" {clock_text(line.at, view.now, self.zone)}", "dim"),
                      terminal_safe(f"  {line.holder or '-'} gen {line.gen if line.gen is not None else '-'}"),
                      terminal_safe(f"  {line.detail}") if line.detail else "", "\n"]
        return Content.assemble(*parts[:-1])

    def _steps(self) -> Content:
        """One step a line: its state and key apart, then when it was claimed and how long it took to commit."""
        view = self.view
        if not view.steps:
            return Content.styled("no journalled steps", "dim")
        parts: list[Part] = []
        for step in view.steps:
            took = "not committed" if step.committed_at is None else took_words(step.committed_at - step.claimed_at)
            parts += [(f"{step.state:<10}", "bold"), terminal_safe(step.idem_key),
                      (f"\n{'':<10}{clock_text(step.claimed_at, view.now, self.zone)} · {took} · gen {step.gen}"
                       f" · ran {step.executions}×", "dim"), "\n"]
        return Content.assemble(*parts[:-1])

    def _runs(self) -> Content:
        """Each run's tokens and cost (a batch's calls are filed under its first event, as its journal is)."""
        view = self.view
        if not view.runs:
            return Content.styled("no model calls filed under this event", "dim")
        parts: list[Part] = []
        for run in view.runs:
            who = f"{run.holder or '-'} gen {run.gen if run.gen is not None else '-'}"
            parts += [(f"run {clock_text(run.started, view.now, self.zone)}", "bold"),
                      (terminal_safe(f"  {who}"), "dim"), "\n  ", terminal_safe(run.describe()), "\n"]
        return Content.assemble(*parts[:-1])

    def _approvals(self) -> Content:
        """Each approval: what was asked, and its outcome with where the answer came from and when."""
        view = self.view
        parts: list[Part] = []
        for trail in view.approvals:
            approval = trail.approval
            what = request_view(approval)
            asks = f"question: “{what.compact()}”" if what.is_question else what.compact()
            parts += [(f"{terminal_safe(approval.request_id)}  ", "bold"), asks, "\n  "]
            if what.origin is not None:
                parts += [(origin_line(what.origin), "dim" if what.origin.trusted else "$text-warning"), "\n  "]
            if approval.outcome is None:
                parts.append((f"waiting · expires {clock_text(approval.expires_at, view.now, self.zone)} · y / n "
                              "answer it", "$text-warning"))
            else:
                via = via_in_words(approval.answered_via)
                parts += [(approval.outcome, f"bold {OUTCOME_STYLE.get(approval.outcome, '')}"),
                          f" {via}" if via else "",
                          (f" · {clock_text(approval.resolved_at, view.now, self.zone)}", "dim")]
            for answer in trail.phone_answers:  # the ledger says which taps counted and which were refused
                parts += ["\n  ", (f"{answer['channel']}: {answer['answer'] or '?'} → "
                                   f"{answer['verdict'].replace('_', ' ')}"
                                   f"{' (+' + str(answer['repeats']) + ' again)' if answer['repeats'] else ''} · "
                                   f"{clock_text(answer['at'], view.now, self.zone)}", "dim")]
            parts.append("\n")
        return Content.assemble(*parts[:-1])

    def _replies(self) -> Content:
        parts: list[Part] = []
        for message in self.view.replies:
            lane = " urgent" if message.urgent else ""
            parts += [(f"{message.status:<8}", "bold"), (lane, "$text-warning"),
                      " " if lane else "", terminal_safe(" ".join(message.body.split())[:200]), "\n"]
        return Content.assemble(*parts[:-1])

    # --- acting -----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """r only on a dead or discarded event, y / n only while an approval of it waits: the footer does not
        offer a key that would only say it cannot."""
        event = self.view.event
        if action in ("retry", "answer", "restore") and read_only(self):
            return False
        if action == "restore":
            return self.host.restore is not None and event is not None and event.status == "discarded" \
                and event.pruned_at is None
        if action == "retry":
            return event is not None and event.status in REVIVABLE
        if action == "answer":
            return self.view.waiting_approval() is not None
        if action == "timeline":
            return self.host.timeline is not None and event is not None
        return True

    async def action_unoffered(self, what: str) -> None:
        """r, y or n where the footer does not offer them: say why nothing happens."""
        event = self.view.event
        if event is None:
            return
        if read_only(self):
            self.notify(READ_ONLY_WORDS, severity="warning")
        elif what == "retry":
            await self.host.retry(event)  # refuses, saying which events are retried
        else:
            self.notify(f"No approval of #{event.id} is waiting for an answer", severity="warning")

    async def action_restore(self) -> None:
        event = self.view.event
        if event is None or self.host.restore is None:
            return
        await self.host.restore(event)
        self.refresh_view()

    async def action_retry(self) -> None:
        event = self.view.event
        if event is None:
            return
        await self.host.retry(event)
        self.refresh_view()

    async def action_answer(self, answer: str) -> None:
        event = self.view.event
        approval = self.view.waiting_approval()
        if event is None:
            return
        if approval is None:
            self.notify(f"No approval of #{event.id} is waiting for an answer", severity="warning")
            return
        await self.host.answer(approval, answer)
        self.refresh_view()

    async def action_timeline(self) -> None:
        if self.host.timeline is not None:
            await self.host.timeline(self._target)

    def action_copy_payload(self) -> None:
        event = self.view.event
        if event is None:
            return
        if event.pruned_at is not None or event.damaged:
            why = "is damaged" if event.damaged else "was pruned"
            self.notify(f"The payload of #{event.id} {why}: nothing to copy", severity="warning")
            return
        text = json.dumps(event.payload, indent=2, ensure_ascii=False, sort_keys=True)
        self.app.copy_to_clipboard(text)
        self.notify(f"The payload of #{event.id} is on the clipboard ({plural(len(text), 'character')})",
                    title="Copied", timeout=3)

    async def action_step(self, older: bool) -> None:
        found = await self.host.neighbour(self._target, older)  # where a quick ] before this one went
        if found is None:
            self.notify("This is the oldest event shown" if older else "This is the newest event shown",
                        severity="information", timeout=2)
            return
        self.refresh_view(found)

    def action_close(self) -> None:
        self.dismiss(None)
