"""An event's one-line summary (the events table's "what" column) from the payload each source stores."""

from __future__ import annotations

from pathlib import Path

from console.core import Store
from console.core.summary import WHAT_CHARS, event_what
from console.edges.mailmsg import parse_message
from console.edges.telegram import event_of
from console.edges.verifiers import Delivery

MAIL = (b"From: Ann Lee <ann@example.org>\r\nTo: me@example.org\r\nSubject: Invoice 42 is overdue\r\n"
        b"Message-ID: <m1@example.org>\r\n\r\nPlease pay.\r\n")


def test_an_email_shows_its_subject_and_sender() -> None:
    assert event_what("email", parse_message(MAIL)) == "Invoice 42 is overdue — Ann Lee <ann@example.org>"
    assert event_what("email", {"from": {"address": "x@y.z", "name": ""}, "subject": ""}) == "(no subject) — x@y.z"


def test_a_chat_shows_its_text_on_one_line() -> None:
    made = event_of({"message_id": 103, "chat": {"id": 555001, "type": "private"}, "from": {"id": 555001},
                     "text": "book the table\nfor two at 8"}, edited=False, owner=True)
    assert made is not None
    assert event_what("telegram", made[1]) == "book the table for two at 8"
    photo = event_of({"message_id": 104, "chat": {"id": 555001}, "photo": [{"file_id": "f1", "file_size": 9}]},
                     edited=False, owner=True)
    assert photo is not None and event_what("telegram", photo[1]) == "[photo]"


def test_a_webhook_shows_its_type_and_title() -> None:
    pull = Delivery("d-1", "pull_request", {"action": "opened", "pull_request": {"title": "Fix the login"}})
    assert event_what("github", pull.payload) == "pull_request.opened: Fix the login"
    stripe = Delivery("evt_1", "invoice.paid", {"data": {"object": {"description": "Pro plan, December"}}})
    assert event_what("stripe", stripe.payload) == "invoice.paid: Pro plan, December"
    assert event_what("hooks", Delivery("d-2", "ping", {}).payload) == "ping"


def test_a_timer_shows_its_title_not_its_bookkeeping() -> None:
    fired = {"title": "Water the plants", "instruction": "remind me", "scheduled_for": 1, "late_by": 0, "skipped": 0}
    assert event_what("timer", fired) == "Water the plants"
    assert event_what("timer", {"task": "digest", "scheduled_for": 1, "late_by": 0, "skipped": 0}) == "digest"


def test_an_approval_outcome_and_anything_else() -> None:
    assert event_what("approval", {"approval": "apr-1", "answer": "yes"}) == "yes apr-1"
    assert event_what("approval", {"approval": "apr-2", "answer": "expired", "action": "drop table"}) == \
        "expired apr-2: drop table"
    assert event_what("manual", {"poison": True}) == '{"poison":true}'
    assert event_what("manual", "plain words") == "plain words"
    assert event_what("manual", None) == ""
    long = event_what("chat", {"text": "word " * 200})
    assert len(long) == WHAT_CHARS and long.endswith("…")


def test_an_event_read_from_the_store_says_what_it_is(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        store.ingest("chat", "c-1", {"text": "hello  there"}, now=100)
        assert store.events()[0].what() == "hello there"
