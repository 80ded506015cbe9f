"""MCP servers as tools: a hub that keeps one session per server (the `[mcp_servers]` config is read by
console/agents/mcp_config.py).

The hub runs its own asyncio loop on a background thread, so the engine's threads call it synchronously and
wait only as long as a timeout says. Each server has its own session and its own supervisor task: a server that
is down, slow or dying makes only its own tools unavailable, and is reconnected in the background with capped
exponential backoff. The protocol itself is the `mcp` SDK's (2.x); this module only decides when to connect,
what to wait for, and what to tell the model.

Secrets: `${VAR}` in `env` and `headers` is read from the environment each time a server is connected and never
kept in the config. The values substituted are scrubbed from every reason, error and log line the hub writes,
because a library's error message may quote a header or the server's stderr may echo its token.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

if TYPE_CHECKING:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, CallToolResult, Implementation, RequestParamsMeta, TextContent

import console
from console import telemetry
from console.agents.egress import Connect, EgressProxy
from console.agents.errors import CallNotSent
from console.agents.mcp_config import McpServerConfig, expanded_with_secrets
from console.agents.sandbox import (
    SandboxPlaces,
    SandboxUnavailable,
    check_sandbox,
    default_places,
    hidden_command,
    launch,
    prepare_data_dir,
)
from console.config import ConfigError
from console.core import OutcomeUnknown
from console.redact import HIDDEN, redact_urls

logger = logging.getLogger(__name__)

MCP_PREFIX = "mcp__"
IDEMPOTENCY_META_KEY = "agent-console/idempotency-key"
# What the model providers accept as a tool name (Anthropic: ^[a-zA-Z0-9_-]{1,64}$). Tools whose full name does
# not fit are left out with a warning rather than renamed, so a name always means one tool.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_LIST_PAGE_CAP = 100  # a server whose listing never ends cannot hang a connect
_REASON_CAP = 300
_SCRUB_MIN_LENGTH = 4  # shorter values are not secrets worth mangling every message for
_CLOSE_GRACE = 15.0  # the SDK's stdio shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL, 2 s


# --- tools and errors ---------------------------------------------------------------------------------------


def _load_sdk() -> None:
    """Import the MCP SDK (and anyio, httpx) into this module, once, when a hub first starts. The import takes
    about a second and 35 MB here, pydantic and the SDK's server side with it: building the agent (the console
    after its first frame, `run` before it takes the lease) needs none of it, and a run that calls no MCP tool never
    starts the hub. Every use of these names is on a started hub's thread or after it."""
    global anyio, httpx2, Client, StdioServerParameters, stdio_client, streamable_http_client
    global create_mcp_http_client, MCPError, CONNECTION_CLOSED, CallToolResult, Implementation, RequestParamsMeta
    global TextContent
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, CallToolResult, Implementation, RequestParamsMeta, TextContent


@dataclass(frozen=True)
class McpTool:
    name: str                    # mcp__<server>__<tool>
    server: str
    tool: str                    # the server's own tool name
    description: str
    input_schema: dict[str, Any]
    # The tool's MCP annotations as the server declares them (None: not declared): read_only, destructive,
    # idempotent, open_world (readOnlyHint, destructiveHint, idempotentHint, openWorldHint). Claims of the
    # server's, used only to be more careful, except on a server the owner marked trusted.
    annotations: dict[str, bool | None] = field(default_factory=dict)
    trusted_server: bool = False  # [mcp_servers.NAME] trusted = true
    private_server: bool = False  # [mcp_servers.NAME] private = true
    own_service_server: bool = False  # [mcp_servers.NAME] own_service = true


def read_annotations(annotations: Any) -> dict[str, bool | None]:
    """A listed tool's ToolAnnotations as {read_only, destructive, idempotent, open_world}: each True, False or
    None (not declared, or not a boolean)."""
    def hint(name: str) -> bool | None:
        value = getattr(annotations, name, None) if annotations is not None else None
        return value if isinstance(value, bool) else None

    return {"read_only": hint("read_only_hint"), "destructive": hint("destructive_hint"),
            "idempotent": hint("idempotent_hint"), "open_world": hint("open_world_hint")}


class McpToolError(Exception):
    """A call that failed, or a server that is unavailable. str() is safe to show the model: no secrets."""


class McpCallUnknown(McpToolError, OutcomeUnknown):
    """The call was sent and its answer never came: no answer within call_timeout, the connection was lost or
    the server died mid-call, the hub closed under it. It may or may not have happened."""


class McpServerUnavailable(McpToolError, CallNotSent):
    """The call was not sent: its server is down or restarting, or the hub is not running. Nothing happened."""


class _HubClosedMidCall(McpToolError):
    """The hub was closed while a submitted coroutine ran."""


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


def split_mcp_tool_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of `mcp__<server>__<tool>`, or None when the name is not of that shape."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, separator, tool = name[len(MCP_PREFIX):].partition("__")
    if not separator or not server or not tool:
        return None
    return server, tool


# --- the hub ------------------------------------------------------------------------------------------------

_T = TypeVar("_T")
_State = Literal["connecting", "up", "down"]


class _Scrubber:
    """Hides the values substituted from ${VAR} in any text that leaves the hub."""

    def __init__(self) -> None:
        self._secrets: tuple[str, ...] = ()

    def remember(self, values: Iterable[str]) -> None:
        longest_first = sorted({v for v in values if len(v) >= _SCRUB_MIN_LENGTH} | set(self._secrets), key=len)
        self._secrets = tuple(reversed(longest_first))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, HIDDEN)
        return redact_urls(text)

    def __repr__(self) -> str:
        return f"<_Scrubber of {len(self._secrets)} values>"


class _Server:
    """One server's runtime state. Written on the hub's loop; read by other threads under the hub's lock."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.state: _State = "connecting"
        self.reason = ""
        self.retry_at = 0.0          # time.monotonic() of the next attempt while down
        self.client: Client | None = None
        self.tools: dict[str, McpTool] = {}   # by the server's own tool name
        self.lost: anyio.Event | None = None  # set when the live session is found dead
        self.lost_reason = ""
        self.failures = 0                     # attempts that failed since it last stayed up for a while
        self.up_since: float | None = None
        self.marked_down = False              # in the current attempt
        self.first_attempt = threading.Event()
        self.last_stderr = ""                 # shown with a failed connect: often the server's own complaint
        self.scrub = _Scrubber()
        self.session_id: str | None = None    # an HTTP server's Mcp-Session-Id (telemetry's mcp.session.id)
        # A call that finds the server down asks for an attempt now (wanted, and wake cuts the backoff's sleep
        # short) and waits for it to end (ended reaches it; news is set at each end): a server back from a restart
        # is used at once, not a backoff later.
        self.wanted = False
        self.wake: anyio.Event | None = None
        self.news: anyio.Event | None = None
        self.attempts = 0            # connection attempts started
        self.ended = 0               # the last attempt that ended (up, or failed)
        self.connecting = False      # an attempt is under way
        self.refused: dict[str, int] = {}     # host:port -> connections its egress proxy refused

    @property
    def sandbox(self) -> str:
        """status --json's tools[].sandbox: "on" (bubblewrap), "off" (sandbox = false: a warning), "remote"
        (an HTTP server: not a process of this machine)."""
        if self.config.transport == "http":
            return "remote"
        return "on" if self.config.sandbox else "off"

    def mark_lost(self, reason: str) -> None:
        if self.lost is not None and not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()


class _WatchedReadStream:
    """The transport's read stream, telling the supervisor when it ends: for stdio, the server process is gone."""

    def __init__(self, inner: Any, server: _Server) -> None:
        self._inner = inner
        self._server = server

    @property
    def last_context(self) -> Any:  # the dispatcher reads it from the HTTP transport's context-aware stream
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._server.mark_lost("the server closed the connection")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class McpHub:
    """Sessions with the configured MCP servers, on a background thread with its own asyncio loop.

    tools() and call() are safe from any thread and block only up to their timeouts."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        env: Mapping[str, str] | None = None,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        places: SandboxPlaces | None = None,
        egress_connect: Connect | None = None,
    ) -> None:
        for key, config in servers.items():
            if key != config.name:
                raise ValueError(f"mcp server {key!r} is configured under the name {config.name!r}")
        self._servers = {name: _Server(config) for name, config in servers.items()}
        # The live environment by default, read at connect time: a variable set after start-up is seen.
        self._env: Mapping[str, str] = env if env is not None else os.environ
        self._backoff_base = backoff_base
        # What the sandboxes hide and where their folders go; the egress proxy's way out (tests map names).
        self._places = places if places is not None else default_places(self._env)
        self._egress_connect = egress_connect
        self._egress: EgressProxy | None = None
        self._bwrap: str | None = None  # a bwrap whose check passed here
        self._backoff_max = backoff_max
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: Callable[[], None] | None = None
        self._ready = threading.Event()
        self._closed = False
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._watchers: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<McpHub servers={sorted(self._servers)}>"

    def watch(self, callback: Callable[[], None]) -> None:
        """Call callback (on the hub's thread: it must only hand the news on) each time a server's state or
        reason changes, so its health is recorded when it changes, not at the next run."""
        with self._lock:
            self._watchers.append(callback)

    # --- lifecycle --------------------------------------------------------------------------------------

    def start(self, *, wait: bool = True) -> None:
        """Starts the hub's thread and connects every server. With wait, returns once each server's first
        attempt has ended (up or down), bounded by the servers' connect and list timeouts."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            _load_sdk()
            self._thread = threading.Thread(target=self._run_loop, name="mcp-hub", daemon=True)
            self._thread.start()
        self._ready.wait(timeout=_CLOSE_GRACE)
        if wait:
            deadline = time.monotonic() + max(
                (s.config.connect_timeout + s.config.list_timeout for s in self._servers.values()), default=0.0
            ) + 1.0
            for server in self._servers.values():
                server.first_attempt.wait(timeout=max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Ends every session and server process, then the thread (bounded)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, loop, stop = self._thread, self._loop, self._stop
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop)
        thread.join(timeout=_CLOSE_GRACE)
        if thread.is_alive():
            logger.warning("the MCP hub did not stop within %g s", _CLOSE_GRACE)

    def _run_loop(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            logger.exception("the MCP hub's loop failed")
        finally:
            self._ready.set()
            for server in self._servers.values():
                server.first_attempt.set()

    async def _main(self) -> None:
        self._egress = EgressProxy(connect=self._egress_connect, on_refused=self._refused)
        try:
            async with anyio.create_task_group() as group:
                with self._lock:
                    self._loop = asyncio.get_running_loop()
                    self._stop = group.cancel_scope.cancel
                    if self._closed:
                        group.cancel_scope.cancel()
                for server in self._servers.values():
                    group.start_soon(self._supervise, server)
                self._ready.set()
        finally:
            with anyio.CancelScope(shield=True):
                await self._egress.close()

    def _refused(self, name: str, host: str) -> None:
        """The egress proxy refused one of name's connections (on the hub's loop)."""
        server = self._servers[name]
        with self._lock:
            server.refused[host] = server.refused.get(host, 0) + 1
            watchers = list(self._watchers)
        self._tell(watchers)

    # --- queries from other threads ---------------------------------------------------------------------

    def status(self) -> dict[str, str]:
        """server -> "up" | "down: <reason>; retrying in N s", "connecting" during its very first attempt, and
        "down: not started" / "down: closed" around the hub's life."""
        now = time.monotonic()
        with self._lock:
            return {name: self._status_text(server, now) for name, server in self._servers.items()}

    def _status_text(self, server: _Server, now: float) -> str:
        if self._closed:
            return "down: closed"
        if self._thread is None:
            return "down: not started"
        if server.state == "up":
            return "up"
        if server.state == "connecting":
            return "connecting"
        return f"down: {server.reason}; retrying in {max(0, math.ceil(server.retry_at - now))} s"

    def boxes(self) -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]:
        """server -> (its sandbox: "on" | "off" | "remote", the hosts its egress proxy refused with their counts)."""
        with self._lock:
            return {name: (server.sandbox, tuple(sorted(server.refused.items())))
                    for name, server in self._servers.items()}

    def tools(self) -> tuple[list[McpTool], dict[str, str]]:
        """The tools of the servers that are up (listed afresh), and why each other server is unavailable."""
        bound = max((s.config.list_timeout for s in self._servers.values()), default=0.0) + 1.0
        try:
            listed = self._submit(self._list_everything(), timeout=bound)
        except McpToolError as exc:
            return [], {name: str(exc) for name in self._servers}
        except concurrent.futures.TimeoutError:
            listed = {}
        tools: list[McpTool] = []
        unavailable: dict[str, str] = {}
        statuses = self.status()
        for name in self._servers:
            found = listed.get(name)
            if isinstance(found, list):
                tools.extend(found)
            else:
                unavailable[name] = found or statuses[name].removeprefix("down: ")
        return tools, unavailable

    def scrub(self, text: str) -> str:
        """text with every value any server had substituted from ${VAR} hidden, and URL credentials (for records
        the hub does not write itself: the transcript, the audit trail)."""
        for server in self._servers.values():
            text = server.scrub(text)
        return text

    def call(self, name: str, arguments: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        """Calls mcp__<server>__<tool> with the idempotency key in the request's _meta.

        Returns {"is_error", "text", "structured"}; raises McpToolError for an unknown tool, a server that is
        down, no answer within call_timeout, or a protocol error."""
        parts = split_mcp_tool_name(name)
        server = self._servers.get(parts[0]) if parts else None
        if parts is None:
            raise McpToolError(f"unknown tool {name}: not an MCP tool (mcp__<server>__<tool>)")
        if server is None:
            raise McpToolError(f"unknown tool {name}: no MCP server {parts[0]} is configured")
        if not isinstance(arguments, dict):
            raise McpToolError(f"{name}: the arguments must be an object")
        try:
            return self._submit(
                self._call(server, parts[1], name, arguments, idempotency_key, telemetry.traceparent()),
                # A server found down is given one attempt to connect first (_try_now).
                timeout=server.config.connect_timeout + server.config.list_timeout + server.config.call_timeout + 1.0,
            )
        except concurrent.futures.TimeoutError:
            raise McpCallUnknown(
                f"{name}: no answer from MCP server {server.config.name} within {server.config.call_timeout:g} s"
            ) from None
        except _HubClosedMidCall:
            raise McpCallUnknown(f"{name}: the MCP hub was closed during the call") from None

    def session_id(self, name: str) -> str | None:
        """The MCP session id of the server behind mcp__<server>__<tool> (HTTP servers give one), or None."""
        parts = split_mcp_tool_name(name)
        server = self._servers.get(parts[0]) if parts else None
        return None if server is None else server.session_id

    def repeatable(self, name: str) -> bool:
        """A call to this tool whose outcome is unknown may be sent again under the same idempotency key: its
        server is configured as honouring the key (idempotency_key = true), or the tool is annotated
        idempotentHint: true."""
        parts = split_mcp_tool_name(name)
        server = self._servers.get(parts[0]) if parts else None
        if parts is None or server is None:
            return False
        with self._lock:
            listed = server.tools.get(parts[1])
        return server.config.idempotency_key or (listed is not None and listed.annotations.get("idempotent") is True)

    def _submit(self, work: Awaitable[_T], *, timeout: float) -> _T:
        """Runs a coroutine on the hub's loop and waits for it, at most timeout seconds."""
        with self._lock:
            loop = self._loop
            usable = loop is not None and not self._closed and threading.current_thread() is not self._thread
        if not usable or loop is None:
            if asyncio.iscoroutine(work):
                work.close()
            raise McpServerUnavailable("the MCP hub is closed" if self._closed else "the MCP hub is not started")
        try:
            future = asyncio.run_coroutine_threadsafe(cast(Any, work), loop)
        except RuntimeError:  # the loop has ended (it failed, or close() is under way)
            if asyncio.iscoroutine(work):
                work.close()
            raise McpServerUnavailable("the MCP hub is not running") from None
        with self._lock:
            self._pending.add(future)
        try:
            return cast(_T, future.result(timeout=timeout))
        except concurrent.futures.CancelledError:
            raise _HubClosedMidCall("the MCP hub is closed") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        finally:
            with self._lock:
                self._pending.discard(future)

    # --- on the hub's loop ------------------------------------------------------------------------------

    async def _list_everything(self) -> dict[str, list[McpTool] | str]:
        results: dict[str, list[McpTool] | str] = {}

        async def one(server: _Server) -> None:
            client = server.client
            if server.state != "up" or client is None:
                return
            try:
                with anyio.fail_after(server.config.list_timeout):
                    tools = await self._list_tools(server, client)
            except TimeoutError:
                results[server.config.name] = f"no tool list within {server.config.list_timeout:g} s"
                return
            except Exception as exc:
                reason = self._reason(server, exc)
                if _is_connection_loss(exc):
                    server.mark_lost(reason)
                results[server.config.name] = f"listing its tools failed: {reason}"
                return
            self._set(server, tools={tool.tool: tool for tool in tools})
            results[server.config.name] = tools

        async with anyio.create_task_group() as group:
            for server in self._servers.values():
                group.start_soon(one, server)
        return results

    async def _call(
        self, server: _Server, tool: str, name: str, arguments: dict[str, Any], key: str, parent: str | None = None
    ) -> dict[str, Any]:
        config = server.config
        if server.state != "up" or server.client is None:
            await self._try_now(server)
        client = server.client
        if server.state != "up" or client is None:
            with self._lock:
                why = self._status_text(server, time.monotonic()).removeprefix("down: ")
            raise McpServerUnavailable(f"{name}: MCP server {config.name} is unavailable ({why})")
        if tool not in server.tools:
            raise McpToolError(f"unknown tool {name}: server {config.name} does not offer a tool {tool!r}")
        # The W3C trace context of the call's span, as MCP carries it (_meta.traceparent): the server's own spans
        # join the run's trace.
        meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key, **({"traceparent": parent} if parent else {})})
        try:
            with anyio.fail_after(config.call_timeout):
                result = await client.call_tool(tool, arguments, meta=meta)
        except TimeoutError:
            raise McpCallUnknown(
                f"{name}: no answer from MCP server {config.name} within {config.call_timeout:g} s"
            ) from None
        except MCPError as exc:
            reason = self._reason(server, exc)
            if exc.code == CONNECTION_CLOSED:
                server.mark_lost(reason)
                raise McpCallUnknown(
                    f"{name}: MCP server {config.name} closed the connection during the call") from None
            raise McpToolError(f"{name}: MCP server {config.name} refused the call: {reason}") from None
        except Exception as exc:
            reason = self._reason(server, exc)
            if _is_connection_loss(exc):  # the request was written; whether it was acted on is not known
                server.mark_lost(reason)
                raise McpCallUnknown(
                    f"{name}: the connection to MCP server {config.name} was lost during the call: {reason}"
                ) from None
            raise McpToolError(f"{name}: the call to MCP server {config.name} failed: {reason}") from None
        return _result(result, server.scrub)

    async def _try_now(self, server: _Server) -> None:
        """The server is down or still connecting: connect it now rather than at the backoff's end, and wait
        for that attempt (or the one under way) to end, bounded by its connect and list timeouts."""
        if server.connecting:
            awaited = server.attempts
        else:
            awaited = server.attempts + 1
            server.wanted = True
            if server.wake is not None:
                server.wake.set()
        with anyio.move_on_after(server.config.connect_timeout + server.config.list_timeout):
            while server.state != "up" and server.ended < awaited and server.news is not None:
                await server.news.wait()

    def _attempt_ended(self, server: _Server) -> None:
        if not server.connecting:
            return
        server.connecting = False
        server.ended = server.attempts
        if server.news is not None:
            server.news.set()
        server.news = anyio.Event()

    async def _supervise(self, server: _Server) -> None:
        """Connects the server, keeps its session until it is lost, then reconnects after a backoff. While it
        reconnects it stays down with the last reason ("retrying in 0 s"): only the first attempt is "connecting"."""
        server.news = anyio.Event()
        while True:
            server.marked_down = False
            server.attempts += 1
            server.connecting = True
            try:
                await self._connect_and_serve(server)
            except Exception as exc:
                if not server.marked_down:  # else it was marked down with the reason before the teardown failed
                    self._mark_down(server, self._connect_failure(server, exc))
            finally:
                server.client = None
            if not server.marked_down:
                self._mark_down(server, "the session ended")
            server.first_attempt.set()
            self._attempt_ended(server)
            server.wake = anyio.Event()
            if not server.wanted:
                with anyio.move_on_after(max(0.0, server.retry_at - time.monotonic())):
                    await server.wake.wait()
            server.wanted = False

    def _mark_down(self, server: _Server, reason: str) -> None:
        now = time.monotonic()
        if server.up_since is not None and now - server.up_since >= self._backoff_max:
            server.failures = 0  # it ran for a good while: a new trouble, not the same one again
        delay = min(self._backoff_max, self._backoff_base * 2 ** server.failures)
        server.failures += 1
        server.up_since = None
        server.marked_down = True
        self._set(server, state="down", reason=reason, retry_at=now + delay, tools={})
        logger.warning("MCP server %s is down: %s; retrying in %g s", server.config.name, reason, delay)

    async def _connect_and_serve(self, server: _Server) -> None:
        config = server.config
        server.lost = anyio.Event()
        server.lost_reason = ""
        server.last_stderr = ""
        transport = self._stdio_transport(server) if config.transport == "stdio" else self._http_transport(server)
        client = Client(
            transport,
            cache=None,  # every listing fresh: a server's tools may change while it runs
            client_info=Implementation(name="agent-console", version=console.__version__),
        )
        phase = "connect"
        with anyio.CancelScope(deadline=anyio.current_time() + config.connect_timeout) as deadline:
            async with client:
                phase = "list its tools"
                deadline.deadline = anyio.current_time() + config.list_timeout
                tools = await self._list_tools(server, client)
                deadline.deadline = math.inf
                server.client = client
                server.up_since = time.monotonic()
                self._set(server, state="up", reason="", tools={tool.tool: tool for tool in tools})
                server.first_attempt.set()
                self._attempt_ended(server)
                logger.info("MCP server %s is up with %d tools", config.name, len(tools))
                await server.lost.wait()
                # Down before the session is torn down (a stdio server gets seconds to exit): calls meanwhile
                # are refused with the reason at once.
                server.client = None
                self._mark_down(server, server.lost_reason or "the session ended")
        if deadline.cancelled_caught:
            timeout = config.connect_timeout if phase == "connect" else config.list_timeout
            raise TimeoutError(f"did not {phase} within {timeout:g} s")

    async def _list_tools(self, server: _Server, client: Client) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                full = mcp_tool_name(server.config.name, tool.name)
                if not _TOOL_NAME.fullmatch(full):
                    logger.warning("MCP server %s: tool %r left out: %s is not a valid tool name "
                                   "(letters, digits, _ and -, at most 64)", server.config.name, tool.name, full)
                    continue
                tools.append(McpTool(
                    name=full, server=server.config.name, tool=tool.name,
                    description=tool.description or "", input_schema=dict(tool.input_schema),
                    annotations=read_annotations(tool.annotations), trusted_server=server.config.trusted,
                    private_server=server.config.private, own_service_server=server.config.own_service,
                ))
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    @contextlib.asynccontextmanager
    async def _stdio_transport(self, server: _Server) -> AsyncIterator[Any]:
        config = server.config
        assert config.command is not None
        env = self._expanded(server, config.env, f"mcp_servers.{config.name}.env")
        if config.sandbox:
            params = await self._sandboxed(config, env)
        else:
            params = StdioServerParameters(command=config.command, args=list(config.args), env=env)
        read_fd, write_fd = os.pipe()
        errlog = open(write_fd, "w", encoding="utf-8", errors="replace", closefd=True)  # noqa: SIM115
        pump = asyncio.get_running_loop().create_task(self._pump_stderr(server, read_fd))
        try:
            async with stdio_client(params, errlog=errlog) as (read_stream, write_stream):
                errlog.close()  # the child has its own copy: its end closing is the pipe's end of file
                yield _WatchedReadStream(read_stream, server), write_stream
        finally:
            errlog.close()
            # The last lines, for the reason; bounded, as a grandchild may hold the pipe open. Shielded: this also
            # runs while the hub is being closed.
            with anyio.CancelScope(shield=True):
                await asyncio.wait({pump}, timeout=1.0)
            pump.cancel()

    async def _sandboxed(self, config: McpServerConfig, env: dict[str, str]) -> StdioServerParameters:
        """The server's command wrapped in its sandbox; SandboxUnavailable (the server is not started) when the
        sandbox cannot start here, saying why and what to do."""
        # Checked until a sandbox has started here once (then a start that fails says bwrap's own words): the
        # check is a sandbox of its own, most of what the box adds to a start.
        bwrap = self._bwrap
        if bwrap is None:
            bwrap = await asyncio.to_thread(check_sandbox, config.name, self._env)
        hidden = hidden_command(config, self._places, self._env.get("PATH"))
        if hidden is not None:
            raise SandboxUnavailable(hidden)
        data_dir = await asyncio.to_thread(prepare_data_dir, config, self._places)
        assert self._egress is not None
        socket = await self._egress.open_for(config.name, config.allow_hosts)
        spawn = launch(config, bwrap=bwrap, places=self._places, data_dir=data_dir, socket=socket, server_env=env,
                       engine_env=self._env)
        self._bwrap = bwrap
        return StdioServerParameters(command=spawn.command, args=spawn.args, env=spawn.env)

    async def _pump_stderr(self, server: _Server, read_fd: int) -> None:
        """The child's stderr, line by line, into our log at debug level (not the terminal)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        with open(read_fd, "rb", buffering=0) as pipe:
            transport, _protocol = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
            try:
                pending = b""
                while chunk := await reader.read(4096):
                    *lines, pending = (pending + chunk).split(b"\n")
                    pending = pending[-4096:]  # a line without end cannot grow without bound
                    for line in lines:
                        self._stderr_line(server, line)
                if pending:
                    self._stderr_line(server, pending)
            finally:
                transport.close()

    def _stderr_line(self, server: _Server, raw: bytes) -> None:
        line = server.scrub(raw.decode("utf-8", "replace").rstrip())
        if line:
            server.last_stderr = line[:_REASON_CAP]
            logger.debug("MCP server %s stderr: %s", server.config.name, line)

    @contextlib.asynccontextmanager
    async def _http_transport(self, server: _Server) -> AsyncIterator[Any]:
        config = server.config
        assert config.url is not None
        headers = self._expanded(server, config.headers, f"mcp_servers.{config.name}.headers")
        for header, value in headers.items():
            if "\r" in value or "\n" in value or "\0" in value:
                raise ConfigError(f"mcp_servers.{config.name}.headers.{header}: the value holds a line break")
        timeout = httpx2.Timeout(30.0, connect=config.connect_timeout, read=300.0)
        async def note_session(response: Any) -> None:  # the SDK keeps the id to itself
            server.session_id = response.headers.get("mcp-session-id") or server.session_id

        async with (
            create_mcp_http_client(headers=headers, timeout=timeout) as http,
            streamable_http_client(config.url, http_client=http) as (read_stream, write_stream),
        ):
            http.event_hooks["response"].append(note_session)
            yield _WatchedReadStream(read_stream, server), write_stream

    def _expanded(self, server: _Server, templates: Mapping[str, str], where: str) -> dict[str, str]:
        expanded: dict[str, str] = {}
        secrets: list[str] = []
        for key, template in templates.items():
            expanded[key], found = expanded_with_secrets(template, self._env, setting=f"{where}.{key}")
            secrets.extend(found)
        server.scrub.remember(secrets)
        return expanded

    # --- state and messages -----------------------------------------------------------------------------

    def _set(self, server: _Server, **changes: Any) -> None:
        with self._lock:
            before = (server.state, server.reason)
            for key, value in changes.items():
                setattr(server, key, value)
            watchers = list(self._watchers) if (server.state, server.reason) != before else []
        self._tell(watchers)

    def _tell(self, watchers: list[Callable[[], None]]) -> None:
        for callback in watchers:
            try:
                callback()
            except Exception:  # a watcher's trouble must not stop a server's supervisor
                logger.exception("an MCP health watcher failed")

    def _connect_failure(self, server: _Server, exc: BaseException) -> str:
        reason = self._reason(server, exc)
        if server.config.transport == "stdio" and server.up_since is None and _is_closed_connection(exc):
            reason = "the server process ended before it was ready"
        if server.config.transport == "stdio" and server.last_stderr:
            reason = f"{reason} (its stderr: {server.last_stderr})"
        return _one_line(reason)

    def _reason(self, server: _Server, exc: BaseException) -> str:
        return _one_line(server.scrub(_describe(exc)))


def _describe(exc: BaseException) -> str:
    """One readable cause from an exception, unwrapping the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = inner[0] if inner else exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message or f"MCP error {exc.code}"
    if isinstance(exc, ConfigError | TimeoutError | OSError | SandboxUnavailable):
        return str(exc) or type(exc).__name__
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_closed_connection(exc: BaseException) -> bool:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def _is_connection_loss(exc: BaseException) -> bool:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | httpx2.TransportError | OSError)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _REASON_CAP else flat[:_REASON_CAP - 1] + "…"


def _result(result: CallToolResult, scrub: Callable[[str], str]) -> dict[str, Any]:
    """The call's result as the gateway keeps it. An error result is scrubbed of the server's secrets like the
    hub's own errors: a server's error message is where a token it was given ends up quoted."""
    texts = []
    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        else:  # images, audio, resources: the model is told they were there
            texts.append(f"[{getattr(block, 'type', 'non-text')} content not shown]")
    text, structured = "\n".join(texts), result.structured_content
    if result.is_error:
        text = scrub(text)
        structured = _scrubbed(structured, scrub)
    return {"is_error": bool(result.is_error), "text": text, "structured": structured}


def _scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(key)): _scrubbed(item, scrub) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item, scrub) for item in value]
    return value
