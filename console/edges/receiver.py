"""The webhook receiver: POST /hooks/{source}, GET /healthz, on 127.0.0.1:8765 by default.

Order of work for a delivery, cheapest refusal first: a connection over webhook_max_connections
(503, before aiohttp sees it), a request head not whole within webhook_read_timeout (connection
closed), unknown source (404), declared or actual size over the limit (413, before any HMAC work), a
body not whole within webhook_read_timeout of the head (408), signature on the raw bytes (401), JSON
and the event's key (400), then the durable insert through the group-commit writer: 200 {"stored":
true|false} only after the transaction holding the event has committed, 503 with Retry-After if it could
not commit (the inbox busy or full, or being moved or moved: see core/copy.py).
A client that hangs up mid-body is one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict

from console import telemetry
from console.clock import Clock, WallClock
from console.config import ConfigError, Settings
from console.core import MoveRefusal, StoreError
from console.core.errors import InboxDamaged
from console.edges.config import WebhookConfig, build_verifiers, parse_webhooks
from console.edges.connections import BACKLOG, ConnectionGate, connection_cap
from console.edges.phone_config import telegram_webhook
from console.edges.telegram_webhook import TelegramWebhook
from console.edges.verifiers import BadDelivery, Rejected, Verifier
from console.edges.writer import IngestWriter

log = logging.getLogger("agent_console.webhooks")

VERDICTS = ("stored", "duplicate", "replay", "challenge", "unauthorized", "not_found", "too_large", "bad_request",
            "timeout", "hung_up", "unavailable", "malformed")
MALFORMED_SAVE_GAP = 1.0  # seconds: malformed requests are added to the inbox's count at most this often
_READ_CHUNK = 64 * 1024
# How long a client cut off with a 408 may still send before its connection is closed: enough to read the answer.
LINGER_SECONDS = 2.0
_PLAIN_SOURCE = re.compile(r"[a-z0-9._-]+")  # what config allows a source name: nothing in it needs quoting
# The answers to a delivery taken, made once: json_response's bytes and header, without its work each request.
_STORED = json.dumps({"stored": True}).encode()
_NOT_STORED = json.dumps({"stored": False}).encode()
_JSON_HEADERS = CIMultiDict({hdrs.CONTENT_TYPE: "application/json; charset=utf-8"})
RETRY_AFTER_SECONDS = 30  # a 503's Retry-After: an inbox being moved takes a while to copy


def printable(text: str, limit: int = 120) -> str:
    """A sender-chosen string made safe for one log line (no control characters, bounded length)."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return cleaned + ("…" if len(text) > limit else "")


class _ParseErrorLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's request handler logs a request it cannot parse (data after `Connection: close`, a header line
    over its limit, `HTTP/9.9`, `Content-Length: -1`, ...) as an error with its traceback, from inside aiohttp
    (RequestHandler.handle_error), and answers it 400 itself: anyone who can reach the port could grow the log
    by 10-15 lines a request. Given to aiohttp as the handler's logger (AppRunner passes it on), this makes each
    one line, counted by the receiver; everything else aiohttp logs passes as it was."""

    def __init__(self, on_malformed: Callable[[str, HttpProcessingError], None]) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self._on_malformed = on_malformed

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            remote = args[0] if args else None
            self._on_malformed(str(remote or "?"), exc_info)
            return
        self.logger.log(level, msg, *args, exc_info=exc_info, **kwargs)


class WebhookReceiver:
    """The aiohttp app, its writer thread and its verdict counts. start() / stop() on a running loop."""

    def __init__(
        self,
        config: WebhookConfig,
        verifiers: Mapping[str, Verifier],
        settings: Settings,
        *,
        clock: Clock | None = None,
        group_commit: bool = True,
        on_stored: Callable[[str, str], None] | None = None,
        check_first: bool = False,
        refusal: Callable[[], str | None] | None = None,
        on_damage: Callable[[BaseException], None] | None = None,
        telegram: TelegramWebhook | None = None,
    ) -> None:
        """check_first: run the gate before intake before listening (a receiver on its own). Beside an engine,
        refusal is the engine's verdict on the inbox and on_damage tells it of damage a delivery met. telegram:
        a Telegram channel's updates are taken at their own path (edges/telegram_webhook.py)."""
        self.telegram = telegram
        self.config = config
        self.clock = clock or WallClock()
        self.writer = IngestWriter(settings, clock=self.clock, group_commit=group_commit, check_first=check_first,
                                   refusal=refusal)
        self._on_damage = on_damage
        self.counts: Counter[str] = Counter({verdict: 0 for verdict in VERDICTS})
        self._verifiers = dict(verifiers)
        self._on_stored = on_stored
        self._runner: web.AppRunner | None = None
        self._malformed_unsaved = 0
        self._malformed_saving: asyncio.TimerHandle | None = None
        self.gate: ConnectionGate | None = None
        self.host = config.host
        self.port = config.port

    # --- life cycle ---------------------------------------------------------------------------
    def app(self) -> web.Application:
        # No middleware: aiohttp wraps every request's handler in each one. (The gate meets a connection's head
        # deadline as the head's blank line arrives: edges/connections.py.)
        app = web.Application(client_max_size=self.config.max_body_bytes)
        # Each configured source at its own plain path (aiohttp finds it with a dict lookup, where the pattern
        # below costs a regular expression a request); the pattern answers every other source 404.
        for source in self._verifiers:
            if _PLAIN_SOURCE.fullmatch(source):
                app.router.add_post(f"/hooks/{source}", functools.partial(self._hook, source=source))
        app.router.add_post("/hooks/{source}", self._hook)
        app.router.add_get("/healthz", self._health)
        if self.telegram is not None:
            app.router.add_post(self.telegram.path, self._telegram_update)
        return app

    async def start(self) -> None:
        """Open the inbox on the writer thread, then listen. Raises StoreError or ConfigError."""
        await asyncio.to_thread(self.writer.start)
        # keepalive_timeout closes a kept-alive connection whose next request head does not arrive in
        # time; the gate does the same for the first head, and the handler times the body.
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                               keepalive_timeout=self.config.read_timeout, logger=_ParseErrorLog(self._malformed))
        await runner.setup()
        assert runner.server is not None
        gate = ConnectionGate(runner.server, cap=connection_cap(self.config.max_connections),
                              head_timeout=self.config.read_timeout)
        try:
            listeners = await _listen(self.config.host, self.config.port)
        except OSError as exc:
            await runner.cleanup()
            await asyncio.to_thread(self.writer.stop)
            raise ConfigError(
                f"webhooks.port: cannot listen on {self.config.host}:{self.config.port}: {exc.strerror or exc}"
            ) from None
        gate.listen(listeners)  # the gate accepts, so that it can stop accepting at its cap
        self._runner, self.gate = runner, gate
        host, port = listeners[0].getsockname()[:2]
        self.host, self.port = str(host), int(port)
        log.info("listening on %s (sources: %s)", self.url, ", ".join(sorted(self._verifiers)) or "none")

    async def stop(self) -> None:
        if self.gate is not None:
            await self.gate.stop()  # no new connections; the runner's cleanup ends the open ones
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.gate is not None:
            self.gate.close()
        if self._malformed_saving is not None:
            self._malformed_saving.cancel()
            self._malformed_saving = None
        await self._save_malformed()
        await asyncio.to_thread(self.writer.stop)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def snapshot(self) -> dict[str, Any]:
        """What the console shows: the address, the verdict counts and the commit counter."""
        gate = self.gate
        connections = {"open": gate.open, "refused": gate.refused, "timed_out": gate.timed_out} if gate else {}
        return {"url": self.url, "sources": sorted(self._verifiers), "counts": dict(self.counts),
                "connections": connections, "writer": self.writer.stats.as_dict()}

    # --- requests aiohttp could not parse ------------------------------------------------------
    def _malformed(self, remote: str, exc: HttpProcessingError) -> None:
        """One line for a request aiohttp could not parse (it answered 400 itself), counted here and, at most
        once a second, in the inbox (`status --json` receiver.malformed)."""
        self.counts["malformed"] += 1
        self._malformed_unsaved += 1
        what = printable(" ".join(str(exc.message or type(exc).__name__).split()), 200)
        log.warning("malformed request from %s: %s; answered 400 (verdict=malformed)", printable(remote, 64), what)
        if self._malformed_saving is None:
            loop = asyncio.get_running_loop()
            self._malformed_saving = loop.call_later(
                MALFORMED_SAVE_GAP, lambda: loop.create_task(self._save_malformed()))

    async def _save_malformed(self) -> None:
        self._malformed_saving = None
        unsaved, self._malformed_unsaved = self._malformed_unsaved, 0
        if not unsaved:
            return
        now = self.clock.now()
        try:
            await self.writer.call(lambda store: store.count_receiver({"malformed": unsaved}, now=now))
        except (StoreError, RuntimeError) as exc:  # kept for the next try; the requests were answered anyway
            self._malformed_unsaved += unsaved
            log.debug("could not count %s malformed request(s) in the inbox: %s", unsaved, exc)

    # --- requests -----------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        refused = self.writer.refusal()
        if refused is not None:  # a damaged inbox: a load balancer should send nothing here
            return web.json_response({"ok": False, "error": refused, **self.snapshot()}, status=503)
        return web.json_response({"ok": True, **self.snapshot()})

    async def _hook(self, request: web.Request, source: str | None = None) -> web.StreamResponse:
        started = time.perf_counter()
        if source is None:
            source = request.match_info["source"]
        verifier = self._verifiers.get(source)
        if verifier is None:
            return self._answer(404, "not_found", source, None, started, "unknown source")
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._answer(413, "too_large", source, None, started,
                                f"Content-Length {request.content_length} is over {limit} bytes")
        content = request.content
        if content.is_eof() and content.exception() is None:  # the usual delivery: its body came with its head
            whole = content.read_nowait()
            body: bytes | None = whole if len(whole) <= limit else None
        else:
            try:
                async with asyncio.timeout(self.config.read_timeout):
                    body = await self._read_capped(request, limit)
            except TimeoutError:
                return await self._cut_off(request, source, started)
            except (ConnectionError, web.RequestPayloadError) as exc:
                # Nobody is left to answer; the one line says so (aiohttp would log a traceback).
                self._log(0, "hung_up", source, None, started,
                          f"the client closed the connection before its body was whole ({exc or type(exc).__name__})")
                return web.Response(status=400)
        if body is None:
            return self._answer(413, "too_large", source, None, started, f"body is over {limit} bytes")
        try:
            delivery = verifier.check(body, request.headers, now=self.clock.now())
        except Rejected as exc:
            return self._answer(401, "unauthorized", source, None, started, str(exc))
        except BadDelivery as exc:
            return self._answer(400, "bad_request", source, None, started, str(exc))
        if delivery.challenge is not None:
            return self._answer(200, "challenge", source, None, started, "url_verification",
                                {"challenge": delivery.challenge})
        try:
            text = self.writer.encode(source, delivery.source_id, delivery.payload)
        except ValueError as exc:
            return self._answer(400, "bad_request", source, delivery.source_id, started, str(exc))
        try:
            # The delivery's own span, under the sender's trace when it sent a traceparent.
            with telemetry.request_span(f"ingest {source}", {
                "agent_console.event.source": source, "agent_console.event.source_id": delivery.source_id,
            }, sender=request.headers.get("traceparent")) as span:
                # Kept with the event: the run that takes it joins the sender's trace when the sender traces,
                # else links to this span.
                verdict = await self.writer.ingest(source, delivery.source_id, text, verifier.replay_guard(body),
                                                   trace=span.keep)
                span.set("agent_console.ingest.verdict", verdict)
        except InboxDamaged as exc:  # never a 200 into a file that cannot be read again: the sender redelivers
            if self._on_damage is not None:
                self._on_damage(exc)
            return self._answer(503, "unavailable", source, delivery.source_id, started, str(exc))
        except MoveRefusal as exc:  # the log names the target; the sender learns only to deliver again later
            return self._answer(503, "unavailable", source, delivery.source_id, started, str(exc),
                                {"error": "this inbox is being moved or was moved: deliver again later"})
        except StoreError as exc:
            return self._answer(503, "unavailable", source, delivery.source_id, started, str(exc))
        stored = verdict == "stored"
        if stored and self._on_stored is not None:
            self._on_stored(source, delivery.source_id)
        # A replay is answered as a duplicate: the sender (or the replayer) learns nothing more.
        detail = "the same signed body was seen within the replay window" if verdict == "replay" else None
        return self._answer(200, verdict, source, delivery.source_id, started, detail,
                            _STORED if stored else _NOT_STORED)

    async def _telegram_update(self, request: web.Request) -> web.StreamResponse:
        """A Telegram update: the secret header (constant time), then kept under its update id before the 200."""
        started, webhook = time.perf_counter(), self.telegram
        assert webhook is not None
        try:
            async with asyncio.timeout(self.config.read_timeout):
                body = await self._read_capped(request, self.config.max_body_bytes)
        except TimeoutError:
            return await self._cut_off(request, webhook.source, started)
        except (ConnectionError, web.RequestPayloadError):
            self._log(0, "hung_up", webhook.source, None, started, "the client closed the connection mid-body")
            return web.Response(status=400)
        if body is None:
            return self._answer(413, "too_large", webhook.source, None, started, "body is over the limit")
        try:
            update_id, update = webhook.check(body, request.headers)
        except Rejected as exc:
            return self._answer(401, "unauthorized", webhook.source, None, started, str(exc))
        except BadDelivery as exc:
            return self._answer(400, "bad_request", webhook.source, None, started, str(exc))
        refused, now = self.writer.refusal(), self.clock.now()
        try:
            if refused is not None:
                raise InboxDamaged(refused)
            kept = await self.writer.call(lambda s: s.queue_chat_update(webhook.source, update_id, update, now=now,
                                                                         channel=webhook.channel))
        except (StoreError, InboxDamaged) as exc:  # not kept: Telegram delivers it again
            return self._answer(503, "unavailable", webhook.source, str(update_id), started, str(exc))
        if kept and self._on_stored is not None:
            self._on_stored(webhook.source, str(update_id))
        return self._answer(200, "stored" if kept else "duplicate", webhook.source, str(update_id), started, None, {})

    @staticmethod
    async def _read_capped(request: web.Request, limit: int) -> bytes | None:
        """The body, or None as soon as it grows past limit (whatever Content-Length claimed)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await request.content.read(_READ_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)

    async def _cut_off(self, request: web.Request, source: str, started: float) -> web.StreamResponse:
        """408 for a body not whole in time, and the connection closed: the rest of it is not waited for."""
        response = self._answer(408, "timeout", source, None, started,
                                f"the body was not whole within {self.config.read_timeout} s (webhook_read_timeout)")
        response.force_close()
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            pass
        transport = request.transport
        if transport is not None:
            # Closed while the client's unsent-for bytes sit unread, the socket answers with a reset, and a reset
            # can throw the 408 away before the client reads it (seen under load: 0 of 5 cut-off clients got it).
            # A lingering close, as web servers do it: say we are done (FIN), read and drop what the client still
            # sends until it closes too, for LINGER_SECONDS at most, then close.
            try:
                if transport.can_write_eof():
                    transport.write_eof()
                await asyncio.wait_for(self._drop_rest(request), LINGER_SECONDS)
            except (TimeoutError, ConnectionError, OSError, RuntimeError):
                pass
            transport.close()
        return response

    @staticmethod
    async def _drop_rest(request: web.Request) -> None:
        while await request.content.read(_READ_CHUNK):
            pass

    def _log(self, status: int, verdict: str, source: str, source_id: str | None, started: float,
             detail: str | None) -> None:
        """One line per request (status 0: no answer could be sent)."""
        self.counts[verdict] += 1
        latency_ms = (time.perf_counter() - started) * 1000
        if log.isEnabledFor(logging.INFO):
            log.info(
                "source=%s source_id=%s verdict=%s status=%s latency_ms=%.1f%s",
                printable(source, 64), printable(source_id) if source_id else "-", verdict, status or "-",
                latency_ms, f" detail={printable(detail, 200)}" if detail else "",
            )

    def _answer(
        self, status: int, verdict: str, source: str, source_id: str | None, started: float, detail: str | None,
        body: dict[str, Any] | bytes | None = None,
    ) -> web.Response:
        self._log(status, verdict, source, source_id, started, detail)
        if isinstance(body, bytes):  # an answer made once, as json_response would have made it
            return web.Response(body=body, status=status, headers=_JSON_HEADERS)
        if body is None:
            body = {"error": detail or verdict} if status != 401 else {"error": "unauthorized"}
        # A 503 is the inbox saying "not now" (busy, full, being moved): the sender is told when to deliver again.
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
        return web.json_response(body, status=status, headers=headers)


async def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets bound to every address host names (port 0: one free port, the same for all)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)
    listeners: list[socket.socket] = []
    try:
        for family, _type, _proto, _name, address in dict.fromkeys(infos):
            if listeners and port == 0:
                address = (address[0], listeners[0].getsockname()[1], *address[2:])
            listeners.append(socket.create_server(address, family=family, backlog=BACKLOG))
    except OSError:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def build_receiver(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    clock: Clock | None = None,
    environ: Mapping[str, str] | None = None,
    group_commit: bool = True,
    on_stored: Callable[[str, str], None] | None = None,
    check_first: bool = False,
    refusal: Callable[[], str | None] | None = None,
    on_damage: Callable[[BaseException], None] | None = None,
) -> WebhookReceiver:
    """A receiver on the settings' inbox (not started); ConfigError (naming the setting) for a bad or missing one.
    The assembly builds one beside an engine (console/assembly.receiver_beside: on_stored wakes the engine's worker,
    refusal is the engine's verdict on the inbox, on_damage halts it) or alone for `serve` (check_first)."""
    config = dataclasses.replace(
        parse_webhooks(settings.webhooks),
        read_timeout=settings.webhook_read_timeout, max_connections=settings.webhook_max_connections,
    )
    if host is not None or port is not None:
        config = dataclasses.replace(
            config, host=host if host is not None else config.host, port=port if port is not None else config.port
        )
    telegram = telegram_webhook(settings, os.environ if environ is None else environ)
    if not config.sources and telegram is None:
        raise ConfigError(
            "webhooks.sources: no webhook sources are configured; add one, e.g. [webhooks.sources.github] "
            'with verifier = "github" and secret_env = "GITHUB_WEBHOOK_SECRET"'
        )
    verifiers = build_verifiers(config, environ)
    return WebhookReceiver(
        config, verifiers, settings, clock=clock, group_commit=group_commit, on_stored=on_stored,
        check_first=check_first, refusal=refusal, on_damage=on_damage, telegram=telegram,
    )
