"""Real MCP servers for the hub's tests, written with the `mcp` SDK.

- over stdio: this file run as a program (`python tests/agents/mcp_servers.py NAME`), recording every call it
  receives as a JSON line in $CALL_LOG (and its process id in $START_LOG, if set, as it starts), so a test sees
  what reached the server, from another process (with `--http PORT` after the name, the same program serves
  streamable HTTP on 127.0.0.1:PORT);
- over streamable HTTP: `serve_http(NAME)`, the SDK's app under uvicorn on 127.0.0.1 with a free port, in a
  thread of the test process, recording calls in memory.

Both offer the same tools: echo, add (structured), whoami (the idempotency key and the Authorization header it
was sent), slow (sleeps), pid (the server's process id), fail (an error result), leak (an error result quoting
its $ECHO_TOKEN, as a careless server might); and a small shop for the provenance tests: lookup_order (its
result carries a customer's note, `customer_note`, which an attacker writes), act (a world-changing call), stock
(annotated read-only, closed-world) and search (annotated open-world); and for the outcome tests: refund (a
world-changing call that never de-duplicates: recorded before it acts, then it sleeps `seconds`, or
$REFUND_SECONDS), put (the same, annotated idempotentHint) and big (a result of `size` characters). Over stdio
only: crash (recorded, then the server process dies mid-call).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

if TYPE_CHECKING:
    from console.agents.sandbox import SandboxPlaces

THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parents[2]  # shown to sandboxed servers: a checkout may live in the owner's home
IDEMPOTENCY_META_KEY = "agent-console/idempotency-key"
STDERR_MARKER = "stderr line from the echo tool"


def build(name: str, record: Callable[[dict[str, Any]], None], customer_note: str = "", *,
          may_exit: bool = False) -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    def seen(tool: str, ctx: Context, **details: Any) -> None:
        meta = ctx.request_context.meta or {}
        headers = ctx.headers or {}
        record({"tool": tool, "key": meta.get(IDEMPOTENCY_META_KEY), "traceparent": meta.get("traceparent"),
                "authorization": headers.get("authorization"), **details})

    @server.tool()
    def echo(text: str, ctx: Context) -> str:
        """Says the text back."""
        seen("echo", ctx, text=text)
        print(STDERR_MARKER, file=sys.stderr, flush=True)
        return text

    @server.tool()
    def add(a: int, b: int, ctx: Context) -> int:
        """Adds two numbers."""
        seen("add", ctx)
        return a + b

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Reports that the call arrived."""
        seen("whoami", ctx)
        return "seen"

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """Answers after the given seconds."""
        seen("slow", ctx, seconds=seconds)
        await anyio.sleep(seconds)
        return "done"

    @server.tool()
    def pid(ctx: Context) -> int:
        """The server's process id."""
        seen("pid", ctx)
        return os.getpid()

    @server.tool()
    def fail(ctx: Context) -> str:
        """Always fails."""
        seen("fail", ctx)
        raise ToolError("this tool always fails")

    @server.tool()
    def leak(ctx: Context) -> str:
        """Fails, quoting its token."""
        seen("leak", ctx)
        raise ToolError(f"the token {os.environ.get('ECHO_TOKEN', '(none)')} was refused")

    @server.tool()
    def lookup_order(order: str, ctx: Context) -> str:
        """Looks up an order, with the customer's note on it."""
        seen("lookup_order", ctx, order=order)
        return f"Order {order}: shipped. Customer note: {customer_note}"

    @server.tool()
    def act(order: str | int, ctx: Context, amount: int = 0) -> str:
        """Changes the world: refunds, pays, deletes (every call is recorded)."""
        seen("act", ctx, order=order, amount=amount)
        return f"acted on {order}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def stock(item: str, ctx: Context) -> str:
        """How many of an item are in stock (read-only, the shop's own data)."""
        seen("stock", ctx, item=item)
        return f"{item}: 4 in stock"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def search(query: str, ctx: Context) -> str:
        """Searches the web (read-only, open-world)."""
        seen("search", ctx, query=query)
        return f"Results for {query}: {customer_note}"
    calls = {"put": 0, "refund": 0}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=False))
    async def refund(order: str, ctx: Context, seconds: float | None = None, first_seconds: float = 0) -> str:
        """Refunds an order (every call is a refund: this server never de-duplicates); it answers after
        `seconds` (or $REFUND_SECONDS), the first call in this process after first_seconds more."""
        seen("refund", ctx, order=order)
        calls["refund"] += 1
        delay = float(os.environ.get("REFUND_SECONDS", "0")) if seconds is None else seconds
        await anyio.sleep(delay + (first_seconds if calls["refund"] == 1 else 0))
        return f"refunded order {order}"

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    async def put(setting: str, ctx: Context, first_seconds: float = 0) -> str:
        """Sets a value (idempotent); the first call in this process answers after first_seconds."""
        seen("put", ctx, setting=setting)
        calls["put"] += 1
        if calls["put"] == 1:
            await anyio.sleep(first_seconds)
        return f"{setting} is set"

    @server.tool()
    def big(size: int, ctx: Context) -> str:
        """A result of `size` characters."""
        seen("big", ctx, size=size)
        return "x" * size

    if may_exit:
        @server.tool()
        def crash(order: str, ctx: Context) -> str:
            """Does the work (records it), then the server process dies before it answers."""
            seen("crash", ctx, order=order)
            os._exit(17)

    return server


def stdio_command(name: str, call_log: Path) -> dict[str, Any]:
    """McpServerConfig keyword arguments for this file as a stdio server writing its calls to call_log, in its
    sandbox: call_log's folder is its data_dir (its one writable folder), the checkout is shown to it. 30 s to
    connect: this server's start is mostly the SDK's import, which took over 10 s on 2 cores shared by eight lanes."""
    return {"name": name, "command": sys.executable, "args": (str(THIS_FILE), name),
            "env": {"CALL_LOG": str(call_log)}, "data_dir": call_log.parent, "read_paths": (REPO,),
            "connect_timeout": 30.0}


def sandbox_places(root: Path) -> SandboxPlaces:
    """What a test's sandboxes hide and where their folders go: all under root (never the machine's own)."""
    from console.agents.sandbox import SandboxPlaces, owner_homes  # not when this file runs as a server

    return SandboxPlaces(data_root=root / "mcp-data", homes=owner_homes(os.environ),
                         hidden=(root / "inbox", root / "config"))


def host_pid(inner: int, name: str) -> int:
    """The process id, as this machine sees it, of this file's server `name` that answers `inner` from its pid
    tool (inside its sandbox it has a PID namespace of its own, where it is 2)."""
    import psutil

    for process in psutil.Process().children(recursive=True):
        try:
            if process.cmdline()[1:3] != [str(THIS_FILE), name]:
                continue
            status = Path(f"/proc/{process.pid}/status").read_text(encoding="ascii")
        except (psutil.Error, OSError):
            continue
        spaced = next(line for line in status.splitlines() if line.startswith("NSpid:")).split()
        if int(spaced[-1]) == inner:
            return process.pid
    raise LookupError(f"no process of server {name} answers to pid {inner}")


def read_calls(call_log: Path) -> list[dict[str, Any]]:
    if not call_log.exists():
        return []
    return [json.loads(line) for line in call_log.read_text(encoding="utf-8").splitlines() if line.strip()]


class HttpServer:
    def __init__(self, name: str, port: int = 0, customer_note: str = "") -> None:
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        app = build(name, self._record, customer_note).streamable_http_app()
        self._uvicorn = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._uvicorn.run, name=f"mcp-http-{name}", daemon=True)
        self.url = ""

    def _record(self, call: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(call)

    def recorded(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.calls)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started:
            assert self._thread.is_alive(), "the HTTP MCP server did not start"
            assert time.monotonic() < deadline, "the HTTP MCP server did not start within 30 s"
            time.sleep(0.02)  # polling interval of a condition
        port = self._uvicorn.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join(timeout=30)


@contextmanager
def serve_http(name: str, port: int = 0, customer_note: str = "") -> Iterator[HttpServer]:
    server = HttpServer(name, port, customer_note)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    name = sys.argv[1]
    call_log = Path(os.environ["CALL_LOG"])

    def record(call: dict[str, Any]) -> None:
        with call_log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(call) + "\n")

    started = os.environ.get("START_LOG")
    if started:  # a test that must see whether the server was started at all, called or not
        with Path(started).open("a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
    server = build(name, record, os.environ.get("CUSTOMER_NOTE", ""), may_exit=True)
    if len(sys.argv) > 3 and sys.argv[2] == "--http":  # over streamable HTTP, in a process a test can kill
        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
    else:
        serve_stdio(server)


def serve_stdio(server: MCPServer) -> NoReturn:
    """Serve over stdio until the client closes stdin, then end the process at once. The interpreter's own
    teardown (the SDK's thousands of pydantic classes) took 0.4-0.6 s of CPU after every server's last answer, past
    the client's 2 s grace on a loaded machine (then the SDK terminates the server): every hub's close waited it out.
    Nothing is left to finish: the call logs are closed after each line, stdout and stderr are flushed here."""
    server.run(transport="stdio")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
