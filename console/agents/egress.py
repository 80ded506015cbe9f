"""The engine's egress proxy: a sandboxed MCP server's only way to the network (console/agents/sandbox.py).

Each sandboxed server gets a Unix socket of its own (in a 0700 folder), bound into its sandbox, so the proxy knows
which server asks without trusting anything the server says. It speaks HTTP proxying as clients expect from
HTTP_PROXY / HTTPS_PROXY: `CONNECT host:port` (a tunnel, for https) and a plain request in absolute form
(`GET http://host/path`, sent on with `Connection: close`). A host the server's `allow_hosts` does not name is
refused with 403 and counted per server and host; what is counted goes to `status --json`, the console and the
audit trail through the hub's health.

allow_hosts: "api.github.com" (ports 80 and 443), "*.example.org" (its subdomains, not itself; 80 and 443),
"host:port" (that port only). The proxy resolves the host itself; `connect` may be replaced (tests map names to
local servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

Connect = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 10.0
_DEFAULT_PORTS = (80, 443)
_DROPPED_HEADERS = ("proxy-connection", "proxy-authorization", "connection", "keep-alive")


def host_allowed(host: str, port: int, allow_hosts: Iterable[str]) -> bool:
    """Whether host:port is one the allow list names (see the module's note for the forms)."""
    host = host.lower().rstrip(".")
    for entry in allow_hosts:
        pattern, _, named_port = entry.partition(":")
        if (named_port and int(named_port) != port) or (not named_port and port not in _DEFAULT_PORTS):
            continue
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


class EgressProxy:
    """The proxy's sockets, one per sandboxed server, served on the caller's asyncio loop."""

    def __init__(self, *, connect: Connect | None = None,
                 on_refused: Callable[[str, str], None] | None = None) -> None:
        self._connect = connect or _open
        self._on_refused = on_refused
        self._folder = Path(tempfile.mkdtemp(prefix="agent-console-egress-"))  # 0700, as mkdtemp makes it
        self._servers: dict[str, asyncio.Server] = {}

    def socket_path(self, server: str) -> Path:
        return self._folder / f"{server}.sock"

    async def open_for(self, server: str, allow_hosts: tuple[str, ...]) -> Path:
        """The socket of server's proxy, listening (made on first use; later calls find it)."""
        path = self.socket_path(server)
        if server not in self._servers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._handle(server, allow_hosts, reader, writer)

            self._servers[server] = await asyncio.start_unix_server(handle, path=str(path), limit=_HEAD_LIMIT)
            os.chmod(path, 0o600)
        return path

    async def close(self) -> None:
        for listening in self._servers.values():
            listening.close()
        self._servers.clear()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _refuse(self, server: str, host: str) -> None:
        logger.warning("MCP server %s: a connection to %s refused (not in its allow_hosts)", server, host)
        if self._on_refused is not None:
            self._on_refused(server, host)

    async def _handle(self, server: str, allow_hosts: tuple[str, ...], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = ([*lines[0].split(" "), "", ""])[:3]
            request = _target(method, target)
            if request is None:
                await _answer(writer, 400, "agent-console's egress proxy takes CONNECT host:port or an "
                                           "absolute http:// URL")
                return
            host, port, path = request
            named = f"{host}:{port}"
            if not host_allowed(host, port, allow_hosts):
                self._refuse(server, named)
                await _answer(writer, 403, f"agent-console: {named} is not in mcp_servers.{server}.allow_hosts")
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(self._connect(host, port), _CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                await _answer(writer, 502, f"agent-console: cannot reach {named}: {exc}")
                return
            upstream = up_writer
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                kept = [line for line in lines[1:] if line and
                        line.partition(":")[0].strip().lower() not in _DROPPED_HEADERS]
                up_writer.write("\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
                               .encode("latin-1"))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for end in (upstream, writer):
                if end is not None:
                    end.close()
                    with contextlib.suppress(Exception):
                        await end.wait_closed()


def _target(method: str, target: str) -> tuple[str, int, str] | None:
    """(host, port, origin-form path) of a proxy request line's target, or None when it is not one."""
    if method == "CONNECT":
        host, _, digits = target.rpartition(":")
        if not host or not digits.isdigit() or not 0 < int(digits) < 65536:
            return None
        return host.strip("[]").lower(), int(digits), ""
    try:
        parts = urllib.parse.urlsplit(target)
        port = parts.port or 80
    except ValueError:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return None
    path = parts.path or "/"
    return parts.hostname.lower(), port, path + (f"?{parts.query}" if parts.query else "")


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    body = (text + "\n").encode("utf-8")
    writer.write(f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1") + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            target.write(chunk)
            await target.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if target.can_write_eof():
                target.write_eof()
