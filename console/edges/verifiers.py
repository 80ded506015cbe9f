"""Signature verifiers: each checks the raw body bytes before anything is parsed or stored.

Every comparison is hmac.compare_digest on digests, so the time taken says nothing about how much
of a forged signature was right. A verifier answers with a Delivery (the event's key, its kind and
its parsed body), raises Rejected (HTTP 401: missing, wrong or stale signature) or BadDelivery
(HTTP 400: signed, but not the JSON the source promised).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from multidict import CIMultiDict, CIMultiDictProxy

from console.core import MAX_PAYLOAD_DEPTH, ReplayGuard
from console.edges.secretfile import Secret

DEFAULT_TOLERANCE = 300
# Headers looked up case-insensitively: aiohttp's request headers (a read-only view) or a dict folded once.
Folded = CIMultiDict[str] | CIMultiDictProxy[str]


class Rejected(Exception):
    """The delivery is not proven to come from the source (401). The message is safe to log."""


class BadDelivery(Exception):
    """The delivery is authentic but unusable (400). The message is safe to log and to answer."""


@dataclass(frozen=True)
class Delivery:
    source_id: str
    kind: str | None
    body: Any
    challenge: str | None = None  # Slack's url_verification: answer it, store nothing

    @property
    def payload(self) -> dict[str, Any]:
        """What the inbox stores: the body as sent, and its kind (which GitHub sends only in a header)."""
        return {"type": self.kind, "body": self.body}


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def from_hex(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text.strip())
    except ValueError:
        return None


def from_base64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def matches(expected: bytes, candidates: list[bytes | None]) -> bool:
    """True if any candidate equals expected; every candidate is compared in constant time."""
    found = False
    for candidate in candidates:
        if candidate is not None and hmac.compare_digest(expected, candidate):
            found = True
    return found


def body_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _kind(parsed: Any, field: str = "type") -> str | None:
    value = parsed.get(field) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


class Verifier(ABC):
    kind: ClassVar[str]
    # True when the signature covers the body alone: no signed timestamp refuses an old delivery and no
    # signed id ties it to one key, so a captured body re-sent under a new id verifies. Such sources
    # keep a replay ledger of body digests (console.core.replays).
    body_only: ClassVar[bool] = False

    def __init__(self, secret: Secret, *, tolerance: int = DEFAULT_TOLERANCE, replay_window: int = 0) -> None:
        self._key = self._derive_key(secret)
        self.tolerance = tolerance
        self.replay_window = replay_window if self.body_only else 0

    def replay_guard(self, body: bytes) -> ReplayGuard | None:
        """What the inbox needs to refuse this body again within the window, or None (no ledger)."""
        if self.replay_window <= 0:
            return None
        return ReplayGuard(hashlib.sha256(body).digest(), self.replay_window)

    def _derive_key(self, secret: Secret) -> bytes:
        return secret.reveal().encode("utf-8")

    def check(self, body: bytes, headers: Mapping[str, str], *, now: int) -> Delivery:
        """Verify the signature on the raw bytes, then parse and identify the delivery."""
        # aiohttp's request headers are a read-only view of a CIMultiDict: taken as they are, not copied.
        folded = headers if isinstance(headers, CIMultiDict | CIMultiDictProxy) else CIMultiDict(headers)
        self.verify(body, folded, now=now)
        return self.identify(body, parse_json(body), folded)

    @abstractmethod
    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        """Raise Rejected unless the signature is right (and fresh, where the scheme has a timestamp)."""

    @abstractmethod
    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery: ...

    def _fresh(self, stamp: str, now: int) -> None:
        try:
            sent = int(stamp.strip())
        except ValueError:
            raise Rejected(f"timestamp {stamp[:40]!r} is not whole seconds") from None
        if sent < now - self.tolerance:
            raise Rejected(f"timestamp is {now - sent} s old, over the {self.tolerance} s tolerance")
        if sent > now + self.tolerance:
            raise Rejected(f"timestamp is {sent - now} s ahead, over the {self.tolerance} s tolerance")


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadDelivery("the body is not UTF-8 text") from None
    except ValueError:
        raise BadDelivery("the body is not JSON") from None
    except RecursionError:  # json's decoder recurses: far past what the inbox takes anyway
        raise BadDelivery(f"the body is nested deeper than {MAX_PAYLOAD_DEPTH} levels") from None


def _required(headers: Folded, name: str) -> str:
    value = headers.get(name, "").strip()
    if not value:
        raise Rejected(f"missing {name} header")
    return value


class GitHubVerifier(Verifier):
    """X-Hub-Signature-256: sha256=<hex HMAC of the body>. No timestamp, and the id is not signed:
    redeliveries are refused by id, replays under a new id by the body's digest."""

    kind = "github"
    body_only = True

    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        signature = _required(headers, "X-Hub-Signature-256")
        scheme, _, digest = signature.partition("=")
        if scheme != "sha256" or not matches(hmac_sha256(self._key, body), [from_hex(digest)]):
            raise Rejected("X-Hub-Signature-256 does not match the body")

    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery:
        delivery = headers.get("X-GitHub-Delivery", "").strip()
        if not delivery:
            raise BadDelivery("missing X-GitHub-Delivery header")
        return Delivery(delivery, headers.get("X-GitHub-Event") or None, parsed)


class StripeVerifier(Verifier):
    """Stripe-Signature: t=<ts>,v1=<hex>[,v1=<hex>...] over "<ts>.<body>"; several v1 during rotation."""

    kind = "stripe"

    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        stamp: str | None = None
        signatures: list[bytes | None] = []
        for item in _required(headers, "Stripe-Signature").split(","):
            name, _, value = item.strip().partition("=")
            if name == "t" and stamp is None:
                stamp = value
            elif name == "v1":
                signatures.append(from_hex(value))
        if stamp is None or not signatures:
            raise Rejected("Stripe-Signature lacks a t= timestamp or a v1= signature")
        self._fresh(stamp, now)
        if not matches(hmac_sha256(self._key, stamp.encode("ascii", "replace") + b"." + body), signatures):
            raise Rejected("no v1 signature in Stripe-Signature matches the body")

    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery:
        event_id = parsed.get("id") if isinstance(parsed, dict) else None
        if not isinstance(event_id, str) or not event_id.strip():
            raise BadDelivery("a Stripe event needs a string id")
        return Delivery(event_id, _kind(parsed), parsed)


class StandardVerifier(Verifier):
    """Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature (v1,<base64> ...), whsec_ secrets."""

    kind = "standard"
    PREFIX = "whsec_"

    def _derive_key(self, secret: Secret) -> bytes:
        text = secret.reveal()
        if not text.startswith(self.PREFIX):
            raise ValueError(f"a Standard Webhooks secret starts with {self.PREFIX}")
        key = from_base64(text[len(self.PREFIX):])
        if not key:
            raise ValueError(f"a Standard Webhooks secret is base64 after {self.PREFIX}")
        return key

    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        message_id = _required(headers, "webhook-id")
        stamp = _required(headers, "webhook-timestamp")
        signature = _required(headers, "webhook-signature")
        self._fresh(stamp, now)
        candidates = []
        for item in signature.split():
            version, _, value = item.partition(",")
            if version == "v1":
                candidates.append(from_base64(value))
        signed = f"{message_id}.{stamp}.".encode() + body
        if not matches(hmac_sha256(self._key, signed), candidates):
            raise Rejected("no v1 signature in webhook-signature matches the body")

    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery:
        return Delivery(headers["webhook-id"].strip(), _kind(parsed), parsed)


class SlackVerifier(Verifier):
    """X-Slack-Signature: v0=<hex HMAC of "v0:<ts>:<body>">, X-Slack-Request-Timestamp.

    The key is the event_id of an event_callback (Slack keeps it across its retries). Other signed
    bodies (app_rate_limited, say) carry no id; they are keyed by a hash of the body, because a
    Slack retry re-signs with a new timestamp but resends the same bytes, so a retry is refused
    while two different notices, which always differ in their content, are both kept.
    """

    kind = "slack"

    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        stamp = _required(headers, "X-Slack-Request-Timestamp")
        signature = _required(headers, "X-Slack-Signature")
        self._fresh(stamp, now)
        version, _, digest = signature.partition("=")
        signed = b"v0:" + stamp.encode("ascii", "replace") + b":" + body
        if version != "v0" or not matches(hmac_sha256(self._key, signed), [from_hex(digest)]):
            raise Rejected("X-Slack-Signature does not match the body")

    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery:
        if not isinstance(parsed, dict):
            raise BadDelivery("a Slack event is a JSON object")
        kind = _kind(parsed)
        if kind == "url_verification":
            challenge = parsed.get("challenge")
            if not isinstance(challenge, str):
                raise BadDelivery("a url_verification needs a string challenge")
            return Delivery("", kind, parsed, challenge=challenge)
        event_id = parsed.get("event_id")
        if kind == "event_callback":
            if not isinstance(event_id, str) or not event_id.strip():
                raise BadDelivery("an event_callback needs a string event_id")
            return Delivery(event_id, _kind(parsed.get("event")) or kind, parsed)
        if isinstance(event_id, str) and event_id.strip():
            return Delivery(event_id, kind, parsed)
        return Delivery(body_digest(body), kind, parsed)


class HmacVerifier(Verifier):
    """Home-made senders: an HMAC-SHA256 of the body in one header, as hex or sha256=<hex>."""

    kind = "hmac"
    body_only = True

    def __init__(
        self, secret: Secret, *, tolerance: int = DEFAULT_TOLERANCE, header: str = "X-Signature",
        id_header: str = "X-Delivery-Id", replay_window: int = 0,
    ) -> None:
        super().__init__(secret, tolerance=tolerance, replay_window=replay_window)
        self.header = header
        self.id_header = id_header

    def verify(self, body: bytes, headers: Folded, *, now: int) -> None:
        signature = _required(headers, self.header)
        digest = signature[len("sha256="):] if signature.lower().startswith("sha256=") else signature
        if not matches(hmac_sha256(self._key, body), [from_hex(digest)]):
            raise Rejected(f"{self.header} does not match the body")

    def identify(self, body: bytes, parsed: Any, headers: Folded) -> Delivery:
        delivery = headers.get(self.id_header, "").strip()
        if not delivery:
            raise BadDelivery(f"missing {self.id_header} header")
        return Delivery(delivery, _kind(parsed), parsed)


VERIFIERS: dict[str, type[Verifier]] = {
    cls.kind: cls for cls in (GitHubVerifier, StripeVerifier, StandardVerifier, SlackVerifier, HmacVerifier)
}
