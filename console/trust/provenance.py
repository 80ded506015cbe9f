"""Provenance: whether a conversation may be trusted, and what made it untrusted (docs/security.md).

A conversation (a run of the agent and every resume of it) starts trusted only if every event it is about is
trusted, and becomes untrusted, for good, as soon as it reads untrusted content: an event from outside, a
timer set by an untrusted conversation, the result of an open-world tool, a note written by an untrusted
conversation. What tainted it is kept in the words the owner reads ("github delivery 9a1f (#7)", "tool
mcp__shop__lookup_order", "note standing-orders from stripe run #12"), so an approval can say where the request
came from. It is saved with the conversation's session, so a resume is exactly as untrusted as the run that
asked. The runtime decides all of this from what the run read; nothing the model says can change it.

Beside trust (integrity) it keeps confidentiality: which of the owner's private data the conversation has read
(`private_read`: "your notes", "your chat #3", "tool mcp__bank__balance"). A conversation that has read both
untrusted content and private data is `confined`: text it writes may carry the one under the other's orders, so
nothing it writes leaves for a sink (an open-world tool's arguments, a group chat, a reply to an e-mail sender, a
URL anyone may fetch, an HTTP channel) without the owner's yes (docs/security.md, the confidentiality model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from console.core import Event
from console.core.base import CHAT_SOURCES
from console.core.models import MemoryEntry, origin_private, origin_trusted
from console.trust.policy import TRUSTED_SOURCES

SHORT_ID_CHARS = 12  # of a delivery's id in a taint's words: enough to find it, short enough to read


@dataclass
class Provenance:
    """One conversation's trust. `sources` are the events that started it ({"event_id", "source",
    "source_id"}); `tainted_by` what made it untrusted, in order, once each (empty: trusted); `private_read`
    the owner's private data it has read, in order, once each (empty: none)."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    tainted_by: list[str] = field(default_factory=list)
    private_read: list[str] = field(default_factory=list)

    @property
    def trusted(self) -> bool:
        return not self.tainted_by

    @property
    def private(self) -> bool:
        """It has read the owner's private data."""
        return bool(self.private_read)

    @property
    def confined(self) -> bool:
        """It has read untrusted content and private data: nothing it writes goes to a sink unasked."""
        return self.private and not self.trusted

    def taint(self, why: str) -> None:
        """The conversation read untrusted content (`why` says what): untrusted from now on."""
        if why not in self.tainted_by:
            self.tainted_by.append(why)

    def read_private(self, what: str) -> None:
        """The conversation read the owner's private data (`what` says which): private from now on."""
        if what not in self.private_read:
            self.private_read.append(what)

    # --- where it starts ---------------------------------------------------------------------------------
    @classmethod
    def of_events(cls, events: Iterable[Event]) -> Provenance:
        """A conversation about these events: untrusted by each event that is."""
        listed = list(events)
        provenance = cls([{"event_id": e.id, "source": e.source, "source_id": e.source_id} for e in listed])
        for event in listed:
            why = event_taint(event)
            if why is not None:
                provenance.taint(why)
            what = event_private(event)
            if what is not None:
                provenance.read_private(what)
        return provenance

    @classmethod
    def restored(cls, saved: Any, *, sources: Any = None, origin: Any = None) -> Provenance:
        """A saved conversation's provenance, for its resume: exactly what was saved with it, never rebuilt from
        the names of its sources (a telegram or email source is trusted or not by what its message was, which
        its name does not say). `saved` is the session's (to_json); a session that kept none (an agent that
        saves no conversation) resumes with the approval's `origin` (approval_origin: the same fields). Anything
        unreadable, or nothing saved at all, is untrusted."""
        listed = [dict(s) for s in sources if isinstance(s, Mapping)] if isinstance(sources, list) else []
        for kept in (saved, origin):
            if isinstance(kept, Mapping) and "trusted" in kept:
                tainted = kept.get("tainted_by")
                started = [dict(s) for s in kept.get("sources") or [] if isinstance(s, Mapping)] or listed
                provenance = cls(started, [str(t) for t in tainted] if isinstance(tainted, list) else [])
                if kept.get("trusted") is not True and provenance.trusted:
                    provenance.taint(str(kept.get("summary") or "a saved conversation whose trust could not be read"))
                provenance._restore_private(kept.get("private_read"))
                return provenance
        provenance = cls(listed)
        provenance.taint("a resumed conversation whose trust was not saved")
        provenance._restore_private(None)
        return provenance

    def _restore_private(self, saved: Any) -> None:
        """What private data a saved conversation had read. One saved before that was kept may have read any
        (a run's opening showed the owner's notes): it counts as having read private data."""
        if isinstance(saved, list):
            for what in saved:
                self.read_private(str(what))
        else:
            self.read_private(UNKNOWN_PRIVATE)

    # --- what it leaves behind ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Saved with the conversation's session."""
        return {"trusted": self.trusted, "sources": [dict(s) for s in self.sources],
                "tainted_by": list(self.tainted_by), "private_read": list(self.private_read)}

    def approval_origin(self) -> dict[str, Any]:
        """The approvals row's `origin`: where the request came from, as the owner reads it (`summary`), and the
        whole provenance (to_json), which a resume that saved no session of its own continues from."""
        return {**self.to_json(), "summary": self.summary()}

    def private_words(self) -> str:
        """'it had read your private data: your notes (bank-pin), tool mcp__bank__balance' ('' when none)."""
        return "it had read your private data: " + ", ".join(self.private_read) if self.private_read else ""

    def summary(self) -> str:
        """'asked by a run that read untrusted content: github delivery 9a1f (#7), tool mcp__shop__lookup_order'
        (and, when it also read private data, '; it had read your private data: your notes (pin)'), or 'asked by
        a run from your chat #12'."""
        if not self.trusted:
            words = "asked by a run that read untrusted content: " + ", ".join(self.tainted_by)
            return f"{words}; {self.private_words()}" if self.private else words
        started = ", ".join(f"your {s.get('source')} #{s.get('event_id')}" for s in self.sources)
        return f"asked by a run from {started}" if started else "asked by a run of yours"

    def write_origin(self, anchor: Event | None) -> dict[str, Any]:
        """The origin a note or a timer this conversation writes keeps: the run that started it (its first
        source; the anchor when it has none) and its trust."""
        first = self.sources[0] if self.sources else (
            {"event_id": anchor.id, "source": anchor.source, "source_id": anchor.source_id} if anchor else {})
        return {"trusted": self.trusted, "event_id": first.get("event_id"), "source": first.get("source"),
                "source_id": first.get("source_id"), "tainted_by": list(self.tainted_by), "private": self.private}


# What a saved conversation read when it was saved before private data was tracked: perhaps the owner's notes.
UNKNOWN_PRIVATE = "perhaps your notes (a conversation saved before private data was tracked)"


def group_chat(event: Event) -> str | None:
    """'<source>:<chat>' of a chat source's message written in a group chat (Telegram's group ids are negative;
    a listener may say `chat_type`), or None for the owner's direct chat and every other event."""
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    if event.source not in CHAT_SOURCES or event.source == "email":
        return None
    chat = payload.get("chat_id")
    kind = payload.get("chat_type")
    grouped = kind in ("group", "supergroup", "channel") or (kind is None and isinstance(chat, int) and chat < 0)
    return f"{event.source}:{chat}" if grouped else None


def event_private(event: Event) -> str | None:
    """Which of the owner's private data reading this event is (None: it is not private): what the owner wrote
    to the agent (the console's chat, a direct chat of a chat source, authenticated mail from a trusted sender)
    and what the owner's timers carry. Not private: an event from outside (a webhook, a stranger's mail), a
    message in a group chat (its members read it already), an approval's answer (the resumed conversation
    brings what it had read itself)."""
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    where = f"#{event.id}"
    if event.source == "chat":
        return f"your chat {where}"
    if event.source == "timer":
        origin = payload.get("origin")
        return f"your timer {event.source_id.rsplit('@', 1)[0]} ({where})" if (
            "origin" not in payload or origin_private(origin)) else None
    if event.source == "email":
        return f"your mail {where}" if payload.get("trusted") is True else None
    if event.source in CHAT_SOURCES:
        return None if group_chat(event) is not None else f"your {event.source} chat {where}"
    return None


def note_private(entries: Iterable[MemoryEntry]) -> str | None:
    """The private data these notes are, in words ('your notes (bank-pin, safe)'), or None when none is."""
    keys = [entry.key for entry in entries if entry.private]
    if not keys:
        return None
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return f"your notes ({shown})"


def event_taint(event: Event) -> str | None:
    """Why reading this event makes a conversation untrusted, or None when it does not: a source from outside,
    or a timer set by a conversation that was untrusted (it fires with that trust). A chat source's message is
    trusted when its listener marked it the paired owner's (`owner`; only that listener writes the source) and
    it is the owner's own words: not forwarded, not quoting another message. An e-mail is trusted only when its
    listener (the only writer of source `email`) proved it the owner's: a trusted sender whose mail the owner's
    own server authenticated (console/edges/mailmsg.py)."""
    if event.source == "email":
        return _mail_taint(event)
    if event.source in CHAT_SOURCES:
        return _chat_taint(event)
    if event.source not in TRUSTED_SOURCES:
        return _delivery(event.source, event.source_id, event.id)
    if event.source == "timer":
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if "origin" in payload and not origin_trusted(payload["origin"]):
            timer_id = event.source_id.rsplit("@", 1)[0]
            return f"timer {timer_id} set by {_run_words(payload['origin'])}"
    return None


def _chat_taint(event: Event) -> str | None:
    """A chat source's message carries someone else's words when another member of a paired group wrote it,
    when an inline bot wrote its text (via_bot), when the owner forwarded it, when it replies to a message from
    another chat (external_reply), or when it quotes a message that is not the owner's own words (reply_to_own:
    in the owner's chat with the bot that may be the agent's own message from an untrusted run, and replying to
    it must not launder it)."""
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    where = f"(#{event.id})"
    if payload.get("owner") is not True:
        return f"{event.source} message from someone other than you {where}"
    if payload.get("via_bot") is not None:
        return f"{event.source} message written by the inline bot {_named(payload['via_bot'])} {where}"
    if payload.get("forwarded_from") is not None:
        return f"{event.source} message forwarded from {_named(payload['forwarded_from'])} {where}"
    if payload.get("external_reply") is not None:
        return f"{event.source} reply quoting a message from another chat {where}"
    if (payload.get("reply_to_text") is not None or payload.get("quote") is not None) \
            and payload.get("reply_to_own") is not True:
        return f"{event.source} reply quoting another message {where}"
    return None


def _named(who: Any) -> str:
    """A name from a message, on one line and short enough to read in a taint."""
    words = " ".join(str(who).split())
    return words if len(words) <= SHORT_ID_CHARS * 3 else words[: SHORT_ID_CHARS * 3 - 1] + "…"


def _mail_taint(event: Event) -> str | None:
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    if payload.get("trusted") is True:
        return None
    sender = payload.get("from", {}).get("address") if isinstance(payload.get("from"), Mapping) else None
    who = " ".join(str(sender or "an unknown sender").split())
    who = who if len(who) <= SHORT_ID_CHARS * 4 else who[: SHORT_ID_CHARS * 4 - 1] + "…"
    return f"email from {who} (#{event.id})"


def note_taint(entry: MemoryEntry) -> str | None:
    """Why reading this note makes a conversation untrusted (None: the owner's, or a trusted run's)."""
    if entry.trusted:
        return None
    return f"note {entry.key} from {_run_words(entry.origin, run=True)}"


def _delivery(source: str, source_id: str, event_id: Any) -> str:
    short = source_id if len(source_id) <= SHORT_ID_CHARS else source_id[: SHORT_ID_CHARS - 1] + "…"
    return f"{source} delivery {short}" + (f" (#{event_id})" if event_id is not None else "")


def _run_words(origin: Any, *, run: bool = False) -> str:
    """'stripe run #12' (run=True) or 'an untrusted stripe run #12': the run an origin names."""
    if not isinstance(origin, Mapping):
        return "a run of unknown origin"
    named = " ".join(str(part) for part in (
        origin.get("source"), "run", f"#{origin['event_id']}" if origin.get("event_id") is not None else None)
        if part)
    return named if run else f"an untrusted {named}"
