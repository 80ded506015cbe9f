"""Outbox channels: where a batch of the agent's messages goes.

A channel has a `name`, an `at_most_once` flag and `send(batch)`, which returns when the batch is
delivered and raises SendError(msg, permanent=...) when it is not. Every send of one batch carries
the same `batch.key`, so the far end can drop a retry it has already taken. The channels here block
(the engine's dispatcher runs them on its sender thread); the phone channels' send is a coroutine,
awaited on the engine's loop. The dispatcher (console/runtime/dispatcher.py) sends, and the Store
records each channel's outcome, so one failing channel never makes the others send twice.

    [[channels]]
    type = "file"            # console | file | http | apprise
    name = "log"             # optional; defaults to the type, must be unique
    path = "~/agent-outbox.jsonl"
    at_most_once = false     # default: at-least-once, retried under the same key

    [[channels]]
    type = "http"
    url = "http://127.0.0.1:9000/notify"
    timeout = 10

    [[channels]]
    type = "apprise"
    urls = ["ntfy://my-topic", "mailto://..."]

The phone channels, ntfy and telegram, send approval requests as cards with Yes / No buttons and take the
answers back (console/edges/phone.py, ntfy.py, telegram.py).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from console import telemetry
from console.clock import Clock, WallClock
from console.config import ConfigError, Settings
from console.core import Batch, SendError
from console.core.outbox import OutboxChannel

if TYPE_CHECKING:
    import urllib.request

    import apprise

# The settings each phone channel takes (console/edges/phone_config.py checks them). The phone channels' modules
# and urllib.request (with http.client and the email package) are imported when such a channel is configured:
# the console's first frame builds its engine, and so its channels, and usually needs none of them.
PHONE_KEYS = {
    "ntfy": {"server", "topic", "answer_topic", "token_env", "priority", "timeout"},
    "telegram": {"token_env", "chat_id", "api_base", "timeout", "batch_window", "webhook_secret_env"},
}

DEFAULT_HTTP_TIMEOUT = 10.0
# Statuses that say "not now" rather than "never": retried like a 5xx.
RETRYABLE_4XX = frozenset({408, 425, 429})
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


# One protocol for every channel, defined beside the outbox that drives it.
Channel = OutboxChannel


class ConsoleChannel:
    """Always on. Delivery is the database's record of the send, which the console's outbox pane shows."""

    def __init__(self, name: str = "console") -> None:
        self.name = name
        self.at_most_once = False

    def send(self, batch: Batch) -> None:
        return None


class FileChannel:
    """JSON lines, one per batch: {"key", "bodies", "urgent", "sent_at"}; appended and fsynced.

    A retried key is not appended again: the keys already in the file are indexed once, and only
    the part of the file written since (by this or another process) is read on later sends. A line
    torn by a crash mid-write is sealed off with a newline and then ignored as not JSON.
    """

    def __init__(self, path: str | os.PathLike[str], *, name: str = "file", at_most_once: bool = False,
                 clock: Clock | None = None) -> None:
        self.name = name
        self.at_most_once = at_most_once
        self.path = Path(path).expanduser()
        self._clock = clock or WallClock()
        self._keys: set[str] = set()
        self._indexed = 0           # bytes of the file whose complete lines are in _keys
        self._identity: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def has_sent(self, key: str) -> bool:
        with self._lock, self._locked_file() as handle:
            self._catch_up(handle)
            return key in self._keys

    def send(self, batch: Batch) -> None:
        with self._lock:
            try:
                self._append_once(batch)
            except OSError as exc:
                raise SendError(f"cannot write {self.path}: {exc.strerror or exc}", permanent=False) from exc

    def _append_once(self, batch: Batch) -> None:
        created = not self.path.exists()
        with self._locked_file() as handle:
            self._catch_up(handle)
            if batch.key in self._keys:
                return
            end = handle.seek(0, os.SEEK_END)
            line = json.dumps(
                {"key": batch.key, "bodies": batch.bodies, "urgent": batch.urgent, "sent_at": self._clock.now()},
                ensure_ascii=False,
            ).encode("utf-8") + b"\n"
            if end > self._indexed:  # a torn line from a crash: seal it off so our line stands alone
                line = b"\n" + line
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
            self._indexed = end + len(line)
            self._keys.add(batch.key)
        if created:
            _fsync_folder(self.path.parent)

    @contextlib.contextmanager
    def _locked_file(self) -> Iterator[BinaryIO]:
        """The file opened for append and read, locked against other processes' channels."""
        with os.fdopen(_open_owner_only(self.path), "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield handle
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _catch_up(self, handle: BinaryIO) -> None:
        info = os.fstat(handle.fileno())
        identity = (info.st_dev, info.st_ino)
        if identity != self._identity or info.st_size < self._indexed:  # replaced or truncated: start over
            self._identity, self._keys, self._indexed = identity, set(), 0
        if info.st_size == self._indexed:
            return
        handle.seek(self._indexed)
        tail = handle.read(info.st_size - self._indexed)
        complete = tail.rfind(b"\n") + 1
        for raw in tail[:complete].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                self._keys.add(record["key"])
        self._indexed += complete


def _open_owner_only(path: Path) -> int:
    """The file for append and read; created owner-only (0600, whatever the umask): it holds the
    agent's messages. An existing file keeps the mode its owner gave it."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(path, flags)
    with contextlib.suppress(OSError):  # a file system without modes (a FAT stick) keeps the file as it can
        os.fchmod(descriptor, 0o600)
    return descriptor


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _opener_without_redirects() -> urllib.request.OpenerDirector:
    """An opener that reports a redirect instead of following it: it would turn the POST into a GET without its
    body."""
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirects())


def safe_url(url: str) -> str:
    """scheme://host[:port]/path, without credentials or a query that may hold a token."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class HttpChannel:
    """POST {"key", "messages": [...], "urgent"} as JSON with an Idempotency-Key header (the batch key).

    2xx is delivered; timeouts, connection errors, 5xx, 408, 425 and 429 are retried; any other 4xx
    (and a 3xx: redirects are not followed) fails the batch for good.

    It reaches others: whoever runs the endpoint reads what it gets, so owner-only messages never go to it.
    """

    reaches_others = True

    def __init__(self, url: str, *, name: str = "http", at_most_once: bool = False,
                 timeout: float = DEFAULT_HTTP_TIMEOUT) -> None:
        self.name = name
        self.at_most_once = at_most_once
        self.timeout = timeout
        self._opener = _opener_without_redirects()
        self._headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "agent-console"}
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:  # user:password@ in the URL becomes HTTP basic auth
            login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
            netloc = parts.netloc.rpartition("@")[2]
            url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        self.url = url

    def send(self, batch: Batch) -> None:
        import urllib.error
        import urllib.request

        data = json.dumps({"key": batch.key, "messages": batch.bodies, "urgent": batch.urgent},
                          ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(self.url, data=data, method="POST",
                                         headers=telemetry.inject({**self._headers, "Idempotency-Key": batch.key}))
        where = safe_url(self.url)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read(64 * 1024)
        except urllib.error.HTTPError as exc:
            status, reason = exc.code, exc.reason
            exc.close()
            permanent = status < 500 and status not in RETRYABLE_4XX
            raise SendError(f"{where} answered {status} {reason}", permanent=permanent) from None
        except (urllib.error.URLError, OSError) as exc:
            cause: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise SendError(f"{where} could not be reached: {cause}", permanent=False) from None


class AppriseChannel:
    """Any service apprise speaks (ntfy, Slack, mail, json://...), one apprise URL each.

    Apprise carries no idempotency key, so the channel remembers, for recent batch keys, which URLs
    already took the batch and retries only the others. That memory lives in this process: after a
    restart a retried batch goes to every URL again (at-least-once).

    It reaches others (a Slack channel, a mail list, a service that unfurls links): owner-only messages never go
    to it.
    """

    REMEMBERED_KEYS = 256
    reaches_others = True

    def __init__(self, urls: Sequence[str], *, name: str = "apprise", at_most_once: bool = False,
                 title: str = "agent-console") -> None:
        if not urls:
            raise ValueError("an apprise channel needs at least one URL")
        import apprise  # about 80 ms to import: loaded only when an apprise channel is configured

        self.name = name
        self.at_most_once = at_most_once
        self.title = title
        self._targets: list[apprise.Apprise] = []
        for index, url in enumerate(urls):
            target = apprise.Apprise()
            if not target.add(url):
                raise ValueError(f"urls[{index}]: apprise does not recognise this URL (scheme "
                                 f"{urllib.parse.urlsplit(url).scheme or 'missing'!r})")
            self._targets.append(target)
        self._delivered: OrderedDict[str, set[int]] = OrderedDict()

    def send(self, batch: Batch) -> None:
        done = self._delivered.setdefault(batch.key, set())
        self._delivered.move_to_end(batch.key)
        while len(self._delivered) > self.REMEMBERED_KEYS:
            self._delivered.popitem(last=False)
        import apprise

        failed = []
        for index, target in enumerate(self._targets):
            if index in done:
                continue
            kind = apprise.NotifyType.WARNING if batch.urgent else apprise.NotifyType.INFO
            if target.notify(body=batch.text, title=self.title, notify_type=kind):
                done.add(index)
            else:
                failed.append(index)
        if failed:
            raise SendError(f"apprise could not deliver to {len(failed)} of {len(self._targets)} URL(s) "
                            f"(urls[{', '.join(map(str, failed))}])", permanent=False)
        self._delivered.pop(batch.key, None)


# --- configuration ----------------------------------------------------------------------------
_COMMON_KEYS = {"type", "name", "at_most_once"}
_TYPE_KEYS = {"console": set(), "file": {"path"}, "http": {"url", "timeout"}, "apprise": {"urls", "title"},
              **PHONE_KEYS}


def _channel(index: int, raw: Any, clock: Clock, settings: Settings, environ: Mapping[str, str]) -> Channel:
    where = f"channels[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a [[channels]] table with a type")
    kind = raw.get("type")
    if kind not in _TYPE_KEYS:
        raise ConfigError(f"{where}.type: expected one of {' | '.join(_TYPE_KEYS)}, got {kind!r}")
    extra = sorted(set(raw) - _COMMON_KEYS - _TYPE_KEYS[kind])
    if extra:
        raise ConfigError(f"{where}.{extra[0]}: unknown setting for a {kind} channel")
    name = raw.get("name", kind)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}.name: lower-case letters, digits, '.', '_' or '-', got {name!r}")
    at_most_once = raw.get("at_most_once", False)
    if not isinstance(at_most_once, bool):
        raise ConfigError(f"{where}.at_most_once: expected true or false, got {at_most_once!r}")
    if kind == "console":
        return ConsoleChannel(name)
    if kind in PHONE_KEYS:
        from console.edges.phone_config import build_phone_channel

        return build_phone_channel(str(kind), where, raw, name=name, at_most_once=at_most_once, settings=settings,
                                   environ=environ)
    if kind == "file":
        path = raw.get("path")
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{where}.path: expected the path of the JSON-lines file")
        target = Path(path).expanduser()
        if not target.parent.is_dir():
            raise ConfigError(f"{where}.path: the folder {target.parent} does not exist")
        if target.is_dir():
            raise ConfigError(f"{where}.path: {target} is a folder, not a file")
        return FileChannel(target, name=name, at_most_once=at_most_once, clock=clock)
    if kind == "http":
        url = raw.get("url")
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}.url: expected an http:// or https:// URL")
        timeout = raw.get("timeout", DEFAULT_HTTP_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise ConfigError(f"{where}.timeout: expected seconds between 0 and 600, got {timeout!r}")
        assert isinstance(url, str)
        return HttpChannel(url, name=name, at_most_once=at_most_once, timeout=float(timeout))
    urls = raw.get("urls")
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u.strip() for u in urls):
        raise ConfigError(f'{where}.urls: expected a list of apprise URLs, e.g. urls = ["ntfy://my-topic"]')
    title = raw.get("title", "agent-console")
    if not isinstance(title, str):
        raise ConfigError(f"{where}.title: expected text, got {title!r}")
    try:
        return AppriseChannel(urls, name=name, at_most_once=at_most_once, title=title)
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None


def build_channels(
    settings: Settings, *, clock: Clock | None = None, environ: Mapping[str, str] | None = None
) -> list[Channel]:
    """The console channel (always on) and the [[channels]] of the settings, checked. Tokens are read from
    environ (the process's environment by default) or the secrets file."""
    raw = settings.channels
    if not isinstance(raw, list):
        raise ConfigError("channels: expected [[channels]] tables")
    clock = clock or WallClock()
    env = os.environ if environ is None else environ
    channels: list[Channel] = [_channel(index, item, clock, settings, env) for index, item in enumerate(raw)]
    seen: dict[str, int] = {}
    for index, channel in enumerate(channels):
        if channel.name in seen:
            first = seen[channel.name]
            raise ConfigError(f"channels[{index}].name: {channel.name!r} is already the name of channels[{first}]; "
                              "give each channel its own name")
        seen[channel.name] = index
    if not any(isinstance(channel, ConsoleChannel) for channel in channels):
        if "console" in seen:
            raise ConfigError(f"channels[{seen['console']}].name: 'console' is the name of the always-on console "
                              "channel; pick another")
        channels.insert(0, ConsoleChannel())
    if settings.email:  # the mailbox source answers mail it read (its imapclient loaded only when it is wanted)
        from console.edges.mail_config import build_mail_settings
        from console.edges.mailsource import MailChannel

        mail = build_mail_settings(settings, env)
        if mail is not None:
            if mail.name in seen:
                raise ConfigError(f"email.name: {mail.name!r} is already the name of channels[{seen[mail.name]}]")
            channels.append(MailChannel(mail))
    return channels
