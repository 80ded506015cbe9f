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

from console.agents.base import ApprovalRequest, RunContext, expires_in_words
from console.core import Event

DIGEST_TIMER_ID = "daily-digest"
DAY = 86400
_RISKY = re.compile(r"\b(refund|deploy|delete|drop|pay|transfer|merge|rollback|shutdown)\b", re.IGNORECASE)


class PoisonEventError(RuntimeError):
    """The payload asks the agent to fail: the run fails on every attempt."""


class OfflineAgent:
    name = "offline"

    def run(self, ctx: RunContext) -> None:
        for event in ctx.events:
            if isinstance(event.payload, dict) and event.payload.get("poison"):
                raise PoisonEventError(f"event {event.id} ({event.source}/{event.source_id}) is marked as poison")
        chats: list[str] = []
        lines: list[str] = []
        asked: list[tuple[str, ApprovalRequest]] = []
        for event in ctx.events:
            if event.source == "chat":
                text = _chat_text(event)
                if _RISKY.search(text):
                    request = ctx.ask(text, {"event": event.id, "text": text}, event=event)
                    asked.append((f"Approval needed [{request.request_id}]: {text} "
                                  f"({expires_in_words(request.expires_in)})", request))
                else:
                    chats.append(text)
            elif isinstance(event.payload, dict) and "long_task" in event.payload:
                lines.append(self._long_task(ctx, event, event.payload["long_task"]))
            elif event.source == "approval":
                lines.append(self._resume(ctx, event))
            elif event.source == "timer":
                line = self._timer(ctx, event)
                if line:
                    lines.append(line)
            else:
                lines.append(summarise_webhook(event))
        if chats:
            lines.insert(0, _reply(chats))
        if lines:  # said with the questions of the same run, if any: they go out at once, in the urgent lane
            ctx.say("\n".join(lines), urgent=bool(asked))
        for announcement, request in asked:  # each question its own message, a card with its own buttons
            ctx.say(announcement, announces=request)

    def _long_task(self, ctx: RunContext, event: Event, chunks: Any) -> str:
        if not isinstance(chunks, int) or not 0 < chunks <= MAX_LONG_TASK:
            return f"Long task of event {event.id} refused: long_task must be 1..{MAX_LONG_TASK} chunks"
        for index in range(chunks):
            ctx.step(f"long:{event.id}:{index}", functools.partial(_work_one_chunk, index), event=event)
        return f"Long task of event {event.id} finished ({chunks} chunks)"

    def _resume(self, ctx: RunContext, event: Event) -> str:
        resumed = ctx.resumed(event)
        if resumed is None or resumed.answer == "unknown":
            return f"Nothing done: approval event {event.source_id} has no settled request behind it"
        if resumed.answer == "yes":
            # The action comes from the approvals row: exactly what the owner saw is what runs.
            done = ctx.step(
                f"perform:{resumed.request_id}",
                lambda: {"performed": resumed.action, "at": ctx.now, "by": ctx.holder, "gen": ctx.gen},
                event=event,
            )
            return f"Done: {done['performed']} (approved, {resumed.request_id})"
        if resumed.answer == "expired":
            return f"Nothing done: the approval for '{resumed.action}' expired unanswered ({resumed.request_id})"
        return f"Nothing done: '{resumed.action}' was declined ({resumed.request_id})"

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
