"""Caps on what the agent does unasked: world-changing tool calls per run and per hour, and messages to the
owner per hour (StoreOptions: max_tool_calls_per_run, max_tool_calls_per_hour, max_messages_per_hour; 0 turns
a cap off).

Every count is read from the inbox (the cap_uses ledger), never from memory, so a restart, a retry or a
takeover carries on counting where the last run stopped. Every write is fenced like the rest of a run's
writes: a call's slot is taken in one transaction that checks the lease holder and generation, and a
message is counted (or held) by the run's fenced finish.

- A call past a cap is not made: take_call_slot answers which cap it reached, and the gateway turns the call
  into an approval instead. A call is counted once by its journal step, so a replayed step costs no slot.
- A message past the cap is held (held_messages), neither sent nor dropped, until the owner releases it. So is
  the card of a question or approval asked by a run that read untrusted content (issue 31: 8 GitHub deliveries
  must not make 8 cards past a cap of 3): its request waits in the console and `status`, answerable there, and
  the card goes out with its buttons if the owner releases it. A trusted run's card is counted, never held.
- The owner is told once per crossing: a notice is queued only when none for that cap was queued within its
  window (an hour for the hourly caps; ever, for one event's per-run cap).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from console.core.base import StaleGeneration, StoreBase
from console.core.models import CapNotice, OutboxDraft

HOUR = 3600
RUN_CAP = "max_tool_calls_per_run"
HOURLY_CALL_CAP = "max_tool_calls_per_hour"
MESSAGE_CAP = "max_messages_per_hour"


@dataclass(frozen=True)
class CapReached:
    """A call that may not run unasked: the cap it reached (the setting's name) and its limit."""

    cap: str
    limit: int
    event_id: int

    @property
    def notice_key(self) -> str:
        """A per-run cap is announced once per event; an hourly one once per crossing (an hour)."""
        return f"{self.cap}:{self.event_id}" if self.cap == RUN_CAP else self.cap

    @property
    def window(self) -> int | None:
        """How long one notice of this cap stands (None: for ever)."""
        return None if self.cap == RUN_CAP else HOUR

    # What the owner is told of it (its rule's words, the notice) is trust's: console/trust/caps.py.


@dataclass(frozen=True)
class HeldMessage:
    id: int
    body: str
    urgent: bool
    created_at: int
    event_id: int | None
    approval_id: str | None = None  # the request a held card announces


class CapsMixin(StoreBase):
    def take_call_slot(
        self,
        holder: str,
        gen: int,
        *,
        step_key: str,
        tool: str,
        event_id: int,
        run_event_ids: Sequence[int],
        now: int,
        capped: bool = True,
    ) -> CapReached | None:
        """Count one world-changing call before it is made, or answer the cap it would pass (nothing is then
        written). The per-run count is of the calls filed under the run's events, so a retried run carries
        on from its earlier attempts' count; the hourly count is of every call in the last hour. A step
        already counted (a replay, a takeover) passes without counting again. capped=False counts the call
        whatever the caps say (a call the owner approved). Fenced: a run that lost its lease counts nothing
        and gets StaleGeneration."""
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                reason = self._record_fenced("call", holder, gen, now, [event_id], step_key)
            else:
                if self._scalar("SELECT 1 FROM cap_uses WHERE step_key = ?", (step_key,)):
                    return None
                if capped:
                    reached = self._call_cap_reached(event_id, run_event_ids, now)
                    if reached is not None:
                        return reached
                self._conn.execute(
                    "INSERT INTO cap_uses (kind, at, event_id, step_key, tool) VALUES ('call', ?, ?, ?, ?)",
                    (now, event_id, step_key, tool),
                )
                return None
        raise StaleGeneration(f"the call {step_key!r} refused to generation {gen}: {reason}")

    def _call_cap_reached(self, event_id: int, run_event_ids: Sequence[int], now: int) -> CapReached | None:
        per_run, per_hour = self.options.max_tool_calls_per_run, self.options.max_tool_calls_per_hour
        ids = list(dict.fromkeys([event_id, *run_event_ids]))
        if per_run:
            marks = ", ".join("?" for _ in ids)
            used = int(self._scalar(
                f"SELECT COUNT(*) FROM cap_uses WHERE kind = 'call' AND event_id IN ({marks})", tuple(ids)))
            if used >= per_run:
                return CapReached(RUN_CAP, per_run, event_id)
        if per_hour and uses(self, "call", now) >= per_hour:
            return CapReached(HOURLY_CALL_CAP, per_hour, event_id)
        return None

    def calls_in_last_hour(self, *, now: int) -> int:
        return uses(self, "call", now)

    def messages_in_last_hour(self, *, now: int) -> int:
        return uses(self, "message", now)

    # --- the owner's side --------------------------------------------------------------------------
    def held_messages(self, *, limit: int = 100) -> list[HeldMessage]:
        """Messages held past max_messages_per_hour and not yet released, oldest first."""
        return [
            HeldMessage(int(row[0]), str(row[1]), bool(row[2]), int(row[3]), row[4], row[5])
            for row in self._conn.execute(
                """SELECT id, body, urgent, created_at, event_id, approval_id FROM held_messages
                   INDEXED BY held_messages_waiting
                   WHERE released_at IS NULL ORDER BY id LIMIT ?""",
                (limit,),
            )
        ]

    def held_count(self) -> int:
        return int(self._scalar(
            "SELECT COUNT(*) FROM held_messages INDEXED BY held_messages_waiting WHERE released_at IS NULL"))

    def release_held(self, ids: Sequence[int] | None = None, *, now: int) -> list[int]:
        """Move held messages (all of them, or those named) into the outbox, in the order they were held; the
        owner's word, so no cap applies. Returns the ids released (an unknown or already released id is
        left out)."""
        with self.write_transaction():
            rows = self._conn.execute(
                """SELECT id, body, urgent, event_id, reply_to, audience, approval_id FROM held_messages
                   INDEXED BY held_messages_waiting WHERE released_at IS NULL ORDER BY id""").fetchall()
            wanted = None if ids is None else set(ids)
            released: list[int] = []
            for held_id, body, urgent, event_id, reply_to, audience, approval_id in rows:
                if wanted is not None and held_id not in wanted:
                    continue
                # A reply to a chat goes back to that conversation, and a card carries its request (a phone sends
                # it with its buttons, or as settled if it was answered meanwhile), as had it not been held.
                outbox_id = self._write_outbox(body, urgent=bool(urgent), now=now, event_id=event_id,
                                               reply_to=reply_to, audience=audience, approval_id=approval_id)
                self._conn.execute("UPDATE held_messages SET released_at = ?, outbox_id = ? WHERE id = ?",
                                   (now, outbox_id, held_id))
                released.append(int(held_id))
            return released


# --- inside a run's finish (the caller's fenced transaction) ---------------------------------------------

def queue_run_messages(
    store: StoreBase, outgoing: Iterable[OutboxDraft], event_id: int | None, now: int,
    notices: Sequence[CapNotice], *, reply_to: str | None = None, untrusted_requests: Collection[str] = (),
) -> None:
    """Queue a run's messages, counting each against max_messages_per_hour; past it a message is held.
    The card of a request asked by a trusted run is counted but never held (the owner's own conversation); a
    card of one in untrusted_requests (asked by a run that read untrusted content) is held like a message: its
    request waits, listed and answerable, in the console and `status`. Notices of a cap are neither counted nor
    held, and each is queued once. reply_to: the chat message the run answers (see ChatMixin.conversation_of);
    its replies go at once (the owner is in the conversation), the way urgent messages do. A message that may not
    answer it (a run that read private data, in a group) goes to the owner's direct chat instead
    (OutboxDraft.answers, audience)."""
    cap = store.options.max_messages_per_hour
    used = uses(store, "message", now) if cap else 0
    held = 0
    for draft in outgoing:
        answering = reply_to if draft.answers else None
        if cap and used >= cap and (draft.announces is None or draft.announces in untrusted_requests):
            store._conn.execute(
                "INSERT INTO held_messages (body, urgent, created_at, event_id, reply_to, audience, approval_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (draft.body, int(draft.urgent), now, event_id, answering, draft.audience, draft.announces),
            )
            held += 1
            continue
        store._write_outbox(draft.body, urgent=draft.urgent, now=now, event_id=event_id, approval_id=draft.announces,
                            reply_to=answering, audience=draft.audience)
        store._conn.execute("INSERT INTO cap_uses (kind, at, event_id) VALUES ('message', ?, ?)", (now, event_id))
        used += 1
    pending = list(notices)
    if held:
        pending.append(CapNotice(MESSAGE_CAP, (
            f"The agent reached its cap of {cap} messages to you per hour ({MESSAGE_CAP}). Further messages "
            f"are held, not sent and not dropped: see them with `agent-console held`, send them with "
            f"`agent-console held release`. Questions and approvals asked by runs that read untrusted content "
            f"are held too: they wait in the console and in `agent-console status`, where you can answer them "
            f"(`agent-console approve REQUEST_ID yes|no`). Raise {MESSAGE_CAP} in the config to change the cap."),
            HOUR))
    for notice in pending:
        notify_once(store, notice, now)


def notify_once(store: StoreBase, notice: CapNotice, now: int) -> None:
    since = -1 if notice.window is None else now - notice.window
    if store._scalar("SELECT 1 FROM cap_notices WHERE cap = ? AND at > ? LIMIT 1", (notice.key, since)):
        return
    store._conn.execute("INSERT INTO cap_notices (cap, at) VALUES (?, ?) ON CONFLICT DO NOTHING", (notice.key, now))
    store._write_outbox(notice.text, urgent=True, now=now, event_id=None)


def uses(store: StoreBase, kind: str, now: int) -> int:
    """What counted against a cap of this kind within the last hour."""
    return int(store._scalar("SELECT COUNT(*) FROM cap_uses WHERE kind = ? AND at > ?", (kind, now - HOUR)))
