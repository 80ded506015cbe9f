"""The [[channels]] settings of the phone channels (ntfy, telegram), checked, with errors naming the setting.

Tokens come from the environment variable named by token_env, or from the secrets file (webhooks.secrets_file
when set, else secrets.env in the user's config folder), never from the config file itself.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from console.config import ConfigError, Settings
from console.edges.answerkey import secrets_path
from console.edges.ntfy import DEFAULT_SERVER, TOPIC, NtfyChannel
from console.edges.phone import PhoneChannel
from console.edges.secretfile import Secret, load_secrets_file, resolve_secret
from console.edges.telegram import DEFAULT_API_BASE, DEFAULT_BATCH_WINDOW, TelegramChannel
from console.edges.telegram_webhook import SECRET_PATTERN, TelegramWebhook

DEFAULT_TIMEOUT = 10.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _base_url(value: Any, setting: str) -> str:
    parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{setting}: expected an http:// or https:// URL")
    if parts.username is not None or parts.query:
        raise ConfigError(f"{setting}: put no credentials or query in the URL (use token_env for a token)")
    assert isinstance(value, str)
    return value.rstrip("/")


def _timeout(raw: Mapping[str, Any], where: str) -> float:
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise ConfigError(f"{where}.timeout: expected seconds between 0 and 600, got {timeout!r}")
    return float(timeout)


def _token(raw: Mapping[str, Any], where: str, settings: Settings, environ: Mapping[str, str],
           required: bool, key: str = "token_env") -> Secret | None:
    variable = raw.get(key)
    if variable is None:
        if required:
            raise ConfigError(f"{where}.{key}: missing (the name of the variable holding the bot token)")
        return None
    if not isinstance(variable, str) or not _ENV_NAME.match(variable):
        raise ConfigError(f"{where}.{key}: expected an environment variable name, got {variable!r}")
    path = secrets_path(settings)
    file_values = load_secrets_file(path) if variable not in environ and path.exists() else {}
    return resolve_secret(variable, f"{where}.{key}", environ=environ, file_values=file_values,
                          file_path=path if path.exists() else None)


def build_phone_channel(
    kind: str, where: str, raw: Mapping[str, Any], *, name: str, at_most_once: bool, settings: Settings,
    environ: Mapping[str, str],
) -> PhoneChannel:
    timeout = _timeout(raw, where)
    if kind == "ntfy":
        server = _base_url(raw.get("server", DEFAULT_SERVER), f"{where}.server")
        topic = raw.get("topic")
        if not isinstance(topic, str) or not TOPIC.match(topic):
            raise ConfigError(f"{where}.topic: expected a topic name (letters, digits, '-' or '_', at most 64), "
                              f"got {topic!r}")
        answer_topic = raw.get("answer_topic", f"{topic}-answers")
        if not isinstance(answer_topic, str) or not TOPIC.match(answer_topic):
            raise ConfigError(f"{where}.answer_topic: expected a topic name (letters, digits, '-' or '_', at most "
                              f"64), got {answer_topic!r}")
        if answer_topic == topic:
            raise ConfigError(f"{where}.answer_topic: must differ from topic (the answers would ring the phone)")
        priority = raw.get("priority", 4)
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 5:
            raise ConfigError(f"{where}.priority: expected 1 (min) to 5 (max), got {priority!r}")
        return NtfyChannel(name=name, server=server, topic=topic, answer_topic=answer_topic,
                           token=_token(raw, where, settings, environ, required=False), priority=priority,
                           secrets_file=secrets_path(settings), timeout=timeout, at_most_once=at_most_once)
    chat_id = raw.get("chat_id")  # optional: without it the owner pairs a chat (`agent-console telegram pair`)
    if isinstance(chat_id, str) and re.fullmatch(r"-?[0-9]+", chat_id.strip()):
        chat_id = int(chat_id)
    if chat_id is not None and (isinstance(chat_id, bool) or not isinstance(chat_id, int) or chat_id == 0):
        raise ConfigError(f"{where}.chat_id: expected the owner's chat id (a number, e.g. 123456789), got {chat_id!r}")
    window = raw.get("batch_window", DEFAULT_BATCH_WINDOW)
    if isinstance(window, bool) or not isinstance(window, int | float) or not 0 <= window <= 60:
        raise ConfigError(f"{where}.batch_window: expected seconds between 0 and 60, got {window!r}")
    api_base = _base_url(raw.get("api_base", DEFAULT_API_BASE), f"{where}.api_base")
    token = _token(raw, where, settings, environ, required=True)
    assert token is not None
    webhook = _webhook_secret(raw, where, settings, environ)
    return TelegramChannel(name=name, token=token, chat_id=chat_id, api_base=api_base,
                           secrets_file=secrets_path(settings), timeout=timeout, at_most_once=at_most_once,
                           batch_window=float(window), webhook=webhook is not None)


def _webhook_secret(raw: Mapping[str, Any], where: str, settings: Settings, environ: Mapping[str, str]
                    ) -> Secret | None:
    """The webhook's secret_token when the channel takes its updates by webhook (webhook_secret_env), else None."""
    if raw.get("webhook_secret_env") is None:
        return None
    secret = _token(raw, where, settings, environ, required=True, key="webhook_secret_env")
    assert secret is not None
    if not SECRET_PATTERN.match(secret.reveal()):
        raise ConfigError(f"{where}.webhook_secret_env: the secret must be 1-256 letters, digits, '_' or '-' "
                          f"(Telegram's rule for secret_token)")
    return secret


def telegram_webhook(settings: Settings, environ: Mapping[str, str]) -> TelegramWebhook | None:
    """What the receiver needs to take a Telegram channel's updates by webhook, or None (it polls)."""
    channels = settings.channels if isinstance(settings.channels, list) else []
    for index, raw in enumerate(channels):
        if isinstance(raw, Mapping) and raw.get("type") == "telegram":
            secret = _webhook_secret(raw, f"channels[{index}]", settings, environ)
            if secret is not None:
                return TelegramWebhook(secret, channel=str(raw.get("name", "telegram")))
    return None


class NoTelegramChannel(ConfigError):
    """The config has no Telegram channel (a command about one says what to add)."""


def telegram_bot(settings: Settings, environ: Mapping[str, str]) -> tuple[str, Secret, Secret | None]:
    """The configured Telegram channel's API base, bot token and webhook secret (None: it polls), for the
    `agent-console telegram pair|webhook` commands; NoTelegramChannel when there is no telegram channel."""
    channels = settings.channels if isinstance(settings.channels, list) else []
    for index, raw in enumerate(channels):
        if isinstance(raw, Mapping) and raw.get("type") == "telegram":
            where = f"channels[{index}]"
            token = _token(raw, where, settings, environ, required=True)
            assert token is not None
            api_base = _base_url(raw.get("api_base", DEFAULT_API_BASE), f"{where}.api_base")
            return api_base, token, _webhook_secret(raw, where, settings, environ)
    raise NoTelegramChannel("channels: no [[channels]] table with type = \"telegram\"")
