"""The webhook receiver's door: a cap on open connections and a deadline on each request's head.

aiohttp waits for a request's head and body for as long as the client keeps the connection open, so
a few hundred clients sending a byte now and then hold a descriptor each for ever; past the process's
open-file limit every accept fails (asyncio logs a traceback for each) and real deliveries time out.
The gate wraps each connection's aiohttp protocol: a connection over the cap is answered 503 and
closed at once, and one that has not sent a whole request head within the deadline is closed. (The
body has its own deadline in the receiver's handler, which can still answer 408.) Both are logged at
most once per second, with a count of the rest, so a flood cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable

log = logging.getLogger("agent_console.webhooks")

# Descriptors kept for everything else the process holds open: the inbox and its -wal/-shm on each
# connection, the channels' sockets, the console's terminal, Python's own files.
FD_RESERVE = 64
# asyncio accepts up to the listen backlog in one go before any of those connections is refused and
# closed, so a burst holds that many descriptors over the cap for a moment.
BACKLOG = 64
_REFUSAL_BODY = b'{"error": "too many open connections"}'
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n"
            + _REFUSAL_BODY)


def connection_cap(requested: int, setting: str = "webhook_max_connections") -> int:
    """requested, or less when the process's open-file limit could not hold that many connections
    (then said once in the log, naming the setting)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = soft - FD_RESERVE - BACKLOG
    if soft == resource.RLIM_INFINITY or requested <= room:
        return requested
    allowed = max(1, room)
    log.warning("%s = %d is more than this process's open-file limit (%d) leaves room for; using %d",
                setting, requested, soft, allowed)
    return allowed


class RateLimitedLine:
    """One log line for the first of a kind of event in each interval; the rest are counted and said
    in one line when the interval ends."""

    def __init__(self, describe: Callable[[str], str], summarise: Callable[[int], str], *,
                 interval: float = 1.0) -> None:
        self._describe = describe
        self._summarise = summarise
        self.interval = interval
        self._quiet_until = float("-inf")
        self._held = 0
        self._flush: asyncio.TimerHandle | None = None

    def note(self, peer: str) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now >= self._quiet_until:
            log.warning("%s", self._describe(peer))
            self._quiet_until = now + self.interval
            return
        self._held += 1
        if self._flush is None:
            self._flush = loop.call_at(self._quiet_until, self._say_held)

    def _say_held(self) -> None:
        self._flush = None
        if self._held:
            log.warning("%s", self._summarise(self._held))
            self._held = 0

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._say_held()


def _peer(transport: asyncio.BaseTransport) -> str:
    address = transport.get_extra_info("peername")
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return "an unknown address"


class ConnectionGate:
    """A protocol factory for loop.create_server around aiohttp's: counts, caps and times connections."""

    def __init__(self, make_protocol: Callable[[], asyncio.Protocol], *, cap: int, head_timeout: float) -> None:
        self._make_protocol = make_protocol
        self.cap = cap
        self.head_timeout = head_timeout
        self.open = 0
        self.refused = 0
        self.timed_out = 0
        self._waiting: dict[asyncio.BaseTransport, _GuardedConnection] = {}
        self.refusals = RateLimitedLine(
            lambda peer: f"refused a connection from {peer}: {self.cap} connections are open, the limit "
                         "(webhook_max_connections)",
            lambda n: f"refused {n} more connections in the last second: {self.cap} connections are open, "
                      "the limit (webhook_max_connections)",
        )
        self.timeouts = RateLimitedLine(
            lambda peer: f"closed a connection from {peer}: no whole request head within "
                         f"{self.head_timeout:g} s (webhook_read_timeout)",
            lambda n: f"closed {n} more connections in the last second: no whole request head within "
                      f"{self.head_timeout:g} s (webhook_read_timeout)",
        )

    def __call__(self) -> asyncio.Protocol:
        return _GuardedConnection(self, self._make_protocol())

    def head_received(self, transport: asyncio.BaseTransport | None) -> None:
        """The receiver saw a whole request head on this connection: its head deadline is met."""
        if transport is not None:
            guarded = self._waiting.pop(transport, None)
            if guarded is not None:
                guarded.cancel_deadline()

    def close(self) -> None:
        self.refusals.close()
        self.timeouts.close()

    # --- called by the connections ------------------------------------------------------------
    def _admit(self, connection: _GuardedConnection, transport: asyncio.BaseTransport) -> bool:
        if self.open >= self.cap:
            self.refused += 1
            self.refusals.note(_peer(transport))
            return False
        self.open += 1
        self._waiting[transport] = connection
        return True

    def _release(self, transport: asyncio.BaseTransport) -> None:
        self.open -= 1
        self._waiting.pop(transport, None)

    def _overdue(self, transport: asyncio.BaseTransport) -> None:
        self.timed_out += 1
        self._waiting.pop(transport, None)
        self.timeouts.note(_peer(transport))


class _GuardedConnection(asyncio.Protocol):
    """Passes everything to aiohttp's protocol once admitted; a refused one never reaches it."""

    def __init__(self, gate: ConnectionGate, inner: asyncio.Protocol) -> None:
        self._gate = gate
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._admitted = False
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if not self._gate._admit(self, transport):
            transport.write(_REFUSAL)
            transport.close()
            return
        self._admitted = True
        self._deadline = asyncio.get_running_loop().call_later(self._gate.head_timeout, self._head_overdue)
        self._inner.connection_made(transport)

    def _head_overdue(self) -> None:
        self._deadline = None
        if self._transport is not None and not self._transport.is_closing():
            self._gate._overdue(self._transport)
            self._transport.abort()

    def cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._admitted else None

    def pause_writing(self) -> None:
        if self._admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self.cancel_deadline()
        assert self._transport is not None
        self._gate._release(self._transport)
        self._inner.connection_lost(exc)
