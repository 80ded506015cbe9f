"""The webhook receiver's door: a cap on open connections and a deadline on each request's head.

aiohttp waits for a request's head and body for as long as the client keeps the connection open, so
a few hundred clients sending a byte now and then hold a descriptor each for ever; past the process's
open-file limit every accept fails (asyncio logs a traceback for each) and real deliveries time out.
The gate wraps each connection's aiohttp protocol: a connection over the cap is answered 503 and
closed at once, and one that has not sent a whole request head within the deadline is closed. (The
body has its own deadline in the receiver's handler, which can still answer 408.) Both are logged at
most once per second, with a count of the rest, so a flood cannot flood the log.

The gate also does the accepting, instead of asyncio's server: asyncio accepts up to a whole listen
backlog on every loop iteration, while a connection accepted in one iteration is refused two
iterations later and its descriptor closed a third, so under a flood (and more so on a busy CPU)
several backlogs of descriptors are held over the cap at once and accept() runs out of them. The gate
counts every descriptor from accept() to close and stops reading the listening socket while
cap + OVER_CAP are held; waiting clients stay in the kernel's queue, which costs this process nothing.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable

log = logging.getLogger("agent_console.webhooks")

# Descriptors kept for everything else the process holds open: the inbox and its -wal/-shm on each
# connection, the channels' sockets, the console's terminal, the listening socket, Python's own files.
FD_RESERVE = 64
# Connections over the cap held at once while they are answered 503; with that many, no more are
# accepted until one of them is closed.
OVER_CAP = 64
# The kernel's queue of connections not yet accepted (it holds none of this process's descriptors).
BACKLOG = 64
# After accept() itself fails (out of descriptors or memory despite the budget), how long the
# listening socket is left alone: Linux keeps reporting it readable, so retrying at once would spin.
ACCEPT_RETRY_SECONDS = 1.0
# Errors accept() passes on from a connection that died while queued (see accept(2)): that
# connection is gone, the next one is fine.
_DEAD_IN_QUEUE = {errno.ECONNABORTED, errno.EPROTO, errno.ENETDOWN, errno.ENOPROTOOPT, errno.EHOSTDOWN,
                  errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH}
_REFUSAL_BODY = b'{"error": "too many open connections"}'
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n"
            + _REFUSAL_BODY)


def connection_cap(requested: int, setting: str = "webhook_max_connections") -> int:
    """requested, or less when the process's open-file limit could not hold that many connections
    (then said once in the log, naming the setting)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = soft - FD_RESERVE - OVER_CAP
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
    """Accepts connections on listening sockets, counts, caps and times them, and hands each admitted
    one to aiohttp's protocol (make_protocol)."""

    def __init__(self, make_protocol: Callable[[], asyncio.Protocol], *, cap: int, head_timeout: float) -> None:
        self._make_protocol = make_protocol
        self.cap = cap
        self.head_timeout = head_timeout
        self.open = 0
        self.refused = 0
        self.timed_out = 0
        self.accept_failed = 0
        # Every accepted socket not yet closed (admitted, being refused, or not yet handed to asyncio),
        # and the most there have been at once.
        self.descriptors = 0
        self.most_descriptors = 0
        self._waiting: dict[asyncio.BaseTransport, _GuardedConnection] = {}
        self._listeners: list[socket.socket] = []
        self._reading = False
        self._retry: asyncio.TimerHandle | None = None
        self._handing_over: set[asyncio.Task[None]] = set()
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
        self.accept_failures = RateLimitedLine(
            lambda reason: f"could not accept a connection: {reason} (open-file limit "
                           f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}); trying again in "
                           f"{ACCEPT_RETRY_SECONDS:g} s",
            lambda n: f"could not accept a connection {n} more times in the last second",
        )

    @property
    def most_held(self) -> int:
        """The descriptors the gate holds for connections at most: the cap, and room to refuse more."""
        return self.cap + OVER_CAP

    def __call__(self) -> _GuardedConnection:
        return _GuardedConnection(self, self._make_protocol())

    # --- listening ----------------------------------------------------------------------------
    def listen(self, listeners: list[socket.socket]) -> None:
        """Accept connections on these bound, listening sockets (the gate closes them in stop())."""
        for listener in listeners:
            listener.setblocking(False)
        self._listeners = listeners
        self._read_listeners()

    async def stop(self) -> None:
        """No more connections: the listening sockets are closed and nothing accepted is handed on."""
        self._ignore_listeners()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        for listener in self._listeners:
            listener.close()
        self._listeners = []
        # Sockets already accepted become connections (a loop iteration or two), so that whoever
        # closes the open connections next closes these too.
        await asyncio.gather(*self._handing_over, return_exceptions=True)

    def _read_listeners(self) -> None:
        if self._reading or not self._listeners or self._retry is not None or self.descriptors >= self.most_held:
            return
        loop = asyncio.get_running_loop()
        for listener in self._listeners:
            loop.add_reader(listener, self._accept, listener)
        self._reading = True

    def _ignore_listeners(self) -> None:
        if self._reading:
            loop = asyncio.get_running_loop()
            for listener in self._listeners:
                loop.remove_reader(listener)
            self._reading = False

    def _accept(self, listener: socket.socket) -> None:
        """The listening socket is readable: accept what is queued, as far as the budget allows."""
        loop = asyncio.get_running_loop()
        for _ in range(BACKLOG):  # then let the loop serve the connections it has
            if self.descriptors >= self.most_held:
                self._ignore_listeners()  # until a connection is closed (_let_go)
                return
            try:
                conn, _address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _DEAD_IN_QUEUE:
                    continue
                self.accept_failed += 1
                self.accept_failures.note(exc.strerror or str(exc))
                self._ignore_listeners()
                self._retry = loop.call_later(ACCEPT_RETRY_SECONDS, self._try_again)
                return
            conn.setblocking(False)
            self.descriptors += 1
            self.most_descriptors = max(self.most_descriptors, self.descriptors)
            task = loop.create_task(self._hand_over(conn))
            self._handing_over.add(task)
            task.add_done_callback(self._handing_over.discard)

    def _try_again(self) -> None:
        self._retry = None
        self._read_listeners()

    async def _hand_over(self, conn: socket.socket) -> None:
        """Give an accepted socket a transport and a guarded protocol."""
        guarded = self()
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: guarded, conn)
        except BaseException as exc:
            # Once connection_made has run, the transport's close releases the descriptor
            # (connection_lost); before, nothing else will.
            if not guarded.made:
                conn.close()
                self._let_go()
            if not isinstance(exc, Exception):
                raise
            log.warning("could not set up a connection: %s", exc)

    # --- called by the connections ------------------------------------------------------------
    def head_received(self, transport: asyncio.BaseTransport | None) -> None:
        """This connection has sent a whole request head: its head deadline is met."""
        if transport is not None:
            guarded = self._waiting.pop(transport, None)
            if guarded is not None:
                guarded.cancel_deadline()

    def close(self) -> None:
        self.refusals.close()
        self.timeouts.close()
        self.accept_failures.close()

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

    def _let_go(self) -> None:
        """An accepted socket is closed: its descriptor is free, so accepting may go on."""
        self.descriptors -= 1
        self._read_listeners()

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
        self.made = False
        self._admitted = False
        self._deadline: asyncio.TimerHandle | None = None
        self._head_begun = False
        self._head_tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.made = True
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

    def _watch_for_head_end(self, data: bytes) -> None:
        """Meet the head deadline as soon as the head's blank line arrives. (aiohttp parses the head
        at once but starts its handler a loop iteration or two later; a deadline falling due between
        would cut off a request that was on time, whose handler then finds its connection gone.)"""
        if not self._head_begun:
            data = data.lstrip(b"\r\n")  # blank lines before a request line do not begin a head
            if not data:
                return
            self._head_begun = True
        seen = self._head_tail + data
        if b"\r\n\r\n" in seen:  # aiohttp answers 400 to a head ended by bare line feeds
            assert self._transport is not None
            self._gate.head_received(self._transport)
        else:
            self._head_tail = seen[-3:]

    def data_received(self, data: bytes) -> None:
        if self._admitted:
            if self._deadline is not None:
                self._watch_for_head_end(data)
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
        # The transport closes the socket right after this returns.
        if self._admitted:
            self._admitted = False
            self.cancel_deadline()
            assert self._transport is not None
            self._gate._release(self._transport)
            self._inner.connection_lost(exc)
        self._gate._let_go()
