"""The stand-in Messages API: a real HTTP server on 127.0.0.1 that plays POST /v1/messages from a script.

No internet: an agent's client is pointed at it with claude_base_url and a fake key. The `claude` fixture
(tests/agents/conftest.py) serves one for a test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web


class FakeClaude:
    """Enough of POST /v1/messages: the scripted replies in order, and every request recorded.

    Shapes from the published Messages API: a reply's stop_reason (end_turn, tool_use, max_tokens, pause_turn,
    refusal with its stop_details, ...), and errors as {"type": "error", "error": {"type", "message"}} with
    the status and, for back-pressure, a retry-after header."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []
        self.url = ""
        self.unstall = threading.Event()  # set at teardown: a stalled request then ends

    def stall(self) -> None:
        """The next request gets no answer until the test is over (for a client timeout)."""
        self.script.append((0, {}, {}))

    def reply(self, *blocks: dict[str, Any], stop: str | None = None,
              stop_details: dict[str, Any] | None = None) -> None:
        if stop is None:
            stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        n = len(self.script) + 1
        body: dict[str, Any] = {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100 + n, "output_tokens": 10 + n},
        }
        if stop_details is not None:
            body["stop_details"] = stop_details
        self.script.append((200, body, {}))

    def fail(self, status: int, kind: str, message: str, *, headers: dict[str, str] | None = None,
             error_code: str | None = None) -> None:
        error: dict[str, Any] = {"type": kind, "message": message}
        if error_code is not None:
            error["details"] = {"error_code": error_code}
        self.script.append((status, {"type": "error", "error": error, "request_id": "req_test"}, headers or {}))

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        # Older clients send the key as x-api-key, newer ones as a bearer token.
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        self.keys.append(request.headers.get("x-api-key") or bearer)
        if not self.script:
            return web.json_response({"type": "error", "error": {"type": "api_error", "message": "unscripted"}},
                                     status=500)
        status, body, headers = self.script.pop(0)
        if status == 0:
            await asyncio.get_running_loop().run_in_executor(None, self.unstall.wait, 30)
            status, body = 500, {"type": "error", "error": {"type": "api_error", "message": "stalled"}}
        return web.json_response(body, status=status, headers=headers)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool(use_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": arguments}


@contextmanager
def serve_stand_in() -> Iterator[FakeClaude]:
    """The fake server on its own loop in a thread, so an agent's blocking client can call it from tests."""
    fake = FakeClaude()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/messages", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock).start())
    fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.unstall.set()
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
