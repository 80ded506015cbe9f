"""A mailbox as a source, read exactly once, and replies that thread (issue 23).

The engine that holds the lease keeps one IMAP connection (imapclient, on a thread of its own: the library is
blocking) in IDLE, or polls where the server lacks IDLE, and reconnects with backoff. Each new message is stored
as an event (source `email`, source id `<UIDVALIDITY>:<UID>`) in the transaction that moves the stored cursor past
it (console/core/mail.py): a crash between reading and committing repeats nothing, one after the commit loses
nothing. Only then is the message marked \\Seen or moved (the setting); a crash between the two leaves it as it
was, and it is never read again. A UIDVALIDITY change (the folder recreated) takes only mail that arrived after
the newest stored; a first start takes only new mail, or a bounded catch-up from `since`.

A run whose batch holds an e-mail answers it (the outbox's reply_to, as for chat sources): send() sends the run's
message to the sender over SMTP as a reply (Re: subject, In-Reply-To, References), under a Message-ID made from
the outbox row's id, so a retried send is the same message. Mail a machine sent (Auto-Submitted, Precedence,
List-Id, mailer-daemon / no-reply senders) is never answered; replies say Auto-Submitted: auto-replied.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.policy
import email.utils
import logging
import os
import random
import select
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

from console.core import Batch, SendError, StaleGeneration
from console.core.mail import SOURCE, MailCursor
from console.edges.mail_config import MailSettings
from console.edges.mailmsg import read_message
from console.edges.phone import ListenerFence, PhoneHost

if TYPE_CHECKING:  # imapclient is imported when the source connects (the console's start does not load it)
    import imapclient

log = logging.getLogger("agent_console.email")

CHUNK = 50                  # messages stored per transaction
FETCH_BYTES = 8_000_000     # bytes of raw mail fetched (and held) at a time
IDLE_RENEW = 25 * 60        # seconds an IDLE is kept before it is renewed (servers drop it after 30 minutes)
IDLE_TICK = 1.0             # seconds between looks at whether the engine is stopping, while in IDLE
NEW_MAIL_NEWS = (b"EXISTS", b"RECENT")  # what a server says, untagged, when mail arrives in the selected folder


class MailLoginRefused(Exception):
    """The server refused the user and password."""


class MailChannel:
    """The [email] source's listener and its replies' outbox channel."""

    def __init__(self, settings: MailSettings) -> None:
        self.settings = settings
        self.name = settings.name
        self.at_most_once = False
        self.reconnect_base = settings.reconnect_base
        self.reconnect_max = settings.reconnect_max
        self.login_retry = settings.login_retry
        self._reached = False  # the session logged in and selected the folder: its failure restarts the backoff
        self._host: PhoneHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tag = ""
        self._health: tuple[str, str | None] | None = None
        self._stop = threading.Event()
        self.fence = ListenerFence(self.name)

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self, host: PhoneHost) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        self._host = host
        self._loop = asyncio.get_running_loop()
        self._stop.clear()
        self._tag = await host.read(lambda store: store.inbox_tag())
        return [(f"{self.name}-imap", self._listen_forever())]

    async def stop(self) -> None:
        self._stop.set()
        self._loop = None

    @property
    def host(self) -> PhoneHost:
        if self._host is None:
            raise SendError(f"{self.name}: the source has not been started by an engine", permanent=False)
        return self._host

    def _should_stop(self) -> bool:
        host = self._host
        return (self._stop.is_set() or host is None or host.stopping or host.mode != "active"
                or self.fence.lost(host))

    async def _health_is(self, state: str, reason: str | None) -> None:
        if self._health == (state, reason):
            return
        now = self.host.clock.now()
        try:
            changed = await self.fence.write(self.host, lambda s, holder, gen: s.set_chat_health(
                SOURCE, state, reason, now=now, holder=holder, gen=gen))
        except StaleGeneration:  # the engine lost the lease: its listener's word is not the source's health
            return
        self._health = (state, reason)  # as recorded
        if changed and state != "ok":  # said once, when the state changes (note_error logs it)
            self.host.note_error(f"{self.name}: {reason}")

    # --- the listener ---------------------------------------------------------------------------
    async def _listen_forever(self) -> None:
        host = self.host
        wake = host.wake_event()
        failures = 0
        while not host.stopping and not self._stop.is_set():
            if host.mode != "active" or self.fence.lost(host):  # only the lease holder reads the mailbox
                await host.sleep(wake, 1.0)
                continue
            self._reached = False
            try:
                await asyncio.to_thread(self._session)
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except StaleGeneration as exc:  # the lease went mid-read: nothing stored, no message marked or moved
                log.info("%s: stopped reading the mailbox: %s", self.name, exc)
                continue
            except MailLoginRefused as exc:
                await self._health_is("paused", f"the server refused the login of {self.settings.user} ({exc}); "
                                                "fix the user or password, then restart")
                delay = self.login_retry
            except Exception as exc:  # a network or server failure: reconnect after a backoff
                # Counted from the last session that reached the folder: an IDLE session never ends cleanly, so
                # counting every failure of the listener's life made each server restart wait longer than the one
                # before (the next message not stored within 45 s of a restart, status saying ok).
                failures = 1 if self._reached else failures + 1
                delay = min(self.reconnect_max, self.reconnect_base * 2 ** (failures - 1)) * random.uniform(0.5, 1)
                await self._health_is("offline", f"{_describe(exc)}; reconnecting")
                log.info("%s: %s; reconnecting in %.1f s", self.name, _describe(exc), delay)
            await self._wait_out(wake, delay)

    async def _wait_out(self, wake: asyncio.Event, seconds: float) -> None:
        """Wait the whole delay before the next connection, unless the engine stops or this listener should stop
        reading. The host's sleep ends at any commit to the inbox and at its idle cap (a third of the lease's time to
        live): a delay slept once was cut to a fraction, and a refused password was tried again every few seconds
        (4 failed logins in 15 s seen by an outside check) instead of once per login_retry."""
        host = self.host
        until = time.monotonic() + seconds
        while not host.stopping and not self._stop.is_set() and host.mode == "active" and not self.fence.lost(host):
            left = until - time.monotonic()
            if left <= 0:
                return
            await host.sleep(wake, left)

    def _call(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run a coroutine of the host's on the engine's loop, from the IMAP thread, and wait for it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ConnectionAbortedError("the engine stopped")
        return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=120)

    def _connect(self) -> imapclient.IMAPClient:
        import imapclient
        from imapclient.exceptions import LoginError

        s = self.settings
        context = s.tls_context()
        client = imapclient.IMAPClient(s.imap_host, port=s.imap_port, ssl=s.tls == "implicit", ssl_context=context,
                                       timeout=s.timeout)
        try:
            if s.tls == "starttls":
                client.starttls(context)
            try:
                client.login(s.user, s.password.reveal())
            except LoginError as exc:
                raise MailLoginRefused(_server_words(exc)) from None
            return client
        except BaseException:
            _close(client)
            raise

    def _session(self) -> None:
        """One connection: log in, select the folder, store what is new, then wait in IDLE (or poll) for more,
        until the engine stops or loses the lease, or the connection fails (raised)."""
        client = self._connect()
        try:
            selected = client.select_folder(self.settings.folder)
            self._reached = True
            self._call(lambda: self._health_is("ok", None))
            idle = client.has_capability("IDLE")
            self._take_new(client, selected)
            while not self._should_stop():
                if idle:
                    self._idle(client)
                else:
                    deadline = time.monotonic() + self.settings.poll_seconds
                    while not self._should_stop() and time.monotonic() < deadline:
                        self._stop.wait(min(IDLE_TICK, self.settings.poll_seconds))
                    client.noop()
                if self._should_stop():
                    break
                self._take_new(client, client.folder_status(self.settings.folder, ["UIDVALIDITY", "UIDNEXT"]))
        finally:
            _close(client)

    def _idle(self, client: imapclient.IMAPClient) -> None:
        """Wait in IDLE until the server says something changed, the engine stops, or it is time to renew."""
        client.idle()
        try:
            if _told_before_idling(client):
                return  # mail came while the source stored or looked: take it now
            deadline = time.monotonic() + IDLE_RENEW
            while not self._should_stop() and time.monotonic() < deadline:
                responses = client.idle_check(timeout=IDLE_TICK)
                if not responses and _closed_by_server(client):
                    raise ConnectionResetError("the server closed the connection")
                if any(isinstance(r, tuple) and len(r) > 1 and r[1] in NEW_MAIL_NEWS for r in responses):
                    break
                if any(isinstance(r, tuple) and r and r[0] == b"BYE" for r in responses):
                    raise ConnectionResetError("the server said BYE")
        finally:
            from imapclient.exceptions import IMAPClientError

            try:
                client.idle_done()
            except (OSError, IMAPClientError):
                if not self._should_stop():
                    raise

    # --- what is new ----------------------------------------------------------------------------
    def _take_new(self, client: imapclient.IMAPClient, selected: dict[bytes, Any]) -> None:
        s = self.settings
        uidvalidity = int(selected[b"UIDVALIDITY"])
        uidnext = int(selected.get(b"UIDNEXT") or 0)
        cursor: MailCursor | None = self._call(lambda: self.host.read(lambda st: st.mail_cursor(self.name)))
        now = self.host.clock.now()
        if cursor is None:
            if s.since is None:  # a first start takes only what arrives from now on
                last = uidnext - 1 if uidnext else max(client.search(["ALL"]) or [0])
                # Its date is a second before now: arrival times count whole seconds, and mail that arrives in
                # the second of the first start must not pass for old if the folder is recreated before more.
                self._commit(client, MailCursor(uidvalidity, max(0, last), now - 1), [])
                log.info("%s: first start on %s: mail from UID %s on is read", self.name, s.folder, last + 1)
                return
            uids = sorted(client.search(["SINCE", s.since]))[-s.catch_up_max:]
            self._fetch_and_store(client, uidvalidity, uids, after_date=0)
            if not uids:
                self._commit(client, MailCursor(uidvalidity, max(0, uidnext - 1), 0), [])
            return
        if cursor.uidvalidity != uidvalidity:
            # The folder was recreated: its UIDs are new names for old mail. Only mail that arrived after the
            # newest stored is taken (bounded), so nothing is read twice.
            # SEARCH SINCE counts whole days in the server's zone: a day earlier, and the arrival time decides.
            stored_day = dt.datetime.fromtimestamp(cursor.date, dt.UTC).date() if cursor.date else dt.date.today()
            since_day = stored_day - dt.timedelta(days=1)
            uids = sorted(client.search(["SINCE", since_day]))[-s.catch_up_max:]
            log.warning("%s: %s's UIDVALIDITY changed (%s -> %s): only mail newer than the last stored is read",
                        self.name, s.folder, cursor.uidvalidity, uidvalidity)
            self._fetch_and_store(client, uidvalidity, uids, after_date=cursor.date)
            if self._last_cursor is None or self._last_cursor.uidvalidity != uidvalidity:
                self._commit(client, MailCursor(uidvalidity, max(0, uidnext - 1), cursor.date), [])
            return
        # No shortcut on UIDNEXT: Dovecot's STATUS of the selected folder can answer from before a message that
        # has just landed (one too low); the search is asked instead.
        uids = sorted(uid for uid in client.search(["UID", f"{cursor.uid + 1}:*"]) if uid > cursor.uid)
        self._fetch_and_store(client, uidvalidity, uids, after_date=0)

    _last_cursor: MailCursor | None = None

    def _fetch_and_store(self, client: imapclient.IMAPClient, uidvalidity: int, uids: list[int], *,
                         after_date: int) -> None:
        """Store these messages, a chunk a transaction. Each chunk's bodies are fetched in groups of at most
        FETCH_BYTES and read into payloads at once, so at most that much raw mail is held at a time."""
        s = self.settings
        self._last_cursor = None
        for start in range(0, len(uids), CHUNK):
            chunk = uids[start:start + CHUNK]
            sizes = client.fetch(chunk, ["RFC822.SIZE", "INTERNALDATE"])
            fresh = [uid for uid in chunk if uid in sizes
                     and not (after_date and _epoch(sizes[uid].get(b"INTERNALDATE")) <= after_date)]
            payloads: dict[int, dict[str, Any]] = {}
            for group in _groups(fresh, {uid: min(s.max_message_bytes, _size(sizes[uid])) for uid in fresh}):
                whole = [uid for uid in group if _size(sizes[uid]) <= s.max_message_bytes]
                if whole:
                    for uid, data in client.fetch(whole, ["BODY.PEEK[]"]).items():
                        payloads[uid] = self._read(bytes(data.get(b"BODY[]") or b""))
                for uid in (uid for uid in group if uid not in whole):  # huge: only its first part is fetched
                    for got, data in client.fetch([uid], [f"BODY.PEEK[]<0.{s.max_message_bytes}>"]).items():
                        part = self._read(bytes(next((v for k, v in data.items() if k.startswith(b"BODY[]")),
                                                     b"") or b""))
                        part.setdefault("notes", []).append(f"the message is {_size(sizes[got]):,} bytes: only "
                                                            f"its first {s.max_message_bytes:,} were read")
                        payloads[got] = part
            events: list[tuple[str, Any]] = []
            stored_uids: list[int] = []
            newest = 0
            for uid in fresh:
                payload = payloads.get(uid)
                if payload is None:
                    continue  # expunged meanwhile
                newest = max(newest, _epoch(sizes[uid].get(b"INTERNALDATE")))
                payload.update({"uid": uid, "uidvalidity": uidvalidity, "folder": s.folder, "size": _size(sizes[uid])})
                if not payload["trusted"] and s.untrusted == "ignore":
                    log.info("%s: UID %s from %s ignored (untrusted = \"ignore\"): %s", self.name, uid,
                             payload["from"]["address"], payload["authentication"])
                    continue
                events.append((f"{uidvalidity}:{uid}", payload))
                stored_uids.append(uid)
            cursor = MailCursor(uidvalidity, max(chunk), newest)
            self._commit(client, cursor, events)
            self._last_cursor = cursor
            self._after_store(client, stored_uids)

    def _read(self, raw: bytes) -> dict[str, Any]:
        s = self.settings
        return read_message(raw, trusted_senders=s.trusted_senders, authserv_id=s.authserv_id, body_cap=s.body_cap)

    def _commit(self, client: imapclient.IMAPClient, cursor: MailCursor, events: list[tuple[str, Any]]) -> None:
        now = self.host.clock.now()
        # Fenced: a refusal (StaleGeneration) ends the session before _after_store marks or moves anything.
        stored: list[bool] = self._call(lambda: self.fence.write(self.host, lambda st, holder, gen: st.take_mail(
            self.name, cursor, now=now, events=events, holder=holder, gen=gen)))
        new = sum(stored)
        if new:
            log.info("%s: %s new message(s) stored (UID up to %s)", self.name, new, cursor.uid)
            self.host.publish("events", f"{SOURCE}: {new} new")

    def _after_store(self, client: imapclient.IMAPClient, uids: list[int]) -> None:
        """\\Seen or moved, as set; only after the commit (a crash before this leaves the message as it was)."""
        if not uids or self.settings.after == "leave":
            return
        if self.settings.after == "seen":
            client.add_flags(uids, [b"\\Seen"])
            return
        target = self.settings.move_to
        assert target is not None
        if client.has_capability("MOVE"):
            client.move(uids, target)
        else:
            client.copy(uids, target)
            client.delete_messages(uids)
            client.uid_expunge(uids) if client.has_capability("UIDPLUS") else client.expunge()

    # --- replies (the outbox side, awaited by the dispatcher on the engine's loop) ------------------
    async def send(self, batch: Batch) -> None:
        if self._loop is None or self._loop is not asyncio.get_running_loop() or self._host is None:
            raise SendError(f"{self.name}: the source is not running", permanent=False)
        try:
            async with asyncio.timeout(self.settings.timeout * (len(batch.bodies) + 1) + 5):
                await self._deliver(batch)
        except TimeoutError:
            raise SendError(f"{self.name}: sending timed out", permanent=False) from None

    async def _deliver(self, batch: Batch) -> None:
        host = self.host
        for index, body in enumerate(batch.bodies):
            outbox_id = batch.message_ids[index] if index < len(batch.message_ids) else None
            reply_to = batch.reply_to_of(index)
            if outbox_id is None or batch.approval_of(index) is not None:
                continue  # approvals are never answered by mail
            if reply_to is None or not reply_to.startswith(f"{SOURCE}:"):
                continue  # a message to the owner, not an answer to a mail: the other channels carry it
            await self._deliver_one(host, outbox_id, reply_to, body, retried=batch.attempt > 1)

    async def _deliver_one(self, host: PhoneHost, outbox_id: int, reply_to: str, body: str, *, retried: bool
                           ) -> None:
        # A batch on its first try has sent nothing yet: only a retry looks for what an earlier try sent.
        if retried and await host.read(lambda s: s.phone_sent_ref(self.name, outbox_id)) is not None:
            return  # sent on an earlier try
        event = await host.read(lambda s: s.find_event(SOURCE, reply_to[len(SOURCE) + 1:]))
        payload = event.payload if event is not None and isinstance(event.payload, dict) else None
        message_id = f"<agent-console.{self._tag}.{outbox_id}@{self._domain()}>"
        refused = self._why_not(payload)
        if refused is None:
            assert payload is not None
            reply = self.reply_of(payload, body, message_id)
            await asyncio.to_thread(self._smtp_send, reply)
            ref = message_id
            log.info("%s: replied to %s (%s)", self.name, reply["To"], message_id)
        else:
            ref = f"not sent: {refused}"
            log.info("%s: no reply to %s: %s", self.name, reply_to, refused)
        now = host.clock.now()
        await host.write(lambda s: s.record_phone_message(self.name, outbox_id, ref, now=now))

    def _domain(self) -> str:
        address = self.settings.from_address or "agent-console.invalid"
        return address.rsplit("@", 1)[-1]

    def _why_not(self, payload: dict[str, Any] | None) -> str | None:
        """Why a run's message is not sent as a reply to this mail (None: it is)."""
        if self.settings.smtp_host is None:
            return "no smtp_host is set"
        if payload is None:
            return "the mail it answers is no longer in the inbox"
        if payload.get("auto"):
            return f"the mail was sent by a machine ({payload['auto']}); never answered automatically"
        if payload.get("trusted") is not True:
            # A run's messages are written for the owner: mailing them to whoever wrote (or forged) an untrusted
            # mail would hand a stranger what the agent tells its owner. They reach the owner's channels only.
            return "the mail is not from a trusted, authenticated sender; the run's messages went to you only"
        if not (payload.get("reply_to") or (payload.get("from") or {}).get("address")):
            return "the mail has no sender address"
        return None

    def reply_of(self, payload: dict[str, Any], body: str, message_id: str) -> EmailMessage:
        """The reply to one stored mail: threaded (Re:, In-Reply-To, References), marked auto-replied."""
        reply = EmailMessage(policy=email.policy.SMTP)
        subject = str(payload.get("subject") or "").strip()
        reply["Subject"] = subject if subject.lower().startswith("re:") else f"Re: {subject}".rstrip()
        reply["From"] = self.settings.from_address or ""
        reply["To"] = str(payload.get("reply_to") or payload["from"]["address"])
        reply["Date"] = email.utils.formatdate(self.host.clock.now(), usegmt=True)
        reply["Message-ID"] = message_id
        original = payload.get("message_id")
        if original:
            reply["In-Reply-To"] = str(original)
            references = [str(r) for r in payload.get("references") or []]
            reply["References"] = " ".join([*references, str(original)][-20:])
        reply["Auto-Submitted"] = "auto-replied"
        reply.set_content(body)
        return reply

    def _smtp_send(self, reply: EmailMessage) -> None:
        s = self.settings
        assert s.smtp_host is not None
        context = s.tls_context()
        try:
            if s.smtp_tls == "implicit":
                server: smtplib.SMTP = smtplib.SMTP_SSL(s.smtp_host, s.smtp_port, timeout=s.timeout, context=context)
            else:
                server = smtplib.SMTP(s.smtp_host, s.smtp_port, timeout=s.timeout)
            with server:
                if s.smtp_tls == "starttls":
                    server.starttls(context=context)
                if s.smtp_user and s.smtp_password is not None:
                    server.login(s.smtp_user, s.smtp_password.reveal())
                server.send_message(reply)
        except smtplib.SMTPAuthenticationError as exc:
            raise SendError(f"{self.name}: the SMTP server refused the login ({exc.smtp_code})",
                            permanent=False) from None
        except smtplib.SMTPResponseException as exc:
            raise SendError(f"{self.name}: the SMTP server answered {exc.smtp_code}",
                            permanent=500 <= exc.smtp_code < 600) from None
        except smtplib.SMTPRecipientsRefused:
            raise SendError(f"{self.name}: the SMTP server refused the recipient", permanent=True) from None
        except (OSError, smtplib.SMTPException) as exc:
            raise SendError(f"{self.name}: SMTP: {_describe(exc)}", permanent=False) from None


def _size(data: dict[bytes, Any]) -> int:
    return int(data.get(b"RFC822.SIZE") or 0)


def _groups(uids: list[int], sizes: dict[int, int]) -> list[list[int]]:
    """uids in order, cut into groups of at most FETCH_BYTES (a message larger than that is a group alone)."""
    groups: list[list[int]] = []
    total = FETCH_BYTES + 1
    for uid in uids:
        if total + sizes[uid] > FETCH_BYTES:
            groups.append([])
            total = 0
        groups[-1].append(uid)
        total += sizes[uid]
    return groups


def _epoch(value: Any) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # imapclient gives local naive times unless asked otherwise
            value = value.astimezone()
        return int(value.timestamp())
    return 0


def _server_words(exc: BaseException) -> str:
    """What the server said, as text (imaplib hands over its bytes' repr)."""
    text = str(exc).strip() or type(exc).__name__
    if len(text) > 3 and text[:2] in ("b'", 'b"') and text[-1] == text[1]:
        text = text[2:-1]
    return text if len(text) <= 200 else text[:199] + "…"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate was not accepted ({exc.verify_message})"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "the server refused the connection"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {_server_words(exc)}"


def _told_before_idling(client: imapclient.IMAPClient) -> bool:
    """The server's news of new mail that came before IDLE's "+ idling" (or with a command before it: a STATUS, a
    FETCH) is filed by imaplib among its untagged responses, where idle_check never looks; the server does not
    tell it again. Taken (so each is acted on once): True when any was there."""
    untagged: dict[str, list[Any]] = client._imap.untagged_responses
    taken = [untagged.pop(kind.decode(), None) for kind in NEW_MAIL_NEWS]  # both taken, not only the first
    return any(news is not None for news in taken)


def _closed_by_server(client: imapclient.IMAPClient) -> bool:
    """The server closed the connection without a BYE (it crashed, or the link dropped): imapclient's idle_check
    then returns nothing, at once, every time, and the source sat in IDLE on a dead connection saying ok."""
    sock = client.socket()
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        if not select.select([sock], [], [], 0)[0]:
            return False
        with socket.socket(fileno=os.dup(sock.fileno())) as raw:  # the TCP stream under the TLS
            return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _close(client: imapclient.IMAPClient) -> None:
    try:
        client.logout()
    except Exception:
        with contextlib.suppress(Exception):
            client.shutdown()
