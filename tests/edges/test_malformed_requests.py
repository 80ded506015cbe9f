"""Malformed HTTP requests to the receiver (issue 37 item 4): each is answered 400 (or its connection closed) and
is one log line, counted (`receiver.malformed` in `status --json`), never aiohttp's 10-15-line traceback: anyone
who can reach the port must not be able to grow the log by a traceback a request. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from console.core import Store
from console.edges.receiver import WebhookReceiver
from tests.cli.helpers import invoke
from tests.edges.conftest import NOW

BOUND = 30.0

MALFORMED = {
    "data after Connection: close": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                     b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
    "a 64 KiB header line": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n",
    "HTTP/9.9": b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    "Content-Length: -1": b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
}


async def send_raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), BOUND)
    except ConnectionError:
        return b""
    finally:
        writer.close()


async def test_each_malformed_request_is_one_line_answered_400_and_counted_in_the_inbox(
    receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture, db_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    for what, request in MALFORMED.items():
        before = len(caplog.records)
        answer = await send_raw(receiver.port, request)
        assert answer.startswith(b"HTTP/1.0 400 Bad Request") or answer.startswith(b"HTTP/1.1 400"), (what, answer)
        said = [r for r in caplog.records[before:] if r.name.startswith(("aiohttp", "agent_console"))]
        assert [r.levelname for r in said] == ["WARNING"], (what, [r.getMessage() for r in said])
        assert not said[0].exc_info and "\n" not in said[0].getMessage()
        assert said[0].getMessage().startswith("malformed request from 127.0.0.1: "), said[0].getMessage()
    assert receiver.counts["malformed"] == len(MALFORMED)
    # In the inbox too, for `status --json` (another process): at most a second later.
    await until(lambda: counted(db_path) == len(MALFORMED))
    status = json.loads(invoke(["--db", str(db_path), "status", "--json"]).output)
    assert status["receiver"]["malformed"] == len(MALFORMED) and status["receiver"]["malformed_last_at"] == NOW
    # A good delivery still goes through.
    assert (await send_raw(receiver.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            ).startswith(b"HTTP/1.1 200")


def counted(db_path: Path) -> int:
    with Store.open(db_path, read_only=True) as store:
        return int(store.receiver_counts()["malformed"])


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, "not within the bound"
        await asyncio.sleep(0.05)  # polling interval while waiting for the condition
