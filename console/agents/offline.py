"""The built-in offline agent: useful with no network and no key.

- Chat messages: one reply per run, however many messages the burst had.
- GitHub- and Stripe-shaped webhooks: one line each.
- A chat message asking for a risky action ("refund order 881", "deploy web to prod") asks for approval;
  on yes it performs the action once (a journalled step) and reports; on no or expiry it reports that
  nothing was done.
- An event whose payload says {"poison": true} fails the run every time, so retries and dead events can
  be watched.
- The daily digest timer summarises the last day, and stays silent when nothing happened.
- An event with {"long_task": N} works through N one-second chunks, each a journalled step: a run taken
  over mid-way resumes after the last committed chunk instead of starting again (seed 003's checkpoint).
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

from console.agents.base import ApprovalRequest, Resumed, RunContext
from console.agents.errors import EventFailed
from console.agents.gateway import ToolGateway
from console.agents.tools import ToolCall, ToolOutcome, summary
from console.core import Event
from console.trust.provenance import Provenance

DIGEST_TIMER_ID = "daily-digest"
DAY = 86400
_RISKY = re.compile(r"\b(refund|deploy|delete|drop|pay|transfer|merge|rollback|shutdown)\b", re.IGNORECASE)


class PoisonEventError(EventFailed):
    """The payload asks the agent to fail: the run fails on every attempt, and names the event it failed on."""


# What a chat message asks for, mapped onto a tool call through the same policy-checked gateway the Claude
# agent uses: (pattern, the tool's own name, the argument the pattern's group fills). The tool is the first
# one of that name the gateway has: `mcp__<any server>__refund` or a Python tool called `refund`.
_INTENTS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"\brefund\b.*?\border\s+#?(\w+)", re.IGNORECASE), "refund", "order"),
    (re.compile(r"\b(?:look\s*up|status of|where is|check)\b.*?\border\s+#?(\w+)", re.IGNORECASE),
     "lookup_order", "order"),
)


class OfflineAgent:
    name = "offline"

    def __init__(self, tools: ToolGateway | None = None) -> None:
        self.tools = tools or ToolGateway()

    def close(self) -> None:
        self.tools.close()

    def run(self, ctx: RunContext) -> None:
        for event in ctx.events:
            if isinstance(event.payload, dict) and event.payload.get("poison"):
                raise PoisonEventError(
                    event.id, f"event {event.id} ({event.source}/{event.source_id}) is marked as poison")
        chats: list[str] = []
        lines: list[str] = []
        asked: list[tuple[str, ApprovalRequest]] = []
        reports_outcome = False  # what became of an answered approval: the owner waits to hear it
        for event in ctx.events:
            if event.source != "approval":  # an answer's trust is its resumed conversation's, not told here
                ctx.record_trust(Provenance.of_events([event]).tainted_by)
            if event.source == "chat" or (isinstance(event.payload, dict)
                                          and event.payload.get("kind") in ("chat", "email")
                                          and event.source != "approval"):
                text = _chat_text(event)
                call = self._intent(event, text)
                if call is not None:
                    said, request = self._act(ctx, event, call)
                    if request is not None:
                        asked.append((said, request))
                    else:
                        lines.append(said)
                else:
                    chats.append(text)
            elif isinstance(event.payload, dict) and "long_task" in event.payload:
                lines.append(self._long_task(ctx, event, event.payload["long_task"]))
            elif event.source == "approval":
                said, request = self._resume(ctx, event)
                if request is not None:
                    asked.append((said, request))
                elif said:  # empty: the gateway told the owner itself (a call the policy denies by now)
                    lines.append(said)
                reports_outcome = True
            elif event.source == "timer":
                line = self._timer(ctx, event)
                if line:
                    lines.append(line)
            else:
                lines.append(summarise_webhook(event))
        if chats:
            lines.insert(0, _reply(chats))
        if lines:  # said with the questions of the same run, or an approval's outcome: at once, in the urgent lane
            ctx.say("\n".join(lines), urgent=bool(asked) or reports_outcome)
        for _said, request in asked:  # each question its own message, a card with its own buttons
            ctx.announce(request)

    def _intent(self, event: Event, text: str) -> ToolCall | None:
        """The tool call a chat message asks for: a known intent whose tool exists, else a risky request
        as a question to the owner, else None (just a message)."""
        for pattern, tool, argument in _INTENTS:
            found = pattern.search(text)
            if found is None:
                continue  # only a message that asks for something needs the tools (and starts the servers)
            catalogue, _unavailable = self.tools.catalogue()
            name = next((n for n in catalogue if n == tool or n.endswith(f"__{tool}")), None)
            if name is not None:
                return ToolCall(f"chat-{event.id}", name, {argument: found.group(1)})
        if _RISKY.search(text):
            return ToolCall(f"chat-{event.id}", "ask_owner", {"question": text})
        return None

    def _act(self, ctx: RunContext, event: Event, call: ToolCall) -> tuple[str, ApprovalRequest | None]:
        """The line to report a call, and the request it announces when the call asked the owner."""
        outcome = self.tools.call(ctx, call, event=event, sources=ctx.sources([event]),
                                  provenance=Provenance.of_events([event]))
        if outcome.outcome == "deferred":
            return "", next(a for a in ctx.approvals if a.request_id == outcome.request_id)
        if outcome.outcome == "done":
            return f"{summary(call.name, call.arguments)}: {outcome.text}", None
        if outcome.outcome == "unknown":
            return f"Not known whether it happened: {summary(call.name, call.arguments)}: {outcome.text}", None
        return f"Could not {summary(call.name, call.arguments)}: {outcome.text}", None

    def _long_task(self, ctx: RunContext, event: Event, chunks: Any) -> str:
        if not isinstance(chunks, int) or not 0 < chunks <= MAX_LONG_TASK:
            return f"Long task of event {event.id} refused: long_task must be 1..{MAX_LONG_TASK} chunks"
        for index in range(chunks):
            ctx.step(f"long:{event.id}:{index}", functools.partial(_work_one_chunk, index), event=event)
        return f"Long task of event {event.id} finished ({chunks} chunks)"

    def _resume(self, ctx: RunContext, event: Event) -> tuple[str, ApprovalRequest | None]:
        """The line reporting an approval's outcome, and the request it announces when the approved call's
        outcome is unknown and the owner is asked whether to run it again."""
        resumed = ctx.resumed(event)
        if resumed is None or resumed.answer == "unknown":
            return f"Nothing done: approval event {event.source_id} has no settled request behind it", None
        # The call comes from the approvals row: exactly what the owner saw is what runs, once, in the asking
        # run's trust as the row keeps it (its origin).
        provenance = Provenance.restored(None, sources=resumed.sources, origin=resumed.origin)
        try:
            outcome = self.tools.execute_approved(ctx, resumed, event=event, provenance=provenance)
        finally:
            ctx.record_trust(provenance.tainted_by)
        if outcome.outcome == "deferred":  # announced by run() with the other questions
            return "", next(a for a in ctx.approvals if a.request_id == outcome.request_id)
        return self._reported(resumed, outcome), None

    @staticmethod
    def _reported(resumed: Resumed, outcome: ToolOutcome) -> str:
        if resumed.tool is None:  # a question without a tool behind it
            if resumed.answer == "yes":
                return f"You said yes to '{resumed.action}', but no tool can do that, so nothing was done " \
                       f"({resumed.request_id})"
            if resumed.answer == "expired":
                return f"Nothing done: the question '{resumed.action}' expired unanswered ({resumed.request_id})"
            return f"Nothing done: '{resumed.action}' was declined ({resumed.request_id})"
        if resumed.answer == "expired":
            return f"Nothing done: the approval for {resumed.action} expired unanswered ({resumed.request_id})"
        if resumed.answer != "yes":
            return f"Nothing done: {resumed.action} was declined ({resumed.request_id})"
        if outcome.decision == "denied":
            return ""
        if outcome.outcome == "done":
            return f"Done: {resumed.action} (approved, {resumed.request_id}): {outcome.text}"
        if outcome.outcome == "unknown":
            return f"Not known whether it happened: {resumed.action} (approved, {resumed.request_id}): {outcome.text}"
        return f"Failed: {resumed.action} (approved, {resumed.request_id}): {outcome.text}"

    def _timer(self, ctx: RunContext, event: Event) -> str | None:
        payload: dict[str, Any] = event.payload if isinstance(event.payload, dict) else {}
        if payload.get("task") == "digest":
            return self._digest(ctx, payload)
        skipped = int(payload.get("skipped") or 0)
        note = f" ({skipped} missed runs coalesced)" if skipped else ""
        label = payload.get("text") or payload.get("task") or event.source_id.split("@")[0]
        return f"Timer: {label}{note}"

    def _digest(self, ctx: RunContext, payload: dict[str, Any]) -> str | None:
        skipped = int(payload.get("skipped") or 0)
        since = int(payload.get("scheduled_for", ctx.now)) - DAY * (1 + skipped)
        summary = ctx.store.digest(since=since, now=ctx.now, exclude_source_id_prefix=f"{DIGEST_TIMER_ID}@")
        counts = {k: v for k, v in summary["events"].items() if v}
        if not counts and not summary["dead"] and not summary["expired_approvals"]:
            return None  # nothing happened: a quiet agent says nothing
        days = f"last {1 + skipped} days" if skipped else "last day"
        parts = [f"Digest ({days}): " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))]
        for dead in summary["dead"][:5]:
            parts.append(f"  dead #{dead['id']} {dead['source']}/{dead['source_id']}: {dead['error']}")
        for expired in summary["expired_approvals"][:5]:
            parts.append(f"  expired approval {expired['request_id']}: {expired['action']}")
        return "\n".join(parts)


MAX_LONG_TASK = 600


def _work_one_chunk(index: int) -> dict[str, Any]:
    time.sleep(1)  # stands for one second of real work (a tool call, a build step)
    return {"chunk": index, "finished_at": time.time()}


def _chat_text(event: Event) -> str:
    if isinstance(event.payload, dict):
        return str(event.payload.get("text", "")).strip() or "(empty message)"
    return str(event.payload)


def _reply(texts: list[str]) -> str:
    if len(texts) == 1:
        return f"Noted: {texts[0]}"
    quoted = "; ".join(texts)
    return f"Noted your {len(texts)} messages: {quoted}"


def summarise_webhook(event: Event) -> str:
    """One line for a GitHub- or Stripe-shaped payload; a generic line otherwise."""
    p: dict[str, Any] = event.payload if isinstance(event.payload, dict) else {}
    kind_header = None
    if isinstance(p.get("body"), dict) and set(p) <= {"type", "body"}:
        # The webhook receiver stores {"type": <the provider's event kind>, "body": <the JSON as sent>}.
        kind_header, p = p.get("type"), p["body"]
    repo = (p.get("repository") or {}).get("full_name") if isinstance(p.get("repository"), dict) else None
    if event.source == "github" or repo:
        actor = (p.get("sender") or {}).get("login", "someone") if isinstance(p.get("sender"), dict) else "someone"
        action = p.get("action") or kind_header or "event"
        for kind, label in (("pull_request", "PR"), ("issue", "issue")):
            item = p.get(kind)
            if isinstance(item, dict):
                return f"GitHub: {label} #{item.get('number', '?')} {action} in {repo or '?'} by {actor}: " \
                       f"{item.get('title', '')}".rstrip(": ")
        if "commits" in p or kind_header == "push":
            return f"GitHub: {len(p.get('commits') or [])} commit(s) pushed to {repo or '?'} by {actor}"
        return f"GitHub: {action} in {repo or '?'} by {actor}"
    obj = (p.get("data") or {}).get("object") if isinstance(p.get("data"), dict) else None
    if event.source == "stripe" or (isinstance(p.get("type"), str) and isinstance(obj, dict)):
        kind = p.get("type", "event")
        if isinstance(obj, dict) and isinstance(obj.get("amount"), int):
            amount = f" {obj['amount'] / 100:.2f} {str(obj.get('currency', '')).upper()}".rstrip()
        else:
            amount = ""
        return f"Stripe: {kind}{amount} ({p.get('id', event.source_id)})"
    keys = ", ".join(sorted(p)[:4]) if p else "no fields"
    return f"{event.source}: event {event.source_id} ({keys})"
