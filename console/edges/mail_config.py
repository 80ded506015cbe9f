"""The [email] settings (issue 23), checked, with errors naming the setting.

    [email]
    imap_host = "imap.fastmail.com"
    imap_port = 993                     # default 993 (tls = "implicit") or 143 (tls = "starttls")
    tls = "implicit"                    # or "starttls"; certificates are always checked
    ca_file = "/etc/ssl/my-ca.pem"      # optional: a private server's CA
    user = "me@example.org"
    password_env = "EMAIL_PASSWORD"     # from the environment or the secrets file, never this file
    folder = "INBOX"
    after = "leave"                     # or "seen" (mark \\Seen) or "move" (to move_to)
    move_to = "Agent"
    since = "2026-11-01"                # optional: a bounded catch-up of older mail on the first start
    trusted_senders = ["me@example.org"]
    authserv_id = "mx.example.org"      # the authserv-id of the owner's own server's Authentication-Results
    untrusted = "run"                   # or "ignore": only the owner's authenticated mail is stored
    smtp_host = "smtp.fastmail.com"     # replies; default: no replies are sent
    smtp_port = 587                     # default 587 (smtp_tls = "starttls") or 465 ("implicit")
    from_address = "me@example.org"     # default: user
    reconnect_base = 1                  # seconds before the first reconnect, doubling up to reconnect_max (60)
    login_retry = 300                   # seconds between tries of a refused login
"""

from __future__ import annotations

import datetime as dt
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.config import ConfigError, Settings
from console.edges.answerkey import secrets_path
from console.edges.secretfile import Secret, load_secrets_file, resolve_secret

KEYS = {"imap_host", "imap_port", "tls", "ca_file", "user", "password_env", "folder", "after", "move_to", "since",
        "catch_up_max", "trusted_senders", "authserv_id", "untrusted", "smtp_host", "smtp_port", "smtp_tls",
        "smtp_user", "smtp_password_env", "from_address", "poll_seconds", "body_cap", "max_message_bytes",
        "timeout", "reconnect_base", "reconnect_max", "login_retry", "name"}
DEFAULT_PASSWORD_ENV = "AGENT_CONSOLE_EMAIL_PASSWORD"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9.\-:\[\]]{1,253}$")
_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")


@dataclass(frozen=True)
class MailSettings:
    name: str
    imap_host: str
    imap_port: int
    tls: str
    user: str
    password: Secret
    folder: str = "INBOX"
    after: str = "leave"
    move_to: str | None = None
    since: dt.date | None = None
    catch_up_max: int = 200
    trusted_senders: tuple[str, ...] = ()
    authserv_id: str | None = None
    untrusted: str = "run"
    ca_file: Path | None = None
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_tls: str = "starttls"
    smtp_user: str | None = None
    smtp_password: Secret | None = None
    from_address: str | None = None
    poll_seconds: float = 60.0
    body_cap: int = 100_000
    max_message_bytes: int = 2_000_000
    timeout: float = 30.0
    reconnect_base: float = 1.0      # seconds before the first reconnect; doubles (jittered) up to reconnect_max
    reconnect_max: float = 60.0
    login_retry: float = 300.0       # a refused login is tried again this often (one notice, not one a try)
    extra: dict[str, Any] = field(default_factory=dict)

    def tls_context(self) -> ssl.SSLContext:
        """Certificates checked, hostnames too; a private CA when ca_file is set."""
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def _text(raw: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"email.{key}: expected text, got {value!r}")
    return value.strip()


def _choice(raw: Mapping[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    value = raw.get(key, default)
    if value not in choices:
        raise ConfigError(f"email.{key}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return str(value)


def _number(raw: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConfigError(f"email.{key}: expected a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def _secret(variable: Any, key: str, settings: Settings, environ: Mapping[str, str]) -> Secret:
    if not isinstance(variable, str) or not _ENV_NAME.match(variable):
        raise ConfigError(f"email.{key}: expected an environment variable name, got {variable!r}")
    path = secrets_path(settings)
    file_values = load_secrets_file(path) if variable not in environ and path.exists() else {}
    return resolve_secret(variable, f"email.{key}", environ=environ, file_values=file_values,
                          file_path=path if path.exists() else None)


def build_mail_settings(settings: Settings, environ: Mapping[str, str] | None = None) -> MailSettings | None:
    """The checked [email] settings, or None when there is no [email] table."""
    raw = settings.email
    if not raw:
        return None
    env = os.environ if environ is None else environ
    if "password" in raw or "smtp_password" in raw:
        raise ConfigError("email.password: never in the config file; name its variable with password_env and set it "
                          "in the environment or the secrets file")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ConfigError(f"email.{unknown[0]}: unknown setting (known: {', '.join(sorted(KEYS))})")
    host = _text(raw, "imap_host")
    if host is None or not _HOST.match(host):
        raise ConfigError(f"email.imap_host: expected the IMAP server's host name, got {raw.get('imap_host')!r}")
    tls = _choice(raw, "tls", "implicit", ("implicit", "starttls"))
    port = int(_number(raw, "imap_port", 993 if tls == "implicit" else 143, 1, 65535))
    user = _text(raw, "user")
    if user is None:
        raise ConfigError("email.user: missing (the mailbox's login)")
    after = _choice(raw, "after", "leave", ("leave", "seen", "move"))
    move_to = _text(raw, "move_to")
    if after == "move" and move_to is None:
        raise ConfigError('email.move_to: after = "move" needs the folder to move stored mail to')
    since_raw = raw.get("since")
    since: dt.date | None = None
    if isinstance(since_raw, dt.date) and not isinstance(since_raw, dt.datetime):
        since = since_raw
    elif isinstance(since_raw, str):
        try:
            since = dt.date.fromisoformat(since_raw.strip())
        except ValueError:
            raise ConfigError(f"email.since: expected a date like 2026-11-01, got {since_raw!r}") from None
    elif since_raw is not None:
        raise ConfigError(f"email.since: expected a date like 2026-11-01, got {since_raw!r}")
    senders = raw.get("trusted_senders", [])
    if not isinstance(senders, list) or not all(isinstance(s, str) and _ADDRESS.match(s.strip()) for s in senders):
        raise ConfigError(f"email.trusted_senders: expected a list of e-mail addresses, got {senders!r}")
    if senders and not raw.get("authserv_id"):
        raise ConfigError("email.authserv_id: trusted_senders needs the authserv-id of your own server's "
                          "Authentication-Results header (without it no sender can be proven)")
    ca_text = _text(raw, "ca_file")
    ca_file = Path(ca_text).expanduser() if ca_text else None
    if ca_file is not None and not ca_file.is_file():
        raise ConfigError(f"email.ca_file: {ca_file} is not a file")
    smtp_host = _text(raw, "smtp_host")
    if smtp_host is not None and not _HOST.match(smtp_host):
        raise ConfigError(f"email.smtp_host: expected the SMTP server's host name, got {smtp_host!r}")
    smtp_tls = _choice(raw, "smtp_tls", "starttls", ("starttls", "implicit"))
    from_address = _text(raw, "from_address", user if "@" in user else None)
    if smtp_host is not None and (from_address is None or not _ADDRESS.match(from_address)):
        raise ConfigError("email.from_address: replies need the address they come from (user is not one)")
    password_env = raw.get("password_env", DEFAULT_PASSWORD_ENV)
    password = _secret(password_env, "password_env", settings, env)
    smtp_password = None
    if smtp_host is not None:
        smtp_env = raw.get("smtp_password_env", password_env)
        smtp_password = password if smtp_env == password_env else _secret(smtp_env, "smtp_password_env",
                                                                           settings, env)
    name = _text(raw, "name", "email") or "email"
    reconnect_base = _number(raw, "reconnect_base", 1, 0.01, 3600)
    reconnect_max = _number(raw, "reconnect_max", max(60, reconnect_base), reconnect_base, 86_400)
    return MailSettings(
        name=name, imap_host=host, imap_port=port, tls=tls, user=user, password=password,
        folder=_text(raw, "folder", "INBOX") or "INBOX", after=after, move_to=move_to, since=since,
        catch_up_max=int(_number(raw, "catch_up_max", 200, 1, 10_000)),
        trusted_senders=tuple(s.strip().lower() for s in senders), authserv_id=_text(raw, "authserv_id"),
        untrusted=_choice(raw, "untrusted", "run", ("run", "ignore")), ca_file=ca_file,
        smtp_host=smtp_host, smtp_port=int(_number(raw, "smtp_port", 587 if smtp_tls == "starttls" else 465, 1,
                                                   65535)),
        smtp_tls=smtp_tls, smtp_user=_text(raw, "smtp_user", user), smtp_password=smtp_password,
        from_address=from_address, poll_seconds=_number(raw, "poll_seconds", 60, 0.1, 3600),
        body_cap=int(_number(raw, "body_cap", 100_000, 1000, 500_000)),
        max_message_bytes=int(_number(raw, "max_message_bytes", 2_000_000, 10_000, 50_000_000)),
        timeout=_number(raw, "timeout", 30, 1, 600),
        reconnect_base=reconnect_base, reconnect_max=reconnect_max,
        login_retry=_number(raw, "login_retry", 300, 1, 86_400),
    )
