"""One way of showing an approval, for every surface (console/callview.py): every argument's name, identifying
and short values first, long values cut in their middle with how much was cut, the origin, questions as
questions, and messages from runs that can never pass for a card."""

from __future__ import annotations

import re
from typing import Any

import pytest

from console.trust.callview import (
    CARD_LIMIT,
    COMPACT_LIMIT,
    OWNERS_SOURCES,
    Origin,
    announcement,
    compact_call,
    cut_middle,
    message_from_run,
    ordered,
    origin_of,
    request_view,
    wrapped_call,
)
from console.trust.policy import TRUSTED_SOURCES

# The issue's call: a memo long enough to push `to_account` past a 160-character line that sorted arguments.
MEMO = ("Invoice 2291 for the spring consulting work: see the attached statement for the hours, the rates and "
        "the expenses: pay within 14 days. Reference ACME-2291-SPRING; thanks!")
PAY = {"amount": 480, "memo": MEMO, "to_account": "DE89 3704 0044 0532 0130 00"}
GITHUB = [{"event_id": 3, "source": "github", "source_id": "delivery-9a1f"}]


def pay_row(**extra: Any) -> dict[str, Any]:
    return {"request_id": "apr-3-0badcafe", "action": "", "tool": "mcp__x__pay", "arguments": PAY,
            "details": {"tool": "mcp__x__pay", "arguments": PAY, "untrusted": ["github"]}, "sources": GITHUB,
            **extra}


def test_the_issues_memo_is_long_enough_to_hide_the_account_on_the_old_line() -> None:
    old = ", ".join(f"{k}={v!r}" for k, v in sorted(PAY.items()))
    assert len(MEMO) == 170 and old.index("to_account") > 160


def test_every_argument_is_named_identifying_and_short_first() -> None:
    line = compact_call("mcp__x__pay", PAY)
    assert line.startswith('mcp__x__pay(amount=480, to_account="DE89 3704 0044 0532 0130 00", memo="Invoice 2291')
    assert len(line) <= COMPACT_LIMIT
    assert [name for name, _ in ordered({"memo": "x" * 60, "note": "hi", "order_id": "881", "to": "a@b.c"})] == \
        ["order_id", "to", "note", "memo"]


def test_a_long_value_is_cut_in_its_middle_saying_how_much() -> None:
    cut = cut_middle("A" * 50 + "B" * 50, 40)
    found = re.fullmatch(r"(A+)…\[(\d+) chars cut\]…(B+)", cut)
    assert found is not None and len(found[1]) + int(found[2]) + len(found[3]) == 100
    assert cut_middle("short", 40) == "short"


def test_no_name_is_dropped_however_many_arguments_and_however_long() -> None:
    arguments = {f"field_{n}": "v" * 500 for n in range(30)}
    line = compact_call("tool", arguments)
    assert all(f"field_{n}=" in line for n in range(30))


@pytest.mark.parametrize("width", [20, 26, 38, 76, 116])
def test_the_wrapped_form_wraps_and_never_cuts_at_any_width(width: int) -> None:
    lines = wrapped_call("mcp__x__pay", PAY, width, value_limit=None)
    assert all(len(line) <= width for line in lines)
    joined = "".join(line.strip() for line in lines).replace(" ", "")
    assert MEMO.replace(" ", "") in joined and "to_account=" in joined and "amount=480" in joined


def test_names_and_values_are_made_safe_for_a_terminal() -> None:
    line = compact_call("t", {"memo": "pay\u202eevil\x1b[2J"})
    assert "\u202e" not in line and "\x1b" not in line and "\\u202e" in line


def test_the_origin_comes_from_the_row_when_recorded_else_from_the_sources() -> None:
    recorded = {"trusted": False, "summary": "asked by a run that read untrusted content: github delivery 9a1f, "
                                             "tool mcp__shop__lookup_order"}
    assert origin_of(recorded, GITHUB, {}) == Origin(False, recorded["summary"])
    assert origin_of(None, GITHUB, {"untrusted": ["github"]}) == \
        Origin(False, "asked by a run that read untrusted content: github delivery-9a1f")
    assert origin_of(None, [{"source": "chat", "source_id": "7:1"}], {}) == \
        Origin(True, "asked by a run started by chat 7:1")
    assert origin_of(None, None, {}) is None
    # A row that does not say: a source from outside is never shown as trusted.
    assert origin_of(None, GITHUB, {}) == \
        Origin(False, "asked by a run that read untrusted content: github delivery-9a1f")


def test_the_owners_sources_are_the_policys_trusted_ones() -> None:
    assert OWNERS_SOURCES == TRUSTED_SOURCES


def test_the_announcement_names_every_argument_and_warns_of_an_untrusted_origin() -> None:
    text = announcement(request_view(pay_row()), "expires in 10 min")
    origin, first = text.split("\n")  # the origin line first: whatever is shortened, it is never what goes
    assert first.startswith("Approval needed [apr-3-0badcafe]: mcp__x__pay(amount=480, to_account=")
    assert "memo=" in first and first.endswith("(expires in 10 min)")
    assert origin == "⚠ asked by a run that read untrusted content: github delivery-9a1f"


def test_a_question_reads_as_a_question() -> None:
    row = {"request_id": "apr-1-aa", "action": "Deploy web now?", "tool": None,
           "details": {"tool": "ask_owner", "arguments": {"question": "Deploy   web now?"}}, "sources": []}
    view = request_view(row)
    assert view.is_question and announcement(view, "expires in 5 min") == \
        "Question for you [apr-1-aa]: “Deploy web now?” (expires in 5 min)"


@pytest.mark.parametrize("text", ["Approval needed [apr-1-x]: pay(...) reply yes", "  approval NEEDED: yes?",
                                  "Question for you [apr-2]: ok?"])
def test_a_runs_message_never_opens_like_a_card(text: str) -> None:
    assert message_from_run(text, None) == f"(message) {text}"


def test_a_message_from_an_untrusted_run_says_so_first_whatever_it_says() -> None:
    said = message_from_run("reply yes to the pending approval within 10 minutes", "github delivery-9a1f")
    assert said.startswith("From a run that read untrusted content (github delivery-9a1f); not an approval request:\n")
    assert message_from_run("Build 412 is green.", None) == "Build 412 is green."


# --- cards that cannot lie (issue 31 item 5) ------------------------------------------------------------------

ACCOUNT = "GB29 NWBK 6016 1331 9268 19"
# The issue's 200-argument call: a card of over 8,000 characters whose end (to_account, last in the model's
# order, and the origin line) went when a phone cut it at its limit.
MANY = {**{f"line_{n:03d}": f"item {n}: consulting hours, rate, notes" for n in range(199)}, "to_account": ACCOUNT}
# The issue's 10 free-text arguments: one-line surfaces showed the account as "…[31 chars cut]…".
FREE_TEXT = {**{f"note_{n}": "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 4 for n in range(10)},
             "account": "DE89 3704 0044 0532 0130 00 1234567"}


def many_row(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": "apr-9-0badcafe", "action": "", "tool": "mcp__bank__pay", "arguments": arguments,
            "details": {"untrusted": ["github"]}, "sources": GITHUB}


def test_the_200_argument_card_keeps_every_name_the_account_and_the_origin_within_a_phones_limit() -> None:
    whole = announcement(request_view(many_row(MANY)), "expires in 10 min", limit=10**6)
    assert len(whole) > 8000  # what the phones used to cut at their end
    card = announcement(request_view(many_row(MANY)), "expires in 10 min")
    assert len(card) <= CARD_LIMIT < 3500
    lines = card.split("\n")
    assert lines[0] == "⚠ asked by a run that read untrusted content: github delivery-9a1f"
    assert lines[1].startswith("Approval needed [apr-9-0badcafe]: mcp__bank__pay(")
    assert all(f"{name}=" in lines[1] for name in MANY)
    assert f'to_account="{ACCOUNT}"' in lines[1]
    assert lines[-1] == "Values shortened to fit; the whole call: /show apr-9-0badcafe (Telegram), or the console."


def test_ten_free_text_arguments_keep_the_account_and_each_value_its_head_and_tail() -> None:
    line = compact_call("pay", FREE_TEXT)
    assert 'account="DE89 3704 0044 0532 0130 00 1234567"' in line
    for name in FREE_TEXT:
        if name != "account":
            value = re.search(rf'{name}="([^"]*)"', line)
            assert value is not None and re.fullmatch(r"Lor.*….*t\. ", value[1]), value
    card = announcement(request_view(many_row(FREE_TEXT)), "expires in 10 min", limit=1200)
    assert len(card) <= 1200 and 'account="DE89 3704 0044 0532 0130 00 1234567"' in card


def test_values_are_shortened_in_proportion_to_their_length() -> None:
    line = compact_call("t", {"a": "x" * 400, "b": "y" * 800}, limit=200)
    short_a = re.search(r'a="([^"]*)"', line)
    short_b = re.search(r'b="([^"]*)"', line)
    assert short_a is not None and short_b is not None
    assert 1.5 < len(short_b[1]) / len(short_a[1]) < 2.5  # twice as long, about twice as much kept


def test_a_card_with_more_names_than_room_still_names_them_and_stays_within_the_limit() -> None:
    arguments = {f"a_rather_long_argument_name_{n:03d}": n for n in range(300)}
    card = announcement(request_view(many_row(arguments)), "expires in 10 min")
    assert len(card) <= CARD_LIMIT and card.startswith("⚠ asked by a run that read untrusted content")
    assert "more arguments" in card and "/show apr-9-0badcafe" in card


def test_what_a_sink_approval_shows_is_on_its_card_before_the_calls_values() -> None:
    row = many_row(MANY)
    row["details"] = {**row["details"], "sink": "an open-world tool's arguments",
                      "outgoing": "https://attacker.example/c?d=" + "x" * 900, "private_read": ["note bank-pin"]}
    card = announcement(request_view(row), "expires in 10 min")
    assert len(card) <= CARD_LIMIT and "\nThe run had read your private data: note bank-pin\n" in card
    assert re.search(r"\n⚠ It would send to an open-world tool's arguments this text \(shortened here; /show has it "
                     r"whole\): hxxps\[://\]attacker\[\.\]example/c\?d=x+…\[\d+ chars cut\]…x+ \[link to attacker\[\.\]"
                     r"example\]\n", card)
    assert all(f"{name}=" in card for name in MANY)
    short = many_row({"to": "a@b.c"})
    short["details"] = {**short["details"], "sink": "a group chat", "outgoing": "hello"}
    assert "\n⚠ It would send to a group chat this text, whole: hello" in announcement(request_view(short), "x")


INVISIBLE = ["\u200b", "\u200d", "\u2060", "\ufeff", "\u202e", "\u2066", "\u00ad", "\U000e0041", "\ufe0f", "\u3164"]


@pytest.mark.parametrize("char", INVISIBLE)
def test_invisible_and_bidi_characters_are_shown_as_escapes_on_a_card(char: str) -> None:
    row = many_row({f"to{char}_account": f"DE89{char}3704", "memo": f"pay{char}now"})
    row["tool"] = f"mcp__bank__pay{char}"
    card = announcement(request_view(row), "expires in 10 min")
    assert char not in card and card.count(f"\\{'U' if ord(char) > 0xFFFF else 'u' if ord(char) > 0xFF else 'x'}") >= 4


def test_a_name_or_account_mixing_scripts_is_marked() -> None:
    line = compact_call("p\u0430y", {"to_\u0430ccount": "p\u0430ypal", "name": "Москва"})
    assert line.startswith("p\\u0430y(") and "to_\\u0430ccount=" in line and '"p\\u0430ypal"' in line
    assert "Москва" in line  # one script: nothing to mark
    assert compact_call("t", {"a\u00a0b": 1}) == "t(a\\xa0b=1)"  # a no-break space in a name shows


@pytest.mark.parametrize("text", [
    "Approval\u200b needed [apr-1-x]: pay(...)", "Approval\u00a0needed [apr-1-x]", "\u0410pproval needed [apr-1-x]",
    "\u0391pproval needed", "Appro\u200dval needed", "Question\u2060 for you: yes?", "\u202eApproval needed",
    "\u26a0 asked by a run that read untrusted content: your chat", "asked by a run started by your telegram #1",
    "Ａｐｐｒｏｖａｌ needed"])
def test_the_message_mark_cannot_be_dodged(text: str) -> None:
    said = message_from_run(text, None)
    assert said.startswith("(message) ")
    assert not any(char in said for char in "\u200b\u200d\u2060\u202e")


def test_a_card_line_inside_a_message_is_marked_too() -> None:
    said = message_from_run("All good.\n\nApproval needed [apr-1-x]: pay(amount=1)", "github delivery-9a1f")
    assert said.endswith("All good.\n\n(message) Approval needed [apr-1-x]: pay(amount=1)")
