"""Test-side signers, one per verifier. Where the provider publishes a signing library, it signs.

GitHub, Stripe (its library is not a dependency here) and the home-made hmac scheme are signed by
hand from their published descriptions; Standard Webhooks and Slack by their own libraries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

from slack_sdk.signature import SignatureVerifier
from standardwebhooks.webhooks import Webhook

SECRETS = {
    "github": "gh-secret-Vx93",
    "stripe": "whsec_stripe-test-secret-Q27",
    "standard": "whsec_" + base64.b64encode(b"standard-webhooks-key-bytes-41").decode(),
    "slack": "slack-signing-secret-8Hd",
    "hmac": "home-made-secret-Zz1",
}
WRONG = {
    "github": "not-the-secret",
    "stripe": "whsec_not-the-secret",
    "standard": "whsec_" + base64.b64encode(b"another-key").decode(),
    "slack": "not-the-secret",
    "hmac": "not-the-secret",
}
ENV_NAMES = {kind: f"TEST_{kind.upper()}_SECRET" for kind in SECRETS}
TIMESTAMPED = ("stripe", "standard", "slack")


def _hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def sign(kind: str, body: bytes, *, now: int, delivery_id: str = "d-1", secret: str | None = None,
         extra_signatures: int = 0) -> dict[str, str]:
    """Headers for a delivery of `body` signed at `now`. extra_signatures adds wrong ones (rotation)."""
    key = secret if secret is not None else SECRETS[kind]
    if kind == "github":
        return {"X-Hub-Signature-256": "sha256=" + _hex(key, body), "X-GitHub-Delivery": delivery_id,
                "X-GitHub-Event": "push"}
    if kind == "stripe":
        good = _hex(key, f"{now}.".encode() + body)
        others = [_hex(f"old-{n}", f"{now}.".encode() + body) for n in range(extra_signatures)]
        return {"Stripe-Signature": ",".join([f"t={now}", *(f"v1={s}" for s in [*others, good]), "v0=ignored"])}
    if kind == "standard":
        data = body.decode()
        good = Webhook(key).sign(delivery_id, datetime.fromtimestamp(now, tz=UTC), data)
        at = datetime.fromtimestamp(now, tz=UTC)
        old_keys = ["whsec_" + base64.b64encode(f"old-key-{n}".encode()).decode() for n in range(extra_signatures)]
        others = [Webhook(old).sign(delivery_id, at, data) for old in old_keys]
        return {"webhook-id": delivery_id, "webhook-timestamp": str(now),
                "webhook-signature": " ".join([*others, good])}
    if kind == "slack":
        signature = SignatureVerifier(key).generate_signature(timestamp=str(now), body=body)
        assert signature is not None
        return {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": signature}
    if kind == "hmac":
        return {"X-Signature": "sha256=" + _hex(key, body), "X-Delivery-Id": delivery_id}
    raise ValueError(kind)


def body_for(kind: str, delivery_id: str = "d-1", text: str = "héllo") -> bytes:
    """A JSON body in each provider's shape whose key is delivery_id (where the key lives in the body).

    Every body names its delivery, as real ones do (a GitHub push carries its commits, a home-made
    sender a time or a counter): two different deliveries are never byte-identical, which for github and
    hmac would be a replay."""
    if kind == "stripe":
        return f'{{"id": "{delivery_id}", "type": "charge.succeeded", "data": {{"text": "{text}"}}}}'.encode()
    if kind == "slack":
        return (f'{{"type": "event_callback", "event_id": "{delivery_id}", '
                f'"event": {{"type": "message", "text": "{text}"}}}}').encode()
    return f'{{"type": "note", "text": "{text}", "n": 1, "ref": "{delivery_id}"}}'.encode()
