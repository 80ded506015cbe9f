"""Reading real mail (issue 23): the text the agent sees, decoded whatever the message's charsets and headers say,
attachments listed and not stored, a cap with a note, malformed MIME read as far as it goes, who is trusted,
and which mail a machine sent (never answered). The [email] settings' errors name the setting."""

from __future__ import annotations

import json
from email.message import EmailMessage
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.config import ConfigError, Settings
from console.edges.mail_config import build_mail_settings
from console.edges.mailmsg import parse_message, read_message

OWNER = "me@example.org"
AUTH = "Authentication-Results: mx.example.org; dkim=pass header.d=example.org; dmarc=pass header.from=example.org\r\n"


def test_plain_text_is_preferred_and_html_alone_becomes_readable_text() -> None:
    both = EmailMessage()
    both["From"] = OWNER
    both["Subject"] = "=?utf-8?q?Caf=C3=A9_au_lait?="
    both.set_content("the plain one")
    both.add_alternative("<p>the <b>html</b> one</p>", subtype="html")
    payload = parse_message(bytes(both))
    assert (payload["text"], payload["body_from"], payload["subject"]) == ("the plain one", "text/plain",
                                                                          "Café au lait")
    html_only = EmailMessage()
    html_only["From"] = OWNER
    html_only.set_content("<html><head><style>p{}</style></head><body><h1>Hello</h1><p>See "
                          "<a href='https://example.org/x'>this</a></p><ul><li>one</li><li>two</li></ul>"
                          "<script>alert(1)</script></body></html>", subtype="html")
    text = parse_message(bytes(html_only))["text"]
    assert text == "Hello\n\nSee this <https://example.org/x>\n\n- one\n- two"


def test_odd_charsets_and_headers_are_decoded_not_fatal() -> None:
    raw = (b"From: =?iso-8859-1?q?Andr=E9?= <andre@example.org>\r\nSubject: =?koi8-r?b?8NLJ18XU?=\r\n"
           b"Content-Type: text/plain; charset=windows-1252\r\n\r\n") + "café €".encode("cp1252")
    payload = parse_message(raw)
    assert payload["from"] == {"address": "andre@example.org", "name": "André"}
    assert payload["subject"] == "Привет" and payload["text"] == "café €"
    unknown = b"From: a@example.org\r\nContent-Type: text/plain; charset=x-no-such\r\n\r\ncaf\xc3\xa9"
    payload = parse_message(unknown)
    assert payload["text"] == "café" and payload["notes"]


def test_attachments_are_listed_not_stored_and_a_long_body_is_cut_with_a_note() -> None:
    message = EmailMessage()
    message["From"] = OWNER
    message.set_content("x" * 5000)
    message.add_attachment(b"\x00" * 1234, maintype="application", subtype="pdf", filename="invoice.pdf")
    payload = parse_message(bytes(message), body_cap=1000)
    assert payload["attachments"] == [{"name": "invoice.pdf", "type": "application/pdf", "size": 1234}]
    assert len(payload["text"]) == 1000 and any("cut at 1,000" in note for note in payload["notes"])
    assert "\x00" not in str(payload)


def test_raw_8_bit_headers_are_read_as_utf_8() -> None:
    raw = b"From: Andr\xc3\xa9 <andre@example.org>\r\nSubject: caf\xc3\xa9 \xff\r\n\r\nhi"
    payload = read_message(raw, trusted_senders=[OWNER], authserv_id="mx.example.org")
    assert payload["subject"] == "café \ufffd" and payload["from"]["name"] == "André"
    json.dumps(payload).encode("utf-8")  # no lone surrogate left: the inbox takes it as text


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_are_read_without_raising(raw: bytes) -> None:
    payload = read_message(raw, trusted_senders=[OWNER], authserv_id="mx.example.org")
    assert payload["trusted"] is False and isinstance(payload["text"], str)
    json.dumps(payload, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(("headers", "trusted"), [
    (AUTH + f"From: {OWNER}\r\n", True),
    ("Authentication-Results: mx.example.org; dkim=pass header.d=mail.example.org; dmarc=none\r\n"
     f"From: {OWNER}\r\n", True),   # aligned DKIM (a subdomain signs)
    ("Authentication-Results: mx.example.org; dkim=pass header.d=other.example; dmarc=none\r\n"
     f"From: {OWNER}\r\n", False),  # DKIM by someone else's domain
    (f"From: {OWNER}\r\n" + AUTH.replace("mx.example.org", "MX.example.org"), True),
    ("Authentication-Results: mx.example.org; dmarc=fail header.from=example.org\r\n" + AUTH +
     f"From: {OWNER}\r\n", False),  # only the topmost header of the owner's server counts
    (AUTH + f"From: {OWNER}, other@example.org\r\n", False),
    (AUTH + "From: stranger@example.org\r\n", False),
])
def test_trust_needs_a_trusted_sender_authenticated_by_the_owners_server(headers: str, trusted: bool) -> None:
    payload = read_message((headers + "\r\nhello").encode(), trusted_senders=[OWNER], authserv_id="mx.example.org")
    assert payload["trusted"] is trusted, payload["authentication"]
    assert ("untrusted" in payload["about"]) is not trusted


@pytest.mark.parametrize(("header", "reason"), [
    ("Auto-Submitted: auto-replied", "Auto-Submitted: auto-replied"),
    ("Auto-Submitted: no", None),
    ("Precedence: bulk", "Precedence: bulk"),
    ("List-Id: <news.example.org>", "a mailing list (List-Id)"),
    ("X-Other: 1", None),
])
def test_mail_a_machine_sent_is_never_answered(header: str, reason: str | None) -> None:
    assert parse_message(f"From: {OWNER}\r\n{header}\r\n\r\nhi".encode())["auto"] == reason


@pytest.mark.parametrize("sender", ["MAILER-DAEMON@example.org", "no-reply@example.org", "noreply+x@example.org",
                                    "do-not-reply@example.org", "postmaster@example.org"])
def test_automatic_senders_are_never_answered(sender: str) -> None:
    assert parse_message(f"From: {sender}\r\n\r\nhi".encode())["auto"] == f"an automatic sender ({sender.lower()})"


def _settings(tmp_path: Path, **email: object) -> Settings:
    return Settings(db=tmp_path / "inbox.db", webhooks={"secrets_file": str(tmp_path / "secrets.env")},
                    email={"imap_host": "imap.example.org", "user": OWNER, "password_env": "PW", **email})


@pytest.mark.parametrize(("email", "environ", "error"), [
    ({"password": "hunter2"}, {"PW": "x"}, "email.password: never in the config file"),
    ({}, {}, "email.password_env: the secret PW is not set"),
    ({"tls": "none"}, {"PW": "x"}, "email.tls: expected one of 'implicit', 'starttls'"),
    ({"after": "move"}, {"PW": "x"}, "email.move_to:"),
    ({"trusted_senders": [OWNER]}, {"PW": "x"}, "email.authserv_id:"),
    ({"untrusted": "drop"}, {"PW": "x"}, "email.untrusted:"),
    ({"since": "last week"}, {"PW": "x"}, "email.since:"),
    ({"imapport": 1}, {"PW": "x"}, "email.imapport: unknown setting"),
    ({"reconnect_base": 0}, {"PW": "x"}, "email.reconnect_base: expected a number from 0.01 to 3600, got 0"),
    ({"reconnect_base": 5, "reconnect_max": 2}, {"PW": "x"}, "email.reconnect_max: expected a number from 5 to"),
    ({"login_retry": "5m"}, {"PW": "x"}, "email.login_retry: expected a number from 1 to 86400, got '5m'"),
])
def test_bad_settings_name_the_setting(tmp_path: Path, email: dict[str, object], environ: dict[str, str],
                                       error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(")) as raised:
        build_mail_settings(_settings(tmp_path, **email), environ)
    assert "hunter2" not in str(raised.value)


def test_the_password_comes_from_the_secrets_file(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("PW=from-the-file\n")
    secrets.chmod(0o600)
    mail = build_mail_settings(_settings(tmp_path, smtp_host="smtp.example.org"), {})
    assert mail is not None and mail.password.reveal() == "from-the-file"
    assert (mail.imap_port, mail.smtp_port, mail.folder, mail.from_address) == (993, 587, "INBOX", OWNER)
    assert (mail.reconnect_base, mail.reconnect_max, mail.login_retry) == (1, 60, 300)
    assert "from-the-file" not in repr(mail)
