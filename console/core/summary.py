"""What an event is, in one line: the e-mail's subject and sender, a chat's text, a webhook's type and title,
a timer's title. Read from the payload the core already decoded for the row, so showing it costs no query:
the events table computes it for the rows of its visible page only. The words come from the payload, so a
search (which reads the payload's text) finds an event by any word of its summary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

WHAT_CHARS = 300  # longer is never shown: a row is one line

# Where a webhook body keeps its title, in the order they are tried (GitHub's pull requests and issues, a
# release, a commit; Stripe's object; the common names). Dotted: nested objects.
_TITLE_PATHS = ("pull_request.title", "issue.title", "release.name", "head_commit.message", "data.object.description",
                "title", "subject", "summary", "name", "message", "text", "repository.full_name")
# What a payload of no known shape is called by, tried in order
_PLAIN_KEYS = ("title", "subject", "text", "message", "summary", "task", "instruction", "description", "name")

# What the scheduler adds to a timer's payload when it fires: when, how late, how many missed, who set it
_TIMER_BOOKS = frozenset({"scheduled_for", "late_by", "skipped", "origin"})


def one_line(text: str, limit: int = WHAT_CHARS) -> str:
    """Every run of white space (new lines among them) as one space, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def event_what(source: str, payload: Any) -> str:
    """One line saying what an event is ('' when its payload says nothing readable, or was pruned)."""
    if not isinstance(payload, Mapping):
        return "" if payload is None else one_line(str(payload))
    if source == "email" or (isinstance(payload.get("from"), Mapping) and "subject" in payload):
        return one_line(_mail(payload))
    if source == "approval" and "answer" in payload:
        answer, action = _text(payload.get("answer")), _text(payload.get("action"))
        return one_line(f"{answer} {_text(payload.get('approval'))}" + (f": {action}" if action else ""))
    if source == "timer":
        return one_line(_plain({key: value for key, value in payload.items() if key not in _TIMER_BOOKS}))
    if "body" in payload and "type" in payload:  # a webhook delivery: {"type": kind, "body": what was sent}
        return one_line(_titled(_text(payload.get("type")), payload.get("body")))
    if payload.get("kind") == "chat" or source in ("telegram", "chat"):
        return one_line(_chat(payload))
    return one_line(_titled(_text(payload.get("type") or payload.get("action") or payload.get("event")), payload))


def _mail(payload: Mapping[str, Any]) -> str:
    sender = payload.get("from")
    who = ""
    if isinstance(sender, Mapping):
        name, address = _text(sender.get("name")), _text(sender.get("address"))
        who = f"{name} <{address}>" if name and address else name or address
    subject = _text(payload.get("subject")) or "(no subject)"
    return f"{subject} — {who}" if who else subject


def _chat(payload: Mapping[str, Any]) -> str:
    text = _text(payload.get("text"))
    media = payload.get("media")
    if media and not text:
        kind = media.get("kind") if isinstance(media, Mapping) else media
        return f"[{kind if isinstance(kind, str) and kind else 'media'}]"
    return text or _plain(payload)


def _titled(kind: str, body: Any) -> str:
    title = ""
    if isinstance(body, Mapping):
        title = next((found for path in _TITLE_PATHS if (found := _text(_dig(body, path)))), "")
        action = _text(body.get("action"))
        if action and action != kind:
            kind = f"{kind}.{action}" if kind else action
    if kind and title:
        return f"{kind}: {title}"
    return kind or title or (_compact(body) if body not in (None, {}) else "")


def _plain(payload: Mapping[str, Any]) -> str:
    return next((found for key in _PLAIN_KEYS if (found := _text(payload.get(key)))), "") or _compact(payload)


def _dig(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else str(value) if isinstance(value, int | float) and \
        not isinstance(value, bool) else ""


def _compact(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return text[: WHAT_CHARS + 1]
