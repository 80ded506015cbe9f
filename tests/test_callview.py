"""One way of showing an approval, for every surface (console/callview.py): every argument's name, identifying
and short values first, long values cut in their middle with how much was cut, the origin, questions as
questions, and messages from runs that can never pass for a card."""

from __future__ import annotations

import re
from typing import Any

import pytest

from console.trust.callview import (
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
    first, origin = text.split("\n")
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
