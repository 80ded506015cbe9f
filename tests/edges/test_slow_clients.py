"""Slow and vanishing clients against the real receiver, over real sockets on 127.0.0.1.

The deadlines are aiohttp's and asyncio's, on the event loop's own clock, so these tests use a deadline
of one second and wait on conditions (bounded) rather than for a set time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import aiohttp
import pytest

from console.clock import ManualClock
from console.config import ConfigError, load_settings
from console.edges.connections import BACKLOG, OVER_CAP
from console.edges.receiver import WebhookReceiver, build_receiver
from tests.edges.conftest import NOW, rows, secrets_env, webhook_settings
from tests.edges.signing import SECRETS, body_for, sign

ROOT = Path(__file__).resolve().parents[2]
BOUND = 60.0  # seconds: a bound for failing, never a wait
CAP = 10
HEAD = (b"POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n")
TRICKLE_GAP = 0.05  # the trickling client's pace: one byte per gap


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND} s: {what}")
        await asyncio.sleep(0.01)  # polling interval while waiting for the condition


async def trickle(port: int, *, head_only: bool) -> bytes:
    """A request that never ends: head_only trickles its head one byte at a time; otherwise the head
    goes at once and the body trickles. Returns what the server answered once it closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = asyncio.ensure_future(reader.read())  # everything until the server closes
    pending = HEAD[:-4] + b"\r\nX-Pad: " if head_only else b""
    if not head_only:
        writer.write(HEAD)
    try:
        while not answer.done():
            writer.write(pending[:1] or b" ")
            pending = pending[1:]
            try:
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait([answer], timeout=TRICKLE_GAP)
        try:
            return await answer
        except ConnectionError:
            return b""
    finally:
        writer.close()


@pytest.fixture
async def strict_receiver(db_path: Path, clock: ManualClock) -> AsyncIterator[WebhookReceiver]:
    settings = dataclasses.replace(webhook_settings(db_path), webhook_read_timeout=1, webhook_max_connections=CAP)
    server = build_receiver(settings, clock=clock, environ=secrets_env())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def deliver(receiver: WebhookReceiver, key: str) -> tuple[int, object]:
    body = body_for("github", key)
    async with aiohttp.ClientSession() as http, http.post(
        f"{receiver.url}/hooks/github", data=body, headers=sign("github", body, now=NOW, delivery_id=key)
    ) as response:
        return response.status, await response.json()


async def test_tricklers_are_cut_off_and_a_delivery_then_gets_through(
    strict_receiver: WebhookReceiver, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_console.webhooks")
    port = strict_receiver.port
    gate = strict_receiver.gate
    assert gate is not None
    tricklers = [asyncio.ensure_future(trickle(port, head_only=n % 2 == 0)) for n in range(CAP)]
    await until(lambda: gate.open == CAP, "the first tricklers took every connection")
    tricklers += [asyncio.ensure_future(trickle(port, head_only=n % 2 == 0)) for n in range(2 * CAP)]
    answers = await asyncio.wait_for(asyncio.gather(*tricklers), BOUND)  # the server ends every one of them
    assert gate.refused == 2 * CAP  # over the cap: a 503 and closed at once
    assert gate.timed_out == CAP // 2  # no whole head in time: closed
    assert strict_receiver.counts["timeout"] == CAP // 2  # no whole body in time: 408, then closed
    assert sum(a.startswith(b"HTTP/1.1 408") for a in answers) == CAP // 2
    # A refused client that had sent bytes may see a reset instead of the 503 (its bytes went unread).
    assert sum(a.startswith(b"HTTP/1.1 503") or a == b"" for a in answers) == 2 * CAP + CAP // 2
    await until(lambda: gate.open == 0, "every connection closed")
    assert await deliver(strict_receiver, "after-the-flood") == (200, {"stored": True})
    assert rows(db_path) == [("github", "after-the-flood")]

    gate.close()  # says what the rate limit held back
    lines = [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.exc_info]
    refusal_lines = [line for line in lines if "refused" in line and "webhook_max_connections" in line]
    said = sum(int(m.group(1)) if (m := re.match(r"refused (\d+) more", line)) else 1 for line in refusal_lines)
    assert said == 2 * CAP and len(refusal_lines) <= 3  # every refusal accounted for, in a few lines


async def test_a_client_that_hangs_up_mid_body_is_one_line(
    receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
    writer.write(HEAD + b'{"type": "no')
    await writer.drain()
    await until(lambda: receiver.gate is not None and receiver.gate.open == 1, "the request reached the receiver")
    writer.close()
    await until(lambda: receiver.counts["hung_up"] == 1, "the hang-up was noticed")
    await until(lambda: receiver.gate is not None and receiver.gate.open == 0, "the connection was released")
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    about_it = [r.getMessage() for r in caplog.records if "hung_up" in r.getMessage()]
    assert len(about_it) == 1 and "closed the connection before its body was whole" in about_it[0]


def server_side_sockets(port: int) -> int:
    """How many connected sockets on port's server side this process holds a descriptor for: read
    from the kernel (/proc), so it counts what accept() took, whatever the receiver thinks it holds."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, state, inode = int(fields[1].split(":")[1], 16), fields[3], fields[9]
        if local_port == port and state != "0A":  # 0A: listening
            inodes.add(f"socket:[{inode}]")
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # closed since it was listed
            held += os.readlink(f"/proc/self/fd/{fd}") in inodes
    return held


async def test_a_flood_of_connections_never_holds_more_descriptors_than_the_cap_allows(
    strict_receiver: WebhookReceiver, db_path: Path
) -> None:
    port = strict_receiver.port
    gate = strict_receiver.gate
    assert gate is not None
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(CAP)]
    await until(lambda: gate.open == CAP, "the first connections took every place")
    flood: list[socket.socket] = []
    most = 0
    try:
        # Each round queues a listen backlog of connections in the kernel, then lets the loop run one
        # iteration (sleep(0) yields exactly once): a loop that accepts a backlog every iteration
        # while refusing and closing lags two iterations behind holds several backlogs at once.
        for _round in range(3):
            for _ in range(BACKLOG):
                client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                client.setblocking(False)
                client.connect_ex(("127.0.0.1", port))
                flood.append(client)
            await asyncio.sleep(0)
            most = max(most, server_side_sockets(port))
        for _tick in range(6):  # and the iterations in which the last of them are refused and closed
            await asyncio.sleep(0)
            most = max(most, server_side_sockets(port))
        assert CAP < most <= CAP + OVER_CAP
    finally:
        for client in flood:
            client.close()
        for _reader, writer in idle:
            writer.close()
    await until(lambda: gate.open == 0 and server_side_sockets(port) == 0, "every connection closed")
    assert await deliver(strict_receiver, "after-the-flood") == (200, {"stored": True})
    assert rows(db_path) == [("github", "after-the-flood")]


async def test_a_head_read_as_its_deadline_falls_due_is_answered(
    strict_receiver: WebhookReceiver, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = strict_receiver.gate
    assert gate is not None
    # A loop that has fallen behind: the head deadline is already due in the loop iteration that
    # first reads the request (sent whole before the receiver accepts it).
    gate.head_timeout = 0
    body = body_for("github", "on-time")
    headers = sign("github", body, now=NOW, delivery_id="on-time")
    request = (b"POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               + b"".join(f"{name}: {value}\r\n".encode() for name, value in headers.items())
               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    client = socket.create_connection(("127.0.0.1", strict_receiver.port))
    client.sendall(request)
    reader, writer = await asyncio.open_connection(sock=client)
    try:
        answer = await asyncio.wait_for(reader.read(), BOUND)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert gate.timed_out == 0
    assert rows(db_path) == [("github", "on-time")]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_the_deadline_and_the_cap_are_settings(tmp_path: Path) -> None:
    env = {"AGENT_CONSOLE_WEBHOOK_READ_TIMEOUT": "3", "AGENT_CONSOLE_WEBHOOK_MAX_CONNECTIONS": "7"}
    settings = load_settings(None, env=env)
    assert (settings.webhook_read_timeout, settings.webhook_max_connections) == (3, 7)
    with pytest.raises(ConfigError, match=r"webhook_read_timeout .* must be at least 1"):
        load_settings(None, env={"AGENT_CONSOLE_WEBHOOK_READ_TIMEOUT": "0"})


# --- the audit's case: a real process with a 256-descriptor limit -------------------------------

CONFIG = """
[webhooks]
host = "127.0.0.1"
port = 0
[webhooks.sources.github]
verifier = "github"
secret_env = "SLOW_TEST_GITHUB_SECRET"
"""


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[subprocess.Popen[str], list[str], str, int]]:
    """`agent-console serve` under a 256-descriptor limit: (the process, its log lines so far, its
    address, its port). Stopped with SIGTERM at the end, which it must obey."""
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = dict(os.environ, PYTHONPATH=str(ROOT), SLOW_TEST_GITHUB_SECRET=SECRETS["github"],
               AGENT_CONSOLE_WEBHOOK_READ_TIMEOUT="1",
               AGENT_CONSOLE_WEBHOOK_MAX_CONNECTIONS="1000")  # more than 256 descriptors can hold
    proc = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "--config", str(config), "serve"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=_limit_descriptors)
    log: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        await until(lambda: proc.poll() is not None or "listening on http" in "".join(log), "the receiver started")
        found = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", "".join(log))
        assert found is not None, "".join(log)
        yield proc, log, found.group(1), int(found.group(2))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        reader.join(timeout=10)


def deliver_to(address: str, key: str) -> int:
    body = body_for("github", key)
    return post(f"{address}/hooks/github", body, sign("github", body, now=int(time.time()), delivery_id=key))


async def test_a_serve_process_with_256_descriptors_outlasts_300_tricklers(tmp_path: Path) -> None:
    async with serving(tmp_path) as (_proc, log, address, port):
        tricklers = [asyncio.ensure_future(trickle(port, head_only=n % 2 == 0)) for n in range(300)]
        await asyncio.wait_for(asyncio.gather(*tricklers), BOUND)  # each one refused or cut off
        status = await asyncio.to_thread(deliver_to, address, "through")
        assert status == 200, "".join(log[-20:])
    text = "".join(log)
    assert "Traceback" not in text and "Too many open files" not in text, text[-3000:]
    assert "webhook_max_connections = 1000 is more than this process's open-file limit (256)" in text
    # One line per request answered (the 408s), and a few rate-limited lines for 300 connections.
    assert len([line for line in log if "verdict=" not in line]) < 20, text[-3000:]


async def test_an_accept_the_system_refuses_is_one_line_and_serving_goes_on(tmp_path: Path) -> None:
    async with serving(tmp_path) as (proc, log, address, port):
        # Whatever else the process comes to hold open, its descriptors can still run out: leave it
        # room for two connections only.
        held = len(os.listdir(f"/proc/{proc.pid}/fd"))
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (held + 2, 256))
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
        try:
            await until(lambda: "could not accept a connection" in "".join(log) or "Traceback" in "".join(log),
                        "the failed accept was said")
        finally:
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (256, 256))
            for _reader, writer in clients:
                writer.close()
        status = await asyncio.to_thread(deliver_to, address, "after-the-shortage")
        assert status == 200, "".join(log[-20:])
    text = "".join(log)
    assert "Traceback" not in text, text[-3000:]
    said = [line for line in log if "could not accept a connection" in line]
    assert said[0].rstrip().endswith(f"could not accept a connection: Too many open files (open-file limit "
                                     f"{held + 2}); trying again in 1 s")
    assert len(said) <= 3, said
