"""The inbox's answer key: what makes a Yes / No button's answer this inbox's own.

Each answer a phone sends back carries a MAC over the channel kind, the inbox's tag, the request id and the
answer word, made with a key only this inbox knows. The key is generated on first use and kept in the
secrets file (created owner-only, 0600), under a name that holds the inbox's tag, so several inboxes can share
one file; it never enters the inbox, a log line or a message. A forged button, a button of another request
or of another inbox does not verify.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
from pathlib import Path

import platformdirs

from console.config import APP_NAME, Settings
from console.edges.config import parse_webhooks
from console.edges.secretfile import Secret, check_private, load_secrets_file

KEY_PREFIX = "AGENT_CONSOLE_ANSWER_KEY_"


def secrets_path(settings: Settings) -> Path:
    """The secrets file: webhooks.secrets_file when set, else secrets.env in the user's config folder."""
    configured = parse_webhooks(settings.webhooks).secrets_file
    return configured if configured is not None else Path(platformdirs.user_config_dir(APP_NAME)) / "secrets.env"


def key_name(tag: str) -> str:
    return KEY_PREFIX + tag.upper()


def answer_key(path: Path, tag: str) -> Secret:
    """This inbox's answer key from the secrets file, generated and appended on first use.

    The file is locked while it is read and extended, so two processes starting at once agree on one key.
    A file that group or others may read is refused (ConfigError), as for the webhook secrets."""
    name = key_name(tag)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        check_private(path)
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    else:
        with contextlib.suppress(OSError):  # whatever the umask
            os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "r+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            found = load_secrets_file(path).get(name)
            if found is not None and found.reveal().strip():
                return found
            value = secrets.token_hex(32)
            handle.seek(0, os.SEEK_END)
            tail = b""
            if handle.tell():
                handle.seek(-1, os.SEEK_END)
                tail = handle.read(1)
            line = f"{name}={value}\n".encode()
            handle.write(line if tail in (b"", b"\n") else b"\n" + line)
            handle.flush()
            os.fsync(handle.fileno())
            return Secret(value)
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def answer_mac(key: Secret, kind: str, tag: str, request_id: str, answer: str, size: int) -> str:
    """The first `size` bytes of HMAC-SHA256 over what an answer says, URL-safe base64 without padding."""
    message = "\n".join(("agent-console answer", kind, tag, request_id, answer)).encode("utf-8")
    digest = hmac.new(key.reveal().encode("utf-8"), message, hashlib.sha256).digest()[:size]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def mac_matches(key: Secret, kind: str, tag: str, request_id: str, answer: str, size: int, given: str) -> bool:
    return hmac.compare_digest(answer_mac(key, kind, tag, request_id, answer, size).encode(),
                               given.encode("utf-8", "replace"))
