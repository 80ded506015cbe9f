"""The [webhooks] settings: their shape, their defaults, and errors that name the setting at fault.

    [webhooks]
    enabled = false                 # true: `agent-console run` starts the receiver next to the engine
    host = "127.0.0.1"              # loopback unless you put a proxy in front
    port = 8765
    max_body_bytes = 1048576        # larger bodies get 413 before any signature work
    secrets_file = "~/.config/agent-console/secrets.env"   # optional, KEY=VALUE, mode 0600

    [webhooks.sources.github]       # POST /hooks/github
    verifier = "github"             # github | stripe | standard | slack | hmac
    secret_env = "GITHUB_WEBHOOK_SECRET"
    tolerance = 300                 # seconds, for stripe / standard / slack timestamps
    header = "X-Signature"          # hmac only: the signature header
    id_header = "X-Delivery-Id"     # hmac only: the header holding the delivery's unique id
    replay_window = 604800          # github / hmac: seconds a byte-identical body is refused (0: off)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.config import DEFAULT_WEBHOOK_MAX_CONNECTIONS, DEFAULT_WEBHOOK_READ_TIMEOUT, ConfigError
from console.edges.secretfile import Secret, load_secrets_file, resolve_secret
from console.edges.verifiers import DEFAULT_TOLERANCE, VERIFIERS, HmacVerifier, Verifier

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_BODY = 1024 * 1024
# Sources the console itself writes: a webhook under one of these names could forge a timer firing
# or answer an approval, so they are refused as webhook source names.
RESERVED_SOURCES = ("approval", "chat", "email", "telegram", "timer")

_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_KEYS = {"enabled", "host", "port", "max_body_bytes", "secrets_file", "sources"}
_SOURCE_KEYS = {"verifier", "secret_env", "tolerance", "header", "id_header", "replay_window"}
# A week: GitHub lets its user redeliver a delivery for three days (under its own id, which the inbox
# refuses anyway); the window bounds the ledger, not the redeliveries.
DEFAULT_REPLAY_WINDOW = 7 * 86_400
MAX_REPLAY_WINDOW = 366 * 86_400


@dataclass(frozen=True)
class SourceConfig:
    name: str
    verifier: str
    secret_env: str
    tolerance: int = DEFAULT_TOLERANCE
    header: str = "X-Signature"
    id_header: str = "X-Delivery-Id"
    replay_window: int = 0  # seconds; only for verifiers whose signature covers the body alone


@dataclass(frozen=True)
class WebhookConfig:
    enabled: bool = False
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_body_bytes: int = DEFAULT_MAX_BODY
    secrets_file: Path | None = None
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    # The top-level settings webhook_read_timeout and webhook_max_connections (so that, like every
    # top-level setting, they take an AGENT_CONSOLE_<SETTING> override).
    read_timeout: int = DEFAULT_WEBHOOK_READ_TIMEOUT
    max_connections: int = DEFAULT_WEBHOOK_MAX_CONNECTIONS


def _unknown(keys: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise ConfigError(f"{where}.{extra[0]}: unknown setting (expected one of {', '.join(sorted(allowed))})")


def _integer(value: Any, setting: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{setting}: expected a whole number from {low} to {high}, got {value!r}")
    return value


def _text(value: Any, setting: str, pattern: re.Pattern[str] | None = None, what: str = "text") -> str:
    if not isinstance(value, str) or not value.strip() or (pattern is not None and not pattern.match(value)):
        raise ConfigError(f"{setting}: expected {what}, got {value!r}")
    return value


def parse_source(name: str, raw: Any) -> SourceConfig:
    where = f"webhooks.sources.{name}"
    if not _SOURCE_NAME.match(name):
        raise ConfigError(f"{where}: a source name is lower-case letters, digits, '.', '_' or '-' (it is in the URL)")
    if name in RESERVED_SOURCES:
        raise ConfigError(f"{where}: '{name}' is used by the console itself; pick another source name")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a table with verifier and secret_env")
    _unknown(raw, _SOURCE_KEYS, where)
    verifier = raw.get("verifier")
    if verifier not in VERIFIERS:
        raise ConfigError(f"{where}.verifier: expected one of {' | '.join(VERIFIERS)}, got {verifier!r}")
    if "secret_env" not in raw:
        raise ConfigError(f"{where}.secret_env: missing (the name of the variable holding the secret)")
    secret_env = _text(raw["secret_env"], f"{where}.secret_env", _ENV_NAME, "an environment variable name")
    tolerance = _integer(raw.get("tolerance", DEFAULT_TOLERANCE), f"{where}.tolerance", 1, 24 * 3600)
    if verifier != "hmac" and ("header" in raw or "id_header" in raw):
        raise ConfigError(f"{where}: header and id_header apply to the hmac verifier only")
    header = _text(raw.get("header", "X-Signature"), f"{where}.header", _HEADER_NAME, "an HTTP header name")
    id_header = _text(raw.get("id_header", "X-Delivery-Id"), f"{where}.id_header", _HEADER_NAME,
                      "an HTTP header name")
    body_only = VERIFIERS[str(verifier)].body_only
    if "replay_window" in raw and not body_only:
        raise ConfigError(
            f"{where}.replay_window: applies to the github and hmac verifiers only (the others sign a "
            "timestamp, which refuses an old body, and an id, which the inbox refuses twice)"
        )
    replay_window = _integer(raw.get("replay_window", DEFAULT_REPLAY_WINDOW if body_only else 0),
                             f"{where}.replay_window", 0, MAX_REPLAY_WINDOW)
    return SourceConfig(name, str(verifier), secret_env, tolerance, header, id_header, replay_window)


def parse_webhooks(raw: Mapping[str, Any] | None) -> WebhookConfig:
    """Check the [webhooks] table; every error names the setting."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ConfigError("webhooks: expected a table")
    _unknown(raw, _TOP_KEYS, "webhooks")
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError(f"webhooks.enabled: expected true or false, got {enabled!r}")
    host = _text(raw.get("host", DEFAULT_HOST), "webhooks.host", what="a host name or address")
    port = _integer(raw.get("port", DEFAULT_PORT), "webhooks.port", 0, 65535)
    max_body = _integer(raw.get("max_body_bytes", DEFAULT_MAX_BODY), "webhooks.max_body_bytes", 1, 64 * 1024 * 1024)
    secrets_file = raw.get("secrets_file")
    if secrets_file is not None:
        secrets_file = Path(_text(secrets_file, "webhooks.secrets_file", what="a file path")).expanduser()
    sources_raw = raw.get("sources", {})
    if not isinstance(sources_raw, Mapping):
        raise ConfigError("webhooks.sources: expected tables such as [webhooks.sources.github]")
    sources = {name: parse_source(str(name), value) for name, value in sources_raw.items()}
    return WebhookConfig(enabled, host, port, max_body, secrets_file, sources)


def build_verifier(source: SourceConfig, secret: Secret) -> Verifier:
    cls = VERIFIERS[source.verifier]
    try:
        if cls is HmacVerifier:
            return HmacVerifier(secret, tolerance=source.tolerance, header=source.header, id_header=source.id_header,
                                replay_window=source.replay_window)
        return cls(secret, tolerance=source.tolerance, replay_window=source.replay_window)
    except ValueError as exc:  # the message describes the format, never the value
        raise ConfigError(f"webhooks.sources.{source.name}.secret_env: {source.secret_env}: {exc}") from None


def build_verifiers(config: WebhookConfig, environ: Mapping[str, str] | None = None) -> dict[str, Verifier]:
    """One verifier per source, with its secret from the environment or the secrets file."""
    env = os.environ if environ is None else environ
    file_values = load_secrets_file(config.secrets_file) if config.secrets_file else {}
    verifiers = {}
    for name, source in config.sources.items():
        secret = resolve_secret(
            source.secret_env, f"webhooks.sources.{name}.secret_env",
            environ=env, file_values=file_values, file_path=config.secrets_file,
        )
        verifiers[name] = build_verifier(source, secret)
    return verifiers
