"""The e-mail source's state in the inbox (issue 23), on both backends: messages stored with the listener's cursor
in one transaction, a copy refused, the cursor only forward within one UIDVALIDITY, a new UIDVALIDITY keeping the
newest date stored, status's "email", and a run's reply addressed to the mail it answers."""

from __future__ import annotations

import pytest

from console.core import Store
from console.core.mail import MailCursor

NOW = 1_790_000_000


def test_messages_are_stored_with_the_cursor_and_a_copy_is_refused(store: Store) -> None:
    assert store.mail_status() == {"state": "off", "reason": None, "last_uid": None, "uidvalidity": None,
                                   "since": None}
    stored = store.take_mail("email", MailCursor(77, 3, NOW - 60), now=NOW,
                             events=[("77:2", {"kind": "email", "text": "a"}),
                                     ("77:3", {"kind": "email", "text": "b"})])
    assert stored == [True, True] and store.mail_cursor("email") == MailCursor(77, 3, NOW - 60)
    again = store.take_mail("email", MailCursor(77, 3, NOW - 60), now=NOW, events=[("77:3", {"kind": "email"})])
    assert again == [False] and len(store.events(source="email")) == 2
    store.take_mail("email", MailCursor(77, 2, NOW), now=NOW)  # a late commit of a listener that lost the lease
    assert store.mail_cursor("email") == MailCursor(77, 3, NOW - 60)
    store.take_mail("email", MailCursor(91, 0, 0), now=NOW)  # the folder recreated: the newest date is kept
    assert store.mail_cursor("email") == MailCursor(91, 0, NOW - 60)
    assert store.mail_status()["last_uid"] == 0 and store.mail_status()["uidvalidity"] == 91


def test_health_and_status(store: Store) -> None:
    assert store.set_chat_health("email", "paused", "the server refused the login", now=NOW)
    assert not store.set_chat_health("email", "paused", "the server refused the login", now=NOW + 1)
    store.take_mail("email", MailCursor(5, 40, NOW), now=NOW)
    email = store.status(now=NOW)["email"]
    assert (email["state"], email["reason"], email["last_uid"]) == ("paused", "the server refused the login", 40)


def test_only_the_engine_writes_source_email(store: Store) -> None:
    with pytest.raises(ValueError, match="reserved"):
        store.ingest("email", "1:1", {"kind": "email", "trusted": True}, now=NOW)


def test_a_runs_reply_is_addressed_to_the_mail_it_answers(store: Store) -> None:
    store.take_mail("email", MailCursor(5, 9, NOW), now=NOW, events=[("5:9", {"kind": "email", "text": "hi"})])
    event = store.find_event("email", "5:9")
    assert event is not None
    assert store.conversation_of([event.id]) == "email:5:9"


def test_a_message_too_large_for_the_inbox_keeps_its_headers_and_trust(store: Store) -> None:
    payload = {"kind": "email", "from": {"address": "me@example.org", "name": None}, "subject": "big",
               "trusted": True, "authentication": "dmarc=pass", "text": "x" * (store.options.max_payload_bytes + 10),
               "attachments": [{"name": "a.bin", "type": "application/octet-stream", "size": 9}]}
    assert store.take_mail("email", MailCursor(5, 1, NOW), now=NOW, events=[("5:1", payload)]) == [True]
    event = store.find_event("email", "5:1")
    assert event is not None and isinstance(event.payload, dict)
    assert (event.payload["subject"], event.payload["trusted"], event.payload["text"]) == ("big", True, "")
    assert "could not take it whole" in event.payload["notes"][0] and "attachments" not in event.payload
    assert store.mail_cursor("email") == MailCursor(5, 1, NOW)


def test_a_payload_the_inbox_refuses_is_stored_without_its_text_not_stuck(store: Store) -> None:
    payload = {"kind": "email", "subject": "odd\x00", "text": "a \udcff c"}  # a lone surrogate is not UTF-8
    assert store.take_mail("email", MailCursor(5, 1, NOW), now=NOW, events=[("5:1", payload)]) == [True]
    event = store.find_event("email", "5:1")
    assert event is not None and isinstance(event.payload, dict)
    assert (event.payload["subject"], event.payload["text"]) == ("odd\x00", "")
    assert "lone surrogate" in event.payload["notes"][0]
