"""Signature vectors for every verifier, signed by the providers' own libraries where they exist."""

from __future__ import annotations

import json

import pytest

from console.edges.secretfile import Secret
from console.edges.verifiers import VERIFIERS, BadDelivery, Delivery, Rejected, Verifier, body_digest
from tests.edges.signing import SECRETS, TIMESTAMPED, WRONG, body_for, sign

NOW = 1_700_000_000
KINDS = sorted(VERIFIERS)
REQUIRED_HEADERS = {
    "github": ["X-Hub-Signature-256"],
    "stripe": ["Stripe-Signature"],
    "standard": ["webhook-id", "webhook-timestamp", "webhook-signature"],
    "slack": ["X-Slack-Request-Timestamp", "X-Slack-Signature"],
    "hmac": ["X-Signature"],
}


def verifier(kind: str) -> Verifier:
    return VERIFIERS[kind](Secret(SECRETS[kind]))


def check(kind: str, body: bytes, headers: dict[str, str], now: int = NOW) -> Delivery:
    return verifier(kind).check(body, headers, now=now)


@pytest.mark.parametrize("kind", KINDS)
def test_valid_delivery_is_accepted_and_keyed(kind: str) -> None:
    body = body_for(kind, "key-77")
    delivery = check(kind, body, sign(kind, body, now=NOW, delivery_id="key-77"))
    assert delivery.source_id == "key-77"
    assert delivery.body == json.loads(body)
    assert delivery.challenge is None


@pytest.mark.parametrize("kind", KINDS)
def test_header_names_are_case_insensitive(kind: str) -> None:
    body = body_for(kind)
    headers = {name.lower(): value for name, value in sign(kind, body, now=NOW).items()}
    assert check(kind, body, headers).source_id == "d-1"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("position", [0, 17, -2])
def test_one_byte_tampered_is_rejected(kind: str, position: int) -> None:
    body = body_for(kind)
    headers = sign(kind, body, now=NOW)
    tampered = bytearray(body)
    tampered[position] ^= 0x01
    with pytest.raises(Rejected):
        check(kind, bytes(tampered), headers)


@pytest.mark.parametrize("kind", KINDS)
def test_body_reserialised_as_json_is_rejected(kind: str) -> None:
    body = body_for(kind)
    headers = sign(kind, body, now=NOW)
    reserialised = json.dumps(json.loads(body), separators=(",", ":")).encode()
    assert reserialised != body and json.loads(reserialised) == json.loads(body)
    with pytest.raises(Rejected):
        check(kind, reserialised, headers)


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_secret_is_rejected(kind: str) -> None:
    body = body_for(kind)
    with pytest.raises(Rejected):
        check(kind, body, sign(kind, body, now=NOW, secret=WRONG[kind]))


@pytest.mark.parametrize(("kind", "header"), [(k, h) for k in KINDS for h in REQUIRED_HEADERS[k]])
def test_missing_header_is_rejected(kind: str, header: str) -> None:
    body = body_for(kind)
    headers = sign(kind, body, now=NOW)
    del headers[header]
    with pytest.raises(Rejected, match="missing"):
        check(kind, body, headers)


@pytest.mark.parametrize("kind", TIMESTAMPED)
@pytest.mark.parametrize("offset", [-301, 301])
def test_timestamp_outside_tolerance_is_rejected(kind: str, offset: int) -> None:
    body = body_for(kind)
    headers = sign(kind, body, now=NOW + offset)  # a correct signature, made 301 s before/after now
    with pytest.raises(Rejected, match="old" if offset < 0 else "ahead"):
        check(kind, body, headers)


@pytest.mark.parametrize("kind", TIMESTAMPED)
@pytest.mark.parametrize("offset", [-300, 300])
def test_timestamp_at_the_tolerance_is_accepted(kind: str, offset: int) -> None:
    body = body_for(kind)
    assert check(kind, body, sign(kind, body, now=NOW + offset)).source_id == "d-1"


@pytest.mark.parametrize("kind", ["stripe", "standard"])
def test_one_valid_signature_among_several_is_accepted(kind: str) -> None:
    body = body_for(kind)
    headers = sign(kind, body, now=NOW, extra_signatures=2)
    assert check(kind, body, headers).source_id == "d-1"
    only_old = sign(kind, body, now=NOW, secret=WRONG[kind], extra_signatures=2)
    with pytest.raises(Rejected):
        check(kind, body, only_old)


def test_hmac_accepts_bare_hex_and_a_configured_header() -> None:
    secret = Secret(SECRETS["hmac"])
    custom = VERIFIERS["hmac"](secret, header="X-Hub-Sig", id_header="X-Id")  # type: ignore[call-arg]
    body = b'{"a": 1}'
    digest = sign("hmac", body, now=NOW)["X-Signature"].removeprefix("sha256=")
    assert custom.check(body, {"X-Hub-Sig": digest.upper(), "X-Id": "x-9"}, now=NOW).source_id == "x-9"
    with pytest.raises(Rejected):
        custom.check(body, {"X-Signature": digest, "X-Id": "x-9"}, now=NOW)


@pytest.mark.parametrize("kind", KINDS)
def test_signed_but_not_json_is_a_bad_delivery(kind: str) -> None:
    body = b"payload=%7B%7D"
    with pytest.raises(BadDelivery, match="JSON"):
        check(kind, body, sign(kind, body, now=NOW))


def test_github_needs_a_delivery_id() -> None:
    body = body_for("github")
    headers = sign("github", body, now=NOW)
    del headers["X-GitHub-Delivery"]
    with pytest.raises(BadDelivery, match="X-GitHub-Delivery"):
        check("github", body, headers)


def test_stripe_key_is_the_event_id() -> None:
    body = b'{"type": "charge.succeeded"}'
    with pytest.raises(BadDelivery, match="id"):
        check("stripe", body, sign("stripe", body, now=NOW))


def test_slack_url_verification_is_answered_not_stored() -> None:
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    body = f'{{"type": "url_verification", "token": "t", "challenge": "{challenge}"}}'.encode()
    delivery = check("slack", body, sign("slack", body, now=NOW))
    assert delivery.challenge == challenge


def test_slack_without_event_id_is_keyed_by_the_body() -> None:
    body = b'{"type": "app_rate_limited", "minute_rate_limited": 1518467820}'
    first = check("slack", body, sign("slack", body, now=NOW))
    retry = check("slack", body, sign("slack", body, now=NOW + 60))  # a retry is re-signed later
    assert first.source_id == retry.source_id == body_digest(body)
    other = b'{"type": "app_rate_limited", "minute_rate_limited": 1518467880}'
    assert check("slack", other, sign("slack", other, now=NOW)).source_id != first.source_id


def test_payload_keeps_the_kind_github_sends_in_a_header() -> None:
    body = body_for("github")
    assert check("github", body, sign("github", body, now=NOW)).payload == {"type": "push", "body": json.loads(body)}
    slack = body_for("slack")
    assert check("slack", slack, sign("slack", slack, now=NOW)).payload["type"] == "message"


def test_standard_secret_must_be_whsec_base64() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        VERIFIERS["standard"](Secret("plain-secret"))
    with pytest.raises(ValueError, match="base64"):
        VERIFIERS["standard"](Secret("whsec_***not base64***"))


def test_garbage_signatures_are_rejected_not_crashing() -> None:
    body = body_for("stripe")
    for header in ["t=abc,v1=00", "t=1700000000,v1=zz", "v1=00", ",,,", "t=1700000000"]:
        with pytest.raises(Rejected):
            check("stripe", body, {"Stripe-Signature": header})
    std = sign("standard", body, now=NOW)
    std["webhook-signature"] = "v1,@@@ v2,abc v1"
    with pytest.raises(Rejected):
        check("standard", body, std)
