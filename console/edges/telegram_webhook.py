"""Telegram's webhook mode (issue 20): the signed receiver takes the bot's updates at their own path.

Telegram POSTs each update with the secret given to setWebhook in the X-Telegram-Bot-Api-Secret-Token header;
it is compared in constant time (hmac.compare_digest) before the body is read as anything. An update is kept
in the inbox under its update id (Store.queue_chat_update) before the receiver answers 200, so nothing Telegram
was told is taken is lost; the engine holding the lease takes the kept updates not yet taken, in update id order,
through the same path as getUpdates (the same event keys, pairing, commands and taps), each marked taken in the
transaction that takes it. Telegram may deliver updates out of order: one kept late with a lower id is taken all
the same. A redelivery of an update is kept once (a taken one is remembered for a week).
"""

from __future__ import annotations

import hmac
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console.edges.secretfile import Secret
from console.edges.verifiers import BadDelivery, Rejected

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
PATH = "/telegram"
# The Bot API's secret_token: 1-256 characters, A-Z, a-z, 0-9, _ and -.
SECRET_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


@dataclass(frozen=True)
class TelegramWebhook:
    secret: Secret
    channel: str = "telegram"  # the listener's name: its cursor says which updates it has taken
    source: str = "telegram"
    path: str = PATH

    def check(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, Any]:
        """(update id, update) of a delivery that carries the secret; Rejected or BadDelivery otherwise."""
        given = headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.secret.reveal().encode("utf-8")):
            raise Rejected(f"{SECRET_HEADER} is missing or wrong")
        try:
            update = json.loads(body)
        except ValueError:
            raise BadDelivery("the body is not JSON") from None
        update_id = update.get("update_id") if isinstance(update, dict) else None
        if not isinstance(update_id, int) or isinstance(update_id, bool) or update_id < 0:
            raise BadDelivery("the body is not a Telegram update (no update_id)")
        return update_id, update


def bot_api_call(api_base: str, token: Secret, method: str, payload: dict[str, Any], *, timeout: float = 20) -> Any:
    """One Bot API call from a short command (setWebhook, deleteWebhook); its result, or ValueError worded
    without the URL (it holds the token)."""
    request = urllib.request.Request(f"{api_base}/bot{token.reveal()}/{method}", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.loads(response.read(1024 * 1024))
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read(1024 * 1024))
        except ValueError:
            raise ValueError(f"{method}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"{method}: cannot reach the Bot API ({reason})") from None
    except ValueError:
        raise ValueError(f"{method}: the answer was not JSON") from None
    if isinstance(body, dict) and body.get("ok") is True:
        return body.get("result")
    described = body.get("description", "refused") if isinstance(body, dict) else "refused"
    code = body.get("error_code", "") if isinstance(body, dict) else ""
    raise ValueError(f"{method}: {code} {described}".replace("  ", " "))
