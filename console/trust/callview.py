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

from console.textsafe import INVISIBLE, escape_char, terminal_safe

COMPACT_LIMIT = 240        # characters of a call on one line (messages, status, the stored action)
QUESTION_LIMIT = 500       # characters of a question on one line
PANE_VALUE_LIMIT = 160     # characters of one value in the wrapped form a pane shows (the screen shows all)
SHORT_VALUE = 40           # a value this long or shorter counts as short: it comes before the long ones
MIN_VALUE = 9              # a value is never shortened below this: a quote, its head, "…", its tail, a quote
MIN_SIDE = 3               # characters of a shortened value's head and of its tail, at the least
# The longest card: a phone card is one message (Telegram takes 4,096 characters, ntfy 3,500 before it turns a
# message into an attachment), and under it goes the outcome line when the card is replaced ("Already answered:
# yes", "Approved (from the command line)") and, on Telegram, how to answer a request too long for a button.
CARD_LIMIT = 3300

# Argument names that say "this identifies who or what is acted on": shown first.
_IDENTIFYING = re.compile(
    r"(^|_|-)(ids?|uuid|key|to|from|account|acct|iban|bic|swift|amount|sum|total|price|currency|recipient|payee|"
    r"email|user|username|customer|order|invoice|number|phone|address|target|dest|destination|repo|branch|"
    r"path|file|url|host|name|quantity|qty|count)($|_|-)|Id$|ID$")

# Of those, the names of a quantity (how much, not who or what): an outcome's line leads with another if it can.
_QUANTITY = re.compile(r"(^|_|-)(amount|sum|total|price|currency|quantity|qty|count)($|_|-)")

APPROVAL_OPENING = "Approval needed"   # the first words of a tool call's announcement
QUESTION_OPENING = "Question for you"  # the first words of a question's announcement
UNTRUSTED_MESSAGE_OPENING = "From a run that read untrusted content"
SHORTENED_NOTE = "Values shortened to fit; the whole call: /show {request_id} (Telegram), or the console."


def cut_middle(text: str, limit: int) -> str:
    """`text` in at most about `limit` characters: its head and its tail (MIN_SIDE characters each at the
    least), and between them how much was cut ("…[120 chars cut]…", or "…" where that mark would not fit). A
    JSON string keeps its quotes: its inside is cut. Below 2 × MIN_SIDE + 1 characters only "…" is left (a
    card with more arguments than room: every name stays, some values go)."""
    if len(text) <= limit:
        return text
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return f'"{cut_middle(text[1:-1], limit - 2)}"'
    if limit <= 2 * MIN_SIDE:
        return "…"
    keep = limit - len(f"…[{len(text)} chars cut]…")
    if keep >= 4 * MIN_SIDE:
        mark = f"…[{len(text) - keep} chars cut]…"
    else:
        keep, mark = limit - 1, "…"
    head = (keep + 1) // 2
    tail = keep - head
    return f"{text[:head]}{mark}{text[len(text) - tail:]}"


def value_text(value: Any) -> str:
    """One argument's value as the model gave it (JSON), on one line and safe for a terminal."""
    return terminal_safe(json.dumps(value, ensure_ascii=False, default=repr))


def identifier_text(name: str) -> str:
    """A tool's or an argument's name, or a request id: safe for a terminal, and any space but the plain one
    (a no-break space, an ideographic space) shown as an escape: a name never hides what it is."""
    return _ODD_SPACE.sub(lambda found: escape_char(found.group()), terminal_safe(name))


_ODD_SPACE = re.compile(r"[^\S ]")


def is_identifying(name: str) -> bool:
    return bool(_IDENTIFYING.search(name))


def ordered(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every argument as (name, value text): short identifying values first, then short others, then the long
    ones (identifying before others); by length within each, the model's order breaking ties."""
    items = [(identifier_text(str(name)), value_text(value)) for name, value in arguments.items()]
    ranked = sorted(enumerate(items), key=lambda pair: (
        len(pair[1][1]) > SHORT_VALUE, not is_identifying(pair[1][0]), len(pair[1][1]), pair[0]))
    return [item for _, item in ranked]


def _fit(values: Sequence[int], budget: int, whole_first: Sequence[bool] = ()) -> list[int]:
    """How many characters each value may keep so that together they fit `budget`: the values marked
    whole_first (short identifying ones: an account, an amount) keep all of theirs while they take at most half
    of it; the rest are shortened in proportion to their length, none below MIN_VALUE while there is room for
    that (with less, they share what is left alike)."""
    sizes = list(values)
    if sum(sizes) <= budget:
        return sizes
    first = list(whole_first) + [False] * (len(sizes) - len(whole_first))
    if sum(size for i, size in enumerate(sizes) if first[i]) > budget // 2:
        first = [False] * len(sizes)  # not even that: every value is shortened alike
    kept = [size if first[i] else 0 for i, size in enumerate(sizes)]
    room = budget - sum(kept)
    rest = [i for i in range(len(sizes)) if not first[i]]
    floor = min(MIN_VALUE, max(0, room // max(1, len(rest))))
    floors = {i: min(sizes[i], floor) for i in rest}
    # The largest scale s such that every other value keeping max(its floor, s × its length) fits the room.
    low, high = 0.0, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        if sum(max(floors[i], int(sizes[i] * middle)) for i in rest) <= room:
            low = middle
        else:
            high = middle
    for i in rest:
        kept[i] = min(sizes[i], max(floors[i], int(sizes[i] * low)))
    return kept


def compact_call(tool: str, arguments: Mapping[str, Any], limit: int = COMPACT_LIMIT) -> str:
    """`tool(name=value, ...)` on one line naming every argument, within about `limit` characters: short
    identifying values (an account, an amount) whole, the others shortened in their middle in proportion to
    their length, each keeping its head and tail. Many arguments may make it longer: a name is never dropped."""
    pairs = ordered(arguments)
    fixed = len(identifier_text(tool)) + 2 + sum(len(name) + 1 for name, _ in pairs) + 2 * max(0, len(pairs) - 1)
    allowed = _fit([len(value) for _, value in pairs], limit - fixed,
                   [len(value) <= SHORT_VALUE and is_identifying(name) for name, value in pairs])
    shown = ", ".join(f"{name}={cut_middle(value, size)}" for (name, value), size in zip(pairs, allowed, strict=True))
    return f"{identifier_text(tool)}({shown})"


def brief_call(tool: str, arguments: Mapping[str, Any], width: int) -> str:
    """A settled call in about `width` characters, for a list of outcomes: the argument that identifies what was
    acted on (the first short identifying one, else the shortest) first and whole, every other name after it with
    its value shortened to fit ("…" at the least); when not even the names fit, the others go after ", …". Only
    what was already answered is shown this way: what the owner approves is shown whole (compact_call)."""
    pairs = ordered(arguments)
    name = identifier_text(tool)
    if not pairs:
        return f"{name}()"
    lead = next((index for index, (argument, _) in enumerate(pairs) if is_identifying(argument)
                 and not _QUANTITY.search(argument)), None)
    if lead is None:
        lead = next((index for index, (argument, _) in enumerate(pairs) if is_identifying(argument)), 0)
    first, rest = pairs[lead], pairs[:lead] + pairs[lead + 1:]
    head = f"{name}({first[0]}={first[1]}"
    room = width - len(head) - 1 - sum(len(argument) + 3 for argument, _ in rest)  # ", name=" each, then ")"
    if room >= 3 * len(rest):  # every name, each value shortened to fit ("…", '"…"' at the least)
        sizes = _fit([len(value) for _, value in rest], room)
        return head + "".join(f", {argument}={cut_middle(value, size)}"
                              for (argument, value), size in zip(rest, sizes, strict=True)) + ")"
    for argument, value in rest:  # what fits whole, then ", …" for the rest
        if len(head) + len(f", {argument}={value}") + len(", …)") > width:
            return head + ", …)"
        head += f", {argument}={value}"
    return head + ")"


def wrapped_call(tool: str, arguments: Mapping[str, Any], width: int,
                 value_limit: int | None = PANE_VALUE_LIMIT) -> list[str]:
    """The call over as many lines as it takes at `width`: on one line when it fits, else the tool's name and
    one argument a line, each wrapped (never cut) under its name. A value longer than `value_limit` is
    shortened in its middle (None: every character shown)."""
    width = max(12, width)
    pairs = [(name, value if value_limit is None else cut_middle(value, value_limit))
             for name, value in ordered(arguments)]
    one_line = f"{identifier_text(tool)}(" + ", ".join(f"{name}={value}" for name, value in pairs) + ")"
    if len(one_line) <= width:
        return [one_line]
    lines = _wrap(f"{identifier_text(tool)}(", width, "")
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
    # A schedule's preview (issue 35): its next fire times in the owner's zone, a DST change among them, the
    # interval, expiry, instruction, tools and estimated monthly cost, each a (label, text) line.
    schedule: tuple[tuple[str, str], ...] = ()

    @property
    def shows(self) -> tuple[tuple[str, str], ...]:
        """What the request shows besides its call, each a (label, text) line under it (the card fits the texts
        with the call's values, before them): the private notes a recall would read; where text would go and
        the whole text (links defanged: the card must not open them itself); the private data the run read."""
        shown: list[tuple[str, str]] = list(self.schedule)
        if self.private_notes:
            shown.append(("It would read your private notes", ", ".join(self.private_notes)))
        if self.sink is not None and self.outgoing is not None:
            shown.append((f"⚠ It would send to {self.sink} this text, whole", defang_urls(self.outgoing)))
            if self.private_read and (self.origin is None or "private data" not in self.origin.summary):
                shown.append(("The run had read your private data", ", ".join(self.private_read)))
        return tuple(shown)

    @property
    def is_question(self) -> bool:
        return self.call is None

    def compact(self, limit: int = COMPACT_LIMIT) -> str:
        """On one line, every argument named (a question: its words, shortened in the middle)."""
        if self.call is not None:
            return compact_call(*self.call, limit=limit)
        return cut_middle(self.question or terminal_safe(self.action), max(limit, QUESTION_LIMIT))

    def brief(self, width: int) -> str:
        """About `width` characters saying what was asked: a call as brief_call shows it, a question as compact."""
        return self.compact() if self.call is None else brief_call(*self.call, width)

    def brief_lines(self, width: int) -> list[str]:
        """brief() within `width`, over more lines where it must: a call's tool name on a line of its own, its
        arguments under it (the identifying one first and whole; a value longer than a line wraps, never cut)."""
        one = self.brief(width)
        if len(one) <= width:
            return [one]
        if self.call is None:
            return _wrap(one, width, "")
        tool, arguments = self.call
        return _wrap(f"{identifier_text(tool)}(", width, "") + _wrap(brief_call("", arguments, width - 2)[1:],
                                                                       width, "  ")

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
                       _words(said.get("private_read")), _words(said.get("private_notes")),
                       schedule_lines(said.get("schedule_preview")))


# A schedule preview's lines, in the order the owner reads them (key in the approval's details, label).
_PREVIEW_LINES = (("dst_change", "⚠ DST"), ("interval", "Interval"), ("expires", "Expires"),
                  ("instruction", "Instruction"), ("tools", "Tools"), ("budget", "Budget"),
                  ("only_if_changed", "Only if changed"), ("estimated_monthly_cost", "Estimated monthly cost"))


def schedule_lines(preview: Any) -> tuple[tuple[str, str], ...]:
    """A schedule request's preview (the approval's details["schedule_preview"]) as (label, text) lines."""
    if not isinstance(preview, dict):
        return ()
    fires = preview.get("next_fires")
    lines = [(f"Next {len(fires)} fires (your time)", "; ".join(terminal_safe(str(f)) for f in fires))] \
        if isinstance(fires, list) and fires else [("Next fires", "none before it expires")]
    lines += [(label, terminal_safe(str(preview[key]))) for key, label in _PREVIEW_LINES if preview.get(key)]
    return tuple(lines)


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

def announcement(what: RequestView, expires: str, limit: int = CARD_LIMIT) -> str:
    """The urgent message announcing a request, which the phone channels send as its card, within `limit`
    characters. The origin line comes first (a warning sign before it when the run read untrusted content),
    then 'Approval needed [id]:' and the call for a call, 'Question for you [id]:' and its words for a question,
    then what the request shows besides (RequestView.shows). Nothing is cut at the end: every argument's name
    stays, the values are shortened in proportion, each keeping its head and tail, and a card that had to
    shorten says where the whole call is (/show on Telegram, the console)."""
    whole = _card(what, expires, None)
    return whole if len(whole) <= limit else _card(what, expires, limit)


def _card(what: RequestView, expires: str, limit: int | None) -> str:
    opening = QUESTION_OPENING if what.is_question else APPROVAL_OPENING
    before = [] if what.origin is None else [origin_line(what.origin)]
    lead = f"{opening} [{identifier_text(what.request_id)}]: "
    after = [] if what.unknown is None else [
        f"Run it again? It was called before and {what.unknown.partition(' ')[2] or what.unknown}; "
        f"yes runs it again, no leaves it as it is."]
    labels = [f"{label}: " for label, _ in what.shows]
    # A text shown ", whole" that the card had to shorten says so instead (its label's room is kept for that).
    cut_labels = [label.replace(", whole: ", " (shortened here; /show has it whole): ") for label in labels]
    extras = [text for _, text in what.shows]
    note = [] if limit is None else [SHORTENED_NOTE.format(request_id=identifier_text(what.request_id))]
    fixed = sum(len(line) + 1 for line in before + after + note) + len(lead) + len(f" ({expires})") + \
        sum(len(label) + 1 for label in cut_labels)
    budget = None if limit is None else limit - fixed
    if what.call is None:
        words = what.question or terminal_safe(what.action)
        shown = extras if budget is None else [cut_middle(t, max(MIN_VALUE, budget // 4)) for t in extras]
        room = None if budget is None else max(MIN_VALUE, budget - 2 - sum(map(len, shown)))
        body = f"“{words if room is None else cut_middle(words, room)}”"
    else:
        tool, arguments = what.call
        pairs = ordered(arguments)
        values = [value for _, value in pairs]
        names = len(identifier_text(tool)) + 2 + sum(len(name) + 1 for name, _ in pairs) + 2 * max(0, len(pairs) - 1)
        shown, call_values = extras, values
        if budget is not None:
            # What the request shows besides (the exact text it sends) comes before the call's values: they get
            # what it leaves, each at least "…".
            room = budget - names
            extra_room = min(sum(map(len, extras)), max(0, room - 3 * len(values)))
            shown = [cut_middle(text, size) for text, size in zip(extras, _fit(
                [len(text) for text in extras], extra_room, [len(text) <= SHORT_VALUE for text in extras]),
                strict=True)]
            sizes = _fit([len(value) for value in values], room - sum(map(len, shown)),
                         [len(value) <= SHORT_VALUE and is_identifying(name) for name, value in pairs])
            call_values = [cut_middle(value, size) for value, size in zip(values, sizes, strict=True)]
        body = f"{identifier_text(tool)}(" + ", ".join(
            f"{name}={value}" for (name, _), value in zip(pairs, call_values, strict=True)) + ")"
        if budget is not None and len(body) + sum(map(len, shown)) > budget:
            body = _names_only(tool, [name for name, _ in pairs], budget - sum(map(len, shown)))
    lines = [*before, f"{lead}{body} ({expires})", *after,
             *(f"{label if text == whole else cut_label}{text}"
               for label, cut_label, text, whole in zip(labels, cut_labels, shown, extras, strict=True)), *note]
    return "\n".join(lines)


def whole_request(what: RequestView, state: str) -> str:
    """Everything a request asks, nothing shortened (Telegram's /show, in as many messages as it takes): the
    origin line, the opening with its state, then one argument a line, then what it shows besides."""
    opening = QUESTION_OPENING if what.is_question else APPROVAL_OPENING
    lines = [] if what.origin is None else [origin_line(what.origin)]
    lines.append(f"{opening} [{identifier_text(what.request_id)}] ({state}):")
    if what.call is None:
        lines.append(f"“{what.question or terminal_safe(what.action)}”")
    else:
        tool, arguments = what.call
        lines.append(f"{identifier_text(tool)}(")
        lines += [f"  {name}={value}," for name, value in ordered(arguments)]
        lines.append(")")
    if what.unknown is not None:
        lines.append(f"It was called before and {what.unknown.partition(' ')[2] or what.unknown}.")
    lines += [f"{label}: {text}" for label, text in what.shows]
    return "\n".join(lines)


def _names_only(tool: str, names: list[str], budget: int) -> str:
    """More arguments than a card holds even with every value shortened to a mark: the names (as many as fit:
    the rest counted), each value shown as "…"."""
    shown: list[str] = []
    used = len(identifier_text(tool)) + 2
    for index, name in enumerate(names):
        more = f", and {len(names) - index} more arguments"
        if used + len(name) + 4 + len(more) > budget and index < len(names) - 1:
            return f"{identifier_text(tool)}(" + ", ".join(shown) + more + ")"
        shown.append(f"{name}=…")
        used += len(name) + 4
    return f"{identifier_text(tool)}(" + ", ".join(shown) + ")"


def confidential_lines(what: RequestView) -> list[str]:
    """What the owner must see of a request the confidentiality rule made, whole (RequestView.shows)."""
    return [f"{label}: {text}" for label, text in what.shows]


def origin_line(origin: Origin) -> str:
    return origin.summary if origin.trusted else f"⚠ {origin.summary}"


# A run's message may not open a line with a card's words (a card's look is the runtime's alone): the words
# the cards open with, and the origin line's, compared on what a reader sees (see _as_seen).
_CARD_WORDS = re.compile(
    rf"^\W*({APPROVAL_OPENING}|{QUESTION_OPENING}|asked by a run|{UNTRUSTED_MESSAGE_OPENING})\b", re.IGNORECASE)


def message_from_run(text: str, untrusted_from: str | None) -> str:
    """A message a run sends the owner, as the owner gets it. Its invisible and bidi characters are shown as
    escapes; a line of it that opens with a card's words (those are the runtime's, for requests it records),
    however written (a zero-width space, a no-break space, a Cyrillic "А"), is marked "(message)"; and a
    message from a run that read untrusted content opens with a fixed line saying so, which the run cannot
    leave out or word away, and shows every link in it defanged (defang_urls): no app makes it a link, previews
    it or opens it on a tap."""
    text = "\n".join(f"(message) {terminal_safe(line)}" if _CARD_WORDS.match(_as_seen(line)) else terminal_safe(line)
                     for line in text.split("\n"))
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


def _as_seen(line: str) -> str:
    """A line as a reader takes it in: compatibility forms folded (NFKC), what is invisible (and its escape)
    gone, every kind of space a space, and each letter that looks like a Latin one (a Cyrillic "А", a Greek
    "Ο") that Latin letter."""
    import unicodedata

    line = unicodedata.normalize("NFKC", _INVISIBLE.sub("", line))
    line = re.sub(r"\s+", " ", line)
    if line.isascii():
        return line
    from confusable_homoglyphs import confusables  # its table is loaded the first time a line is not ASCII

    found = confusables.is_confusable(line, greedy=True, preferred_aliases=["latin", "common"]) or []
    latin = {item["character"]: next((g["c"] for g in item["homoglyphs"] if g["c"].isascii()), item["character"])
             for item in found}
    return "".join(latin.get(char, char) for char in line)


_INVISIBLE = re.compile(f"[\x00-\x1f\x7f-\x9f{INVISIBLE}]")
