"""How an approval is shown to the owner, the same on every surface: the urgent message, the ntfy and Telegram
cards, the approvals pane, the approval screen, the event's detail, `status` and `show`.

What the owner approves must be what they see, so no argument is ever left out: every argument's name is
shown; identifying and short values come first (ids, accounts, amounts, recipients, by the name's hints and by
shortness) and a long value is shortened in its middle with a mark saying how much was cut. The compact form
(one line: messages, cards, `status`) fits a budget by shortening the longest values first; the wrapped form
(the pane, the screen) wraps instead of cutting. Names and values are made safe for a terminal here, once, so
a bidi override in a memo cannot reorder what any surface shows.

Only the display changes: the approval stays bound to the exact tool and canonical arguments on its row.

Where the request came from (its origin) is shown beside it: the approvals row's `origin` ({"trusted",
"summary"}) when the run recorded one, else a line derived from the run's sources. A question (`ask_owner`,
or a request with no tool behind it) is worded as a question, never as "approve this call".
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.textsafe import terminal_safe

COMPACT_LIMIT = 240        # characters of a call on one line (messages, cards, status, the stored action)
QUESTION_LIMIT = 500       # characters of a question on one line
PANE_VALUE_LIMIT = 160     # characters of one value in the wrapped form a pane shows (the screen shows all)
SHORT_VALUE = 40           # a value this long or shorter counts as short: it comes before the long ones
MIN_VALUE = 16             # the compact form never shortens a value below this (names are never dropped)

# Argument names that say "this identifies who or what is acted on": shown first.
_IDENTIFYING = re.compile(
    r"(^|_|-)(ids?|uuid|key|to|from|account|acct|iban|bic|swift|amount|sum|total|price|currency|recipient|payee|"
    r"email|user|username|customer|order|invoice|number|phone|address|target|dest|destination|repo|branch|"
    r"path|file|url|host|name|quantity|qty|count)($|_|-)|Id$|ID$")

APPROVAL_OPENING = "Approval needed"   # the first words of a tool call's announcement
QUESTION_OPENING = "Question for you"  # the first words of a question's announcement
UNTRUSTED_MESSAGE_OPENING = "From a run that read untrusted content"
# A run's message may not open with a card's words: a card's look is the runtime's alone.
_CARD_OPENINGS = re.compile(rf"^\W*({APPROVAL_OPENING}|{QUESTION_OPENING})\b", re.IGNORECASE)


def cut_middle(text: str, limit: int) -> str:
    """`text` in at most about `limit` characters: its start and its end, and between them how much was cut."""
    if len(text) <= limit:
        return text
    mark_len = len(f"…[{len(text)} chars cut]…")
    keep = max(2, limit - mark_len)
    head = (keep + 1) // 2
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}…[{cut} chars cut]…{text[len(text) - tail:] if tail else ''}"


def value_text(value: Any) -> str:
    """One argument's value as the model gave it (JSON), on one line and safe for a terminal."""
    return terminal_safe(json.dumps(value, ensure_ascii=False, default=repr))


def is_identifying(name: str) -> bool:
    return bool(_IDENTIFYING.search(name))


def ordered(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every argument as (name, value text): short identifying values first, then short others, then the long
    ones (identifying before others); by length within each, the model's order breaking ties."""
    items = [(terminal_safe(str(name)), value_text(value)) for name, value in arguments.items()]
    ranked = sorted(enumerate(items), key=lambda pair: (
        len(pair[1][1]) > SHORT_VALUE, not is_identifying(pair[1][0]), len(pair[1][1]), pair[0]))
    return [item for _, item in ranked]


def _fit(values: Sequence[int], budget: int) -> list[int]:
    """How many characters each value may keep so that together they fit `budget` (the shortest keep all of
    theirs, the longest share what is left equally, none below MIN_VALUE)."""
    allowed = list(values)
    order = sorted(range(len(values)), key=lambda i: values[i])
    left, remaining = budget, len(values)
    for index in order:
        share = max(MIN_VALUE, left // remaining) if remaining else MIN_VALUE
        allowed[index] = min(values[index], share)
        left -= allowed[index]
        remaining -= 1
    return allowed


def compact_call(tool: str, arguments: Mapping[str, Any], limit: int = COMPACT_LIMIT) -> str:
    """`tool(name=value, ...)` on one line naming every argument, within about `limit` characters: the longest
    values are shortened in their middle first. Many arguments may make it longer: a name is never dropped."""
    pairs = ordered(arguments)
    fixed = len(terminal_safe(tool)) + 2 + sum(len(name) + 1 for name, _ in pairs) + 2 * max(0, len(pairs) - 1)
    allowed = _fit([len(value) for _, value in pairs], limit - fixed)
    shown = ", ".join(f"{name}={cut_middle(value, size)}" for (name, value), size in zip(pairs, allowed, strict=True))
    return f"{terminal_safe(tool)}({shown})"


def wrapped_call(tool: str, arguments: Mapping[str, Any], width: int,
                 value_limit: int | None = PANE_VALUE_LIMIT) -> list[str]:
    """The call over as many lines as it takes at `width`: on one line when it fits, else the tool's name and
    one argument a line, each wrapped (never cut) under its name. A value longer than `value_limit` is
    shortened in its middle (None: every character shown)."""
    width = max(12, width)
    pairs = [(name, value if value_limit is None else cut_middle(value, value_limit))
             for name, value in ordered(arguments)]
    one_line = f"{terminal_safe(tool)}(" + ", ".join(f"{name}={value}" for name, value in pairs) + ")"
    if len(one_line) <= width:
        return [one_line]
    lines = _wrap(f"{terminal_safe(tool)}(", width, "")
    for index, (name, value) in enumerate(pairs):
        tail = "," if index < len(pairs) - 1 else ")"
        lines += _wrap(f"{name}={value}{tail}", width, "  ", "    ")
    if not pairs:
        lines[-1] += ")"
    return lines


def _wrap(text: str, width: int, first: str, rest: str | None = None) -> list[str]:
    """Wrapped at spaces where it can, else hard at the width: nothing is cut."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=first if rest is None else rest,
                         break_long_words=True, break_on_hyphens=False) or [first]


def wrapped(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """Any line of words wrapped to `width` (an origin line, a question)."""
    return textwrap.wrap(text, max(12, width), initial_indent=first, subsequent_indent=rest,
                         break_long_words=True, break_on_hyphens=False) or [first]


# --- what is asked --------------------------------------------------------------------------------------

def question_of(tool: str | None, arguments: Any, details: Any, action: str) -> str | None:
    """The question's words when a request is a question to the owner (ask_owner, or a request with no tool
    behind it), None when it is a tool call to approve."""
    if tool is not None:
        return None
    if isinstance(details, dict) and details.get("tool") == "ask_owner":
        asked = details.get("arguments")
        if isinstance(asked, dict) and isinstance(asked.get("question"), str):
            return terminal_safe(" ".join(asked["question"].split()))
    return terminal_safe(action)


def call_of(tool: str | None, arguments: Any, details: Any) -> tuple[str, dict[str, Any]] | None:
    """The tool and arguments a request is bound to (or, for an older row, the ones its details name)."""
    if tool is not None:
        return tool, dict(arguments) if isinstance(arguments, dict) else {}
    return None


@dataclass(frozen=True)
class RequestView:
    """What one approval asks, ready for any surface: a call (tool + arguments) or a question's words."""

    request_id: str
    call: tuple[str, dict[str, Any]] | None
    question: str | None
    action: str                 # the stored words (a fallback for rows with neither)
    origin: Origin | None
    # Set when the call was made before and its outcome is unknown (it timed out, lost its connection or died
    # mid-call): the request asks whether to run it again, and says why.
    unknown: str | None = None
    # Set when it asks because a run that read untrusted content and the owner's private data would send text to
    # a sink: where to, and exactly what would leave (the whole text, never shortened: the owner judges it).
    sink: str | None = None
    outgoing: str | None = None
    private_read: tuple[str, ...] = ()
    private_notes: tuple[str, ...] = ()  # the private notes an untrusted run's recall would read

    @property
    def is_question(self) -> bool:
        return self.call is None

    def compact(self, limit: int = COMPACT_LIMIT) -> str:
        """On one line, every argument named (a question: its words, shortened in the middle)."""
        if self.call is not None:
            return compact_call(*self.call, limit=limit)
        return cut_middle(self.question or terminal_safe(self.action), max(limit, QUESTION_LIMIT))

    def lines(self, width: int, value_limit: int | None = PANE_VALUE_LIMIT) -> list[str]:
        """Wrapped at `width`, never cut (values longer than value_limit shortened in the middle)."""
        if self.call is not None:
            return wrapped_call(*self.call, width, value_limit)
        words = self.question or terminal_safe(self.action)
        return wrapped(f"“{words}”" if value_limit is None else f"“{cut_middle(words, value_limit * 2)}”", width)


def request_view(approval: Any) -> RequestView:
    """What an approvals row (console.core.Approval, or one of `status --json`'s dicts) asks."""
    def get(name: str) -> Any:
        return approval.get(name) if isinstance(approval, dict) else getattr(approval, name, None)

    tool, arguments, details, action = get("tool"), get("arguments"), get("details"), str(get("action") or "")
    said: dict[str, Any] = details if isinstance(details, dict) else {}
    unknown = said.get("outcome_unknown")
    sink, outgoing = said.get("sink"), said.get("outgoing")
    return RequestView(str(get("request_id") or ""), call_of(tool, arguments, details),
                       question_of(tool, arguments, details, action), action,
                       origin_of(get("origin"), get("sources"), details),
                       terminal_safe(unknown) if isinstance(unknown, str) else None,
                       terminal_safe(sink) if isinstance(sink, str) else None,
                       terminal_safe(outgoing) if isinstance(outgoing, str) else None,
                       _words(said.get("private_read")), _words(said.get("private_notes")))


def _words(value: Any) -> tuple[str, ...]:
    return tuple(terminal_safe(str(item)) for item in value) if isinstance(value, list) else ()


# --- where it came from ---------------------------------------------------------------------------------

# The sources the owner or the engine wrote (console.trust.policy.TRUSTED_SOURCES; a test keeps them equal).
OWNERS_SOURCES = frozenset({"chat", "timer", "approval"})


@dataclass(frozen=True)
class Origin:
    trusted: bool
    summary: str   # "asked by a run that read untrusted content: github delivery 9a1f, tool mcp__shop__lookup"

    def public(self) -> dict[str, Any]:
        return {"trusted": self.trusted, "summary": self.summary}

    def short(self) -> str:
        """For a narrow pane: '⚠ untrusted: github delivery 9a1f (#7), tool …' or '← your chat #12'."""
        for lead in _SUMMARY_LEADS:
            if self.summary.startswith(lead):
                rest = self.summary[len(lead):].strip()
                return f"⚠ untrusted: {rest}" if not self.trusted else f"← {rest}"
        return self.summary if self.trusted else f"⚠ {self.summary}"


_SUMMARY_LEADS = ("asked by a run that read untrusted content:", "asked by a run from", "asked by a run started by")


def origin_of(origin: Any, sources: Any, details: Any) -> Origin | None:
    """The request's origin: the row's own `origin` when the run recorded it, else derived from the sources
    that started the run (a source named in details["untrusted"] made it untrusted). None: not recorded."""
    if isinstance(origin, str):
        try:
            origin = json.loads(origin)
        except ValueError:
            origin = None
    if isinstance(origin, dict) and isinstance(origin.get("summary"), str):
        return Origin(origin.get("trusted") is True, terminal_safe(origin["summary"]))
    listed = [s for s in sources if isinstance(s, dict)] if isinstance(sources, list) else []
    untrusted = details.get("untrusted") if isinstance(details, dict) else None
    untrusted_names = {str(name) for name in untrusted} if isinstance(untrusted, list) else set()
    # A row that says nothing of its trust: any source but the owner's own counts as untrusted.
    untrusted_names |= {str(s.get("source")) for s in listed if str(s.get("source")) not in OWNERS_SOURCES}
    if untrusted_names:
        named = [s for s in listed if str(s.get("source")) in untrusted_names] or \
            [{"source": name} for name in sorted(untrusted_names)]
        return Origin(False, "asked by a run that read untrusted content: " + _named(named))
    if listed:
        return Origin(True, "asked by a run started by " + _named(listed))
    return None


def _named(sources: list[dict[str, Any]], most: int = 3) -> str:
    names = [terminal_safe(" ".join(str(part) for part in (s.get("source"), s.get("source_id")) if part is not None))
             for s in sources[:most]]
    names = [cut_middle(name, 48) for name in names]
    more = len(sources) - most
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


# --- the texts a message or card carries ----------------------------------------------------------------

def announcement(what: RequestView, expires: str) -> str:
    """The urgent message announcing a request, which the phone channels send as its card. Opens with
    'Approval needed [id]:' for a call, 'Question for you [id]:' for a question; the origin on its own line,
    a warning sign before it when the run read untrusted content."""
    opening = QUESTION_OPENING if what.is_question else APPROVAL_OPENING
    body = f"“{what.compact()}”" if what.is_question else what.compact()
    lines = [f"{opening} [{what.request_id}]: {body} ({expires})"]
    if what.unknown is not None:
        lines.append(f"Run it again? It was called before and {what.unknown.partition(' ')[2] or what.unknown}; "
                     f"yes runs it again, no leaves it as it is.")
    if what.origin is not None:
        lines.append(origin_line(what.origin))
    lines += confidential_lines(what)
    return "\n".join(lines)


def confidential_lines(what: RequestView) -> list[str]:
    """What the owner must see of a request the confidentiality rule made: the private notes a recall would
    read, or where text would go and the whole text (links defanged: the card must not open them itself)."""
    lines: list[str] = []
    if what.private_notes:
        lines.append("It would read your private notes: " + ", ".join(what.private_notes))
    if what.sink is not None and what.outgoing is not None:
        lines.append(f"⚠ It would send to {what.sink} this text, whole: {defang_urls(what.outgoing)}")
        if what.private_read and (what.origin is None or "private data" not in what.origin.summary):
            lines.append("The run had read your private data: " + ", ".join(what.private_read))
    return lines


def origin_line(origin: Origin) -> str:
    return origin.summary if origin.trusted else f"⚠ {origin.summary}"


def message_from_run(text: str, untrusted_from: str | None) -> str:
    """A message a run sends the owner, as the owner gets it. A run never writes a card's opening words
    (those are the runtime's, for requests it records), and a message from a run that read untrusted content
    opens with a fixed line saying so, which the run cannot leave out or word away, and shows every link in it
    defanged (defang_urls): no app makes it a link, previews it or opens it on a tap."""
    if _CARD_OPENINGS.match(text):
        text = f"(message) {text}"
    if untrusted_from:
        return f"{UNTRUSTED_MESSAGE_OPENING} ({untrusted_from}); not an approval request:\n{defang_urls(text)}"
    return text


# A link as chat apps find one: a scheme's URL (https://, ftp://, ...), www.host, or host.tld/path (a bare host
# with a path or query: Telegram links "evil.com/x?d=..." without a scheme). Up to the next space or quote.
_URL = re.compile(
    r"(?i)\b(?:[a-z][a-z0-9+.-]{1,15}://[^\s<>\"'`]+|www\.[^\s<>\"'`]+"
    r"|(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}[/?#][^\s<>\"'`]*)")
_HOST = re.compile(r"(?i)^(?:[a-z][a-z0-9+.-]*://)?(?:[^/?#@\s]*@)?([^/?#:\s]+)")


def find_urls(text: str) -> list[str]:
    """Every link in a text, in order, whole (what someone would fetch)."""
    return [match.group(0).rstrip(".,;:!?)]}") for match in _URL.finditer(text)]


def url_host(url: str) -> str:
    """The host a link points at ('attacker.example' of 'https://user@attacker.example:8443/c?d=1')."""
    found = _HOST.match(url)
    return found.group(1).lower() if found else url


def defang_urls(text: str) -> str:
    """Every link in the text shown, not linked: 'hxxps://attacker[.]example/c?d=1 [link to attacker[.]example]'.
    Every dot becomes [.] and the scheme's t's x's, so no chat app finds a link in it (nor a host in its path),
    and the host is named, so the owner sees where it pointed."""
    def defanged(match: re.Match[str]) -> str:
        url = match.group(0)
        kept = url.rstrip(".,;:!?)]}")
        trail = url[len(kept):]
        shown = re.sub(r"(?i)^(h)tt(ps?)", lambda m: f"{m.group(1)}xx{m.group(2)}", kept).replace("://", "[://]", 1)
        return f"{shown.replace('.', '[.]')} [link to {url_host(kept).replace('.', '[.]')}]{trail}"

    return _URL.sub(defanged, text)
