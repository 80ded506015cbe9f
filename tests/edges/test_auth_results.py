"""Authentication-Results read as RFC 8601 says (issue 31, item 4): quoted strings and comments are read as what
they are, several headers are told apart by their authserv-id, and only the topmost one of the owner's own server
counts. A forged result hidden in a quoted string, a comment, an encoded word or a header below grants no trust,
whatever shape it takes (a property-based test builds hostile headers and knows what each one means)."""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.edges.mailmsg import judge, parse_auth_results, read_message

OURS = "mx.example.org"
OWNER = "me@example.org"


def verdict_of(headers: str, *, sender: str = OWNER) -> tuple[bool, str]:
    raw = f"{headers}From: Me <{sender}>\r\nTo: agent@example.org\r\nSubject: hi\r\n\r\nhello\r\n".encode()
    payload = read_message(raw, trusted_senders=[OWNER], authserv_id=OURS)
    return payload["trusted"], payload["authentication"]


@pytest.mark.parametrize("header", [
    # The forged header: the owner's server says dmarc=fail; the attacker's envelope sender holds the rest.
    f'{OURS}; dmarc=fail smtp.mailfrom="x;dmarc=pass"@evil.example header.from=example.org',
    f'{OURS}; dmarc=fail smtp.mailfrom="x;dmarc=pass header.from=example.org"@evil.example',
    f'{OURS}; dmarc=fail (x; dmarc=pass header.from=example.org) header.from=example.org',
    f'{OURS}; spf=fail smtp.mailfrom="a\\"; dmarc=pass header.from=example.org; x=\\""@evil.example',
    f'{OURS}; dkim=fail reason="; dkim=pass header.d=example.org" header.d=example.org',
    f'{OURS}; dmarc=fail header.from=example.org; dmarc=pass header.from=example.org',  # contradicts itself
    f'{OURS}; dkim=pass header.d=example.org; dmarc=fail header.from=example.org',      # aligned DKIM, yet fail
    f'{OURS}; dmarc=pass',                          # which domain passed is not said
    f'{OURS} 2; dmarc=pass header.from=example.org',  # a version this reader does not know
    f'{OURS}; dmarc=pass header.from=example.org (unclosed',  # the owner's server's header, unreadable
    f'"{OURS}"; dmarc=pass header.from=example.org (',
    f'{OURS}; none',
])
def test_a_forged_or_unreadable_result_of_the_owners_server_grants_no_trust(header: str) -> None:
    trusted, why = verdict_of(f"Authentication-Results: {header}\r\n")
    assert trusted is False, why


def test_an_encoded_word_is_not_decoded_into_a_result() -> None:
    """RFC 2047 has no place in Authentication-Results: read raw, "=?...?=" stays inside its quoted string (decoded,
    it would close the quote and add "; dmarc=pass")."""
    header = (f'{OURS}; dmarc=fail smtp.mailfrom="x =?utf-8?q?=22=3B_dmarc=3Dpass_header=2Efrom=3Dexample=2Eorg_?= '
              f'y"@evil.example header.from=example.org')
    assert verdict_of(f"Authentication-Results: {header}\r\n")[0] is False


def test_only_the_topmost_header_of_the_owners_server_counts() -> None:
    passed = f"Authentication-Results: {OURS}; dmarc=pass header.from=example.org\r\n"
    failed = f"Authentication-Results: {OURS}; dmarc=fail header.from=example.org\r\n"
    other = "Authentication-Results: relay.example.net; dmarc=fail header.from=example.org\r\n"
    assert verdict_of(other + passed + failed)[0] is True   # another server's header above is not the owner's
    assert verdict_of(failed + passed)[0] is False          # a pass below the owner's server's own is a forgery
    assert verdict_of(f"Authentication-Results: {OURS}; dmarc=pass header.from=example.org (\r\n" + passed)[0] is False
    folded = f"Authentication-Results: {OURS};\r\n\tdkim=pass (good\r\n signature) header.d=example.org\r\n"
    assert verdict_of(folded) == (True, f"dkim=pass (aligned, d=example.org) by {OURS}")


def test_real_servers_headers_are_read() -> None:
    gmail = (f"{OURS}; dkim=pass header.i=@example.org header.s=sel header.b=XYZ; spf=pass (google.com: domain "
             f"of me@example.org designates 1.2.3.4 as permitted sender) smtp.mailfrom=me@example.org; dmarc=pass "
             "(p=NONE sp=NONE dis=NONE) header.from=example.org")
    fastmail = (f"{OURS}; dkim=pass (2048-bit rsa key sha256) header.d=example.org header.i=@example.org "
                "header.b=abc header.a=rsa-sha256 header.s=sel x-bits=2048; dmarc=pass "
                "policy.published-domain-policy=none header.from=example.org; arc=none (no signatures)")
    microsoft = (f"{OURS} 1; spf=pass (sender IP is 1.2.3.4) smtp.mailfrom=example.org; dkim=pass (signature was "
                 "verified) header.d=example.org;dmarc=pass action=none header.from=example.org;compauth=pass "
                 "reason=100")
    for header in (gmail, fastmail, microsoft):
        assert verdict_of(f"Authentication-Results: {header}\r\n") == (
            True, f"dmarc=pass for example.org by {OURS}"), header
    read = parse_auth_results(gmail)
    assert read.authserv_id == OURS and [(m, r) for m, r, _ in read.results or []] == [
        ("dkim", "pass"), ("spf", "pass"), ("dmarc", "pass")]


# --- hostile headers, built from what they mean ------------------------------------------------------------
# Text an attacker controls: what an envelope sender, a reason or a comment may carry, forged results included.
HOSTILE = st.lists(st.sampled_from([
    "x", ";", "=", " ", "(", ")", '"', "\\", "@", ".", "dmarc=pass", "dkim=pass", "header.from=example.org",
    "header.d=example.org", f"{OURS};", "none", "\t", "=?utf-8?q?=22=3B?=", "\x01", "é", "\\é",
]), max_size=12).map("".join)
DOMAINS = st.sampled_from(["example.org", "mail.example.org", "evil.example", "org", "example.org.evil.example"])


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def comment(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


@dataclass(frozen=True)
class Result:
    method: str
    result: str
    domain: str | None    # header.from (dmarc) or header.d (dkim)
    mailfrom: str         # hostile: inside a quoted string
    remark: str           # hostile: inside a comment

    def render(self) -> str:
        prop = {"dmarc": "header.from", "dkim": "header.d"}.get(self.method)
        parts = [f"{self.method}={self.result}", comment(self.remark)]
        if prop is not None and self.domain is not None:
            parts.append(f"{prop}={self.domain}")
        parts.append(f"smtp.mailfrom={quoted(self.mailfrom)}@evil.example")
        return " ".join(parts)


@dataclass(frozen=True)
class Header:
    server: str
    results: tuple[Result, ...]

    def render(self) -> str:
        body = "; ".join(r.render() for r in self.results) if self.results else "none"
        return f"Authentication-Results: {self.server} {comment('x; dmarc=pass')}; {body}\r\n"


RESULTS = st.builds(Result, st.sampled_from(["dmarc", "dkim", "spf", "arc"]),
                    st.sampled_from(["pass", "fail", "none", "temperror"]), st.none() | DOMAINS, HOSTILE, HOSTILE)
HEADERS = st.builds(Header, st.sampled_from([OURS, OURS.upper(), "relay.example.net", "mx.example.org.evil"]),
                    st.lists(RESULTS, max_size=4).map(tuple))


def aligned(signer: str) -> bool:
    return signer in ("example.org", "mail.example.org")


def readable(header: Header) -> bool:
    """RFC 8601 headers are ASCII: a control character (but a tab) or a non-ASCII one anywhere, even inside a
    quoted string or a comment, makes the header unreadable, and the owner's server's unreadable header proves
    nothing (it is never passed over for one below)."""
    return all(char == "\t" or " " <= char <= "~" for char in header.render().rstrip("\r\n"))


def meant(headers: list[Header]) -> bool:
    """Whether the owner's server vouched for example.org, read from what the headers were built of."""
    ours = next((h for h in headers if h.server.lower() == OURS), None)
    if ours is None or not readable(ours):
        return False
    dmarc = [r for r in ours.results if r.method == "dmarc"]
    if any(r.result == "fail" for r in dmarc):
        return False
    if dmarc and all(r.result == "pass" for r in dmarc) and all(
            r.domain is not None and aligned(r.domain) for r in dmarc):
        return True
    return any(r.method == "dkim" and r.result == "pass" and r.domain is not None and aligned(r.domain)
               for r in ours.results)


@settings(max_examples=150, deadline=None)
@given(st.lists(HEADERS, max_size=3))
def test_hostile_headers_grant_trust_exactly_when_the_owners_server_said_so(headers: list[Header]) -> None:
    trusted, why = verdict_of("".join(h.render() for h in headers))
    assert trusted is meant(headers), (why, [h.render() for h in headers])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.sampled_from([OURS, "relay.example.net"]))
def test_any_text_in_the_header_is_read_without_raising(text: str, server: str) -> None:
    value = f"{server}; {text}".replace("\r", " ").replace("\n", " ")
    message = email.message_from_bytes(f"Authentication-Results: {value}\r\nFrom: {OWNER}\r\n\r\nhi".encode(
        "utf-8", "surrogatepass"), policy=email.policy.default)
    verdict = judge(message, trusted_senders=[OWNER], authserv_id=OURS)
    assert isinstance(verdict.trusted, bool) and verdict.why


def test_a_very_long_or_deeply_nested_header_is_refused_quickly() -> None:
    nested = f"{OURS}; dmarc=pass header.from=example.org " + "(" * 5000 + ")" * 5000
    long = f"{OURS}; " + "; ".join(f"dkim=fail header.d=x{i}.example" for i in range(5000))
    for header in (nested, long):
        assert verdict_of(f"Authentication-Results: {header}\r\n")[0] is False
