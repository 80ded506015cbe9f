"""Event detail: payload, attempt history, journal steps, and why a pending event has not run."""

from __future__ import annotations

import json
from datetime import tzinfo
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.highlight import highlight
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from console.textsafe import json_terminal_safe, terminal_safe
from console.timefmt import via_in_words
from console.tui.detail import DetailView, clock_text

Part = str | tuple[str, str]
STATUS_STYLE = {"pending": "$text-warning", "running": "$text-primary", "done": "$text-success",
                "dead": "$text-error", "discarded": "$text-muted"}
OUTCOME_STYLE = {"yes": "$text-success", "no": "$text-warning", "expired": "$text-error"}
TRANSCRIPT_STYLE = {"turn": "bold", "call": "$text-primary", "result": "dim", "note": "dim italic"}


def payload_json(payload: object) -> str:
    """The payload as indented JSON, with what a terminal would take for a command escaped."""
    return json_terminal_safe(json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True))


class DetailScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="detail.close"),
    ]

    def __init__(self, view: DetailView, now: int, zone: tzinfo | None = None) -> None:
        super().__init__()
        self.view = view
        self.now = now
        self.zone = zone

    def compose(self) -> ComposeResult:
        yield Footer(compact=True)  # this dialog's keys, over the main screen's footer
        event = self.view.event
        with Vertical(id="detail-dialog", classes="dialog") as dialog:
            if event is None:
                dialog.border_title = "Event"
                yield Static(Content(terminal_safe(self.view.reasons[0])), id="detail-missing")
                return
            dialog.border_title = f"Event #{event.id}"
            dialog.border_subtitle = "esc close"
            with VerticalScroll(id="detail-body"):
                yield Static(Content.assemble(
                    (terminal_safe(event.source), "bold"), " / ", terminal_safe(event.source_id), "  ",
                    (event.status, f"bold {STATUS_STYLE.get(event.status, '')}"),
                    (f"  attempts {event.attempts}", "dim"),
                    (f"  gen {event.claim_gen}" if event.claim_gen is not None else "", "dim"),
                    (f"  duplicates refused {event.duplicates}" if event.duplicates else "", "dim"),
                ), id="detail-title")
                yield Static(self._why(), id="detail-why", classes="section")
                yield Static("Payload", classes="heading")
                if event.pruned_at is not None:
                    yield Static(Content.styled(f"pruned {clock_text(event.pruned_at, self.now, self.zone)}", "dim"),
                                 id="detail-payload")
                else:
                    yield Static(highlight(payload_json(event.payload), language="json"), id="detail-payload")
                yield Static("Attempt history", classes="heading")
                yield Static(self._history(), id="detail-history")
                if not self.view.transcript.empty:
                    yield Static("Transcript", classes="heading")
                    yield Static(self._transcript(), id="detail-transcript")
                yield Static("Journal steps", classes="heading")
                yield Static(self._steps(), id="detail-steps")
                yield Static("Model calls", classes="heading")
                yield Static(self._runs(), id="detail-spend")
                if self.view.approvals:
                    yield Static("Approvals", classes="heading")
                    yield Static(self._approvals(), id="detail-approvals")
                if self.view.replies:
                    yield Static("Replies", classes="heading")
                    yield Static(self._replies(), id="detail-replies")

    def _why(self) -> Content:
        event = self.view.event
        title = "Why hasn't this run?" if event is not None and event.status == "pending" else "State"
        parts: list[Part] = [(title, "bold")]
        for reason in self.view.reasons:  # they quote errors and approvals, which quote the sender
            parts += ["\n• ", terminal_safe(reason)]
        return Content.assemble(*parts)

    def _transcript(self) -> Content:
        """The model's turns and each tool call it made: allowed / asked / denied, and what came back."""
        parts: list[Part] = []
        for line in self.view.transcript.lines:
            parts += [(terminal_safe(line.text), TRANSCRIPT_STYLE.get(line.kind, "")), "\n"]
        return Content.assemble(*parts[:-1])

    def _history(self) -> Content:
        if not self.view.history:
            return Content.styled("no attempts yet", "dim")
        parts: list[Part] = []
        for line in self.view.history:
            style = {"error": "$text-error", "dead": "$text-error", "refused": "$text-warning",
                     "lost": "$text-warning", "finish": "$text-success"}.get(line.kind, "")
            parts += [(f"{line.kind:<8}", f"bold {style}"),
                      (f" {clock_text(line.at, self.now, self.zone)}", "dim"),
                      terminal_safe(f"  {line.holder or '-'} gen {line.gen if line.gen is not None else '-'}"),
                      terminal_safe(f"  {line.detail}") if line.detail else "", "\n"]
        return Content.assemble(*parts[:-1])

    def _steps(self) -> Content:
        if not self.view.steps:
            return Content.styled("no journalled steps", "dim")
        parts: list[Part] = []
        for step in self.view.steps:
            parts += [(f"{step.state:<9}", "bold"), terminal_safe(step.idem_key),
                      (f"  gen {step.gen} · ran {step.executions}× · "
                       f"{clock_text(step.claimed_at, self.now, self.zone)}", "dim"),
                      "\n"]
        return Content.assemble(*parts[:-1])

    def _runs(self) -> Content:
        """Each run's tokens and cost (a batch's calls are filed under its first event, as its journal is)."""
        if not self.view.runs:
            return Content.styled("no model calls filed under this event", "dim")
        parts: list[Part] = []
        for run in self.view.runs:
            who = f"{run.holder or '-'} gen {run.gen if run.gen is not None else '-'}"
            parts += [(f"run {clock_text(run.started, self.now, self.zone)}", "bold"),
                      (terminal_safe(f"  {who}"), "dim"), "\n  ", terminal_safe(run.describe()), "\n"]
        return Content.assemble(*parts[:-1])

    def _approvals(self) -> Content:
        """Each approval: what was asked, and its outcome with where the answer came from and when."""
        parts: list[Part] = []
        for trail in self.view.approvals:
            approval = trail.approval
            parts += [(f"{approval.request_id}  ", "bold"), terminal_safe(approval.action), "\n  "]
            if approval.outcome is None:
                parts.append((f"waiting · expires {clock_text(approval.expires_at, self.now, self.zone)}",
                              "$text-warning"))
            else:
                via = via_in_words(approval.answered_via)
                parts += [(approval.outcome, f"bold {OUTCOME_STYLE.get(approval.outcome, '')}"),
                          f" {via}" if via else "",
                          (f" · {clock_text(approval.resolved_at, self.now, self.zone)}", "dim")]
            for answer in trail.phone_answers:  # the ledger says which taps counted and which were refused
                parts += ["\n  ", (f"{answer['channel']}: {answer['answer'] or '?'} → "
                                   f"{answer['verdict'].replace('_', ' ')}"
                                   f"{' (+' + str(answer['repeats']) + ' again)' if answer['repeats'] else ''} · "
                                   f"{clock_text(answer['at'], self.now, self.zone)}", "dim")]
            parts.append("\n")
        return Content.assemble(*parts[:-1])

    def _replies(self) -> Content:
        parts: list[Part] = []
        for message in self.view.replies:
            parts += [(f"{message.status:<8}", "bold"), terminal_safe(" ".join(message.body.split())[:200]), "\n"]
        return Content.assemble(*parts[:-1])

    def action_close(self) -> None:
        self.dismiss(None)
