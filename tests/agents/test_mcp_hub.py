"""The MCP hub against real servers: one over stdio (a child process) and one over streamable HTTP (uvicorn on
127.0.0.1), both written with the `mcp` SDK (tests/agents/mcp_servers.py)."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from console.agents.errors import CallNotSent
from console.agents.mcp import IDEMPOTENCY_META_KEY, McpHub, McpToolError
from console.agents.mcp_config import McpServerConfig
from tests.agents import mcp_servers
from tests.agents.mcp_servers import HttpServer, host_pid, read_calls, sandbox_places, serve_http, stdio_command
from tests.support import wait_until

LIMIT = 30.0
SECRET = "tok-9f8e7d6c5b4a-very-secret"


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    with serve_http("remote") as server:
        yield server


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[Callable[..., McpHub]]:
    """Hubs made by the test (their servers sandboxed, their folders under tmp_path), closed at the end whatever
    happened."""
    made: list[McpHub] = []

    def make(*configs: McpServerConfig, **options: Any) -> McpHub:
        hub = McpHub({config.name: config for config in configs}, places=sandbox_places(tmp_path), **options)
        made.append(hub)
        hub.start()
        return hub

    yield make
    for hub in made:
        hub.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local(tmp_path: Path, name: str = "local", **options: Any) -> McpServerConfig:
    return McpServerConfig(**stdio_command(name, tmp_path / f"{name}.calls"), **options)


def test_the_tools_of_a_stdio_and_an_http_server_are_listed_and_called(
    tmp_path: Path, http_server: HttpServer, hubs: Callable[..., McpHub]
) -> None:
    hub = hubs(local(tmp_path), McpServerConfig("remote", url=http_server.url))

    tools, unavailable = hub.tools()

    assert unavailable == {}
    assert hub.status() == {"local": "up", "remote": "up"}
    names = {tool.name for tool in tools}
    for server in ("local", "remote"):
        assert {f"mcp__{server}__{tool}" for tool in ("echo", "add", "whoami", "slow", "pid", "fail")} <= names
    add = next(tool for tool in tools if tool.name == "mcp__remote__add")
    assert (add.server, add.tool, add.description) == ("remote", "add", "Adds two numbers.")
    assert add.input_schema["required"] == ["a", "b"]

    for server in ("local", "remote"):
        assert hub.call(f"mcp__{server}__echo", {"text": f"hi {server}"}, idempotency_key=f"k-{server}") == {
            "is_error": False, "text": f"hi {server}", "structured": {"result": f"hi {server}"}}
        assert hub.call(f"mcp__{server}__add", {"a": 2, "b": 3}, idempotency_key="k2")["structured"] == {"result": 5}
        failed = hub.call(f"mcp__{server}__fail", {}, idempotency_key="k3")
        assert failed["is_error"] is True and "this tool always fails" in failed["text"]

    stdio_calls = read_calls(tmp_path / "local.calls")
    assert [(c["tool"], c["key"]) for c in stdio_calls] == [("echo", "k-local"), ("add", "k2"), ("fail", "k3")]
    assert [(c["tool"], c["key"]) for c in http_server.recorded()] == [("echo", "k-remote"), ("add", "k2"),
                                                                       ("fail", "k3")]
    assert IDEMPOTENCY_META_KEY == mcp_servers.IDEMPOTENCY_META_KEY


def test_unknown_tools_are_refused_without_reaching_a_server(tmp_path: Path, hubs: Callable[..., McpHub]) -> None:
    hub = hubs(local(tmp_path))

    for name in ("mcp__nowhere__echo", "mcp__local__nosuch", "send_message", "mcp__local"):
        with pytest.raises(McpToolError, match="unknown tool"):
            hub.call(name, {}, idempotency_key="k")
    assert read_calls(tmp_path / "local.calls") == []


def test_a_header_secret_reaches_the_http_server_and_nothing_else(
    tmp_path: Path, http_server: HttpServer, hubs: Callable[..., McpHub], caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"TRACKER_TOKEN": SECRET, "SHOP_TOKEN": SECRET, "PATH": os.environ["PATH"]}
    remote = McpServerConfig("remote", url=http_server.url, headers={"Authorization": "Bearer ${TRACKER_TOKEN}"})
    # A stdio server that prints its token to stderr and exits: the secret would reach the reason and the log.
    leaky = McpServerConfig("leaky", command=sys.executable, env={"SHOP_TOKEN": "${SHOP_TOKEN}"}, args=(
        "-c", "import os, sys; print('my token is', os.environ['SHOP_TOKEN'], file=sys.stderr); sys.exit(3)"))
    hub = hubs(remote, leaky, env=env)

    assert hub.call("mcp__remote__whoami", {}, idempotency_key="k1")["text"] == "seen"
    assert http_server.recorded()[-1]["authorization"] == f"Bearer {SECRET}"

    status = hub.status()
    assert status["remote"] == "up"
    assert status["leaky"].startswith(
        "down: the server process ended before it was ready (its stderr: my token is ***)")
    _tools, unavailable = hub.tools()
    with pytest.raises(McpToolError) as refused:
        hub.call("mcp__leaky__anything", {}, idempotency_key="k2")
    wait_until(lambda: "my token is ***" in caplog.text, "the child's stderr in the log")
    shown = [caplog.text, str(status), str(unavailable), str(refused.value), repr(hub), repr(remote), repr(leaky),
             capfd.readouterr().err]
    assert all(SECRET not in text for text in shown)


def test_a_variable_that_is_not_set_keeps_only_that_server_down_naming_it(
    tmp_path: Path, hubs: Callable[..., McpHub]
) -> None:
    remote = McpServerConfig("remote", url=f"http://127.0.0.1:{closed_port()}/mcp",
                             headers={"Authorization": "Bearer ${TRACKER_TOKEN}"})
    hub = hubs(local(tmp_path), remote, env={"PATH": os.environ["PATH"]})

    tools, unavailable = hub.tools()

    assert {tool.server for tool in tools} == {"local"}
    assert unavailable["remote"].startswith(
        "mcp_servers.remote.headers.Authorization: the environment variable TRACKER_TOKEN is not set; retrying in")


def test_servers_that_are_down_make_only_their_own_tools_unavailable(
    tmp_path: Path, http_server: HttpServer, hubs: Callable[..., McpHub]
) -> None:
    missing = McpServerConfig("missing", command=str(tmp_path / "no-such-program"))
    closed = McpServerConfig("closed", url=f"http://127.0.0.1:{closed_port()}/mcp")
    hub = hubs(missing, closed, McpServerConfig("remote", url=http_server.url))

    tools, unavailable = hub.tools()

    assert {tool.server for tool in tools} == {"remote"}
    assert set(unavailable) == {"missing", "closed"}
    assert "No such file or directory" in unavailable["missing"]
    assert "All connection attempts failed" in unavailable["closed"]
    assert all("retrying in" in why for why in unavailable.values())
    assert hub.status()["missing"].startswith("down: [Errno 2] No such file or directory")
    assert hub.call("mcp__remote__echo", {"text": "still here"}, idempotency_key="k")["text"] == "still here"
    with pytest.raises(McpToolError, match=r"mcp__closed__echo: MCP server closed is unavailable \(.*retrying in"):
        hub.call("mcp__closed__echo", {"text": "x"}, idempotency_key="k")


def test_a_slow_call_times_out_without_holding_up_another_servers_call(
    tmp_path: Path, http_server: HttpServer, hubs: Callable[..., McpHub]
) -> None:
    hub = hubs(local(tmp_path, call_timeout=3.0), McpServerConfig("remote", url=http_server.url))
    outcome: dict[str, Any] = {}

    def slow_call() -> None:
        try:
            hub.call("mcp__local__slow", {"seconds": 60}, idempotency_key="slow")
        except McpToolError as exc:
            outcome["error"] = str(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    wait_until(lambda: any(c["tool"] == "slow" for c in read_calls(tmp_path / "local.calls")),
               "the slow call to reach its server")

    assert hub.call("mcp__remote__echo", {"text": "fast"}, idempotency_key="fast")["text"] == "fast"
    assert caller.is_alive(), "the other server answered while the slow call was still waiting"

    caller.join(timeout=LIMIT)
    assert outcome["error"] == "mcp__local__slow: no answer from MCP server local within 3 s"
    # A slow call is not a dead server: the same session answers the next call.
    assert hub.call("mcp__local__echo", {"text": "after"}, idempotency_key="k")["text"] == "after"
    assert hub.status()["local"] == "up"


def test_a_frozen_server_is_left_out_of_the_listing_within_its_timeout(
    tmp_path: Path, http_server: HttpServer, hubs: Callable[..., McpHub]
) -> None:
    hub = hubs(local(tmp_path, list_timeout=1.0), McpServerConfig("remote", url=http_server.url))
    inner = hub.call("mcp__local__pid", {}, idempotency_key="k")["structured"]["result"]
    pid = host_pid(inner, "local")
    os.kill(pid, signal.SIGSTOP)
    try:
        tools, unavailable = hub.tools()

        assert {tool.server for tool in tools} == {"remote"}
        assert unavailable == {"local": "no tool list within 1 s"}
        assert hub.call("mcp__remote__echo", {"text": "meanwhile"}, idempotency_key="k")["text"] == "meanwhile"
    finally:
        os.kill(pid, signal.SIGCONT)
    # Frozen for a while is not dead: once it runs again, its tools are back on the same session.
    tools, unavailable = hub.tools()
    assert unavailable == {} and {tool.server for tool in tools} == {"local", "remote"}
    assert host_pid(hub.call("mcp__local__pid", {}, idempotency_key="k")["structured"]["result"], "local") == pid


def test_a_server_that_never_answers_the_handshake_is_down_after_the_connect_timeout(
    hubs: Callable[..., McpHub]
) -> None:
    marker = "never-answers-the-handshake"
    mute = McpServerConfig("mute", command=sys.executable, args=("-c", f"import time; time.sleep(60)  # {marker}"),
                           connect_timeout=0.5)
    hub = hubs(mute, backoff_base=30.0)

    assert hub.status()["mute"] == "down: did not connect within 0.5 s; retrying in 30 s"
    assert not [p for p in psutil.Process().children(recursive=True) if marker in " ".join(p.cmdline())]


def test_a_killed_server_is_restarted_with_backoff_and_works_again(
    tmp_path: Path, hubs: Callable[..., McpHub]
) -> None:
    hub = hubs(local(tmp_path), backoff_base=0.5, backoff_max=4.0)
    first = host_pid(hub.call("mcp__local__pid", {}, idempotency_key="k1")["structured"]["result"], "local")

    os.kill(first, signal.SIGKILL)

    down = wait_until(lambda: (s := hub.status()["local"]).startswith("down:") and s, "the hub to see it die")
    assert re.fullmatch(r"down: the server closed the connection; retrying in [01] s", down)
    wait_until(lambda: hub.status()["local"] == "up", "the server to be restarted")
    second = host_pid(hub.call("mcp__local__pid", {}, idempotency_key="k3")["structured"]["result"], "local")
    assert second != first
    assert not psutil.pid_exists(first)


def test_a_call_that_finds_its_server_down_connects_it_at_once_rather_than_after_the_backoff(
    tmp_path: Path, hubs: Callable[..., McpHub]
) -> None:
    """Issue 37: a server restarting when a call comes (an owner's yes resuming) is tried again for that call,
    not only a backoff later; a call that still cannot be sent says so (CallNotSent: nothing happened)."""
    hub = hubs(local(tmp_path), backoff_base=60.0, backoff_max=60.0)
    first = host_pid(hub.call("mcp__local__pid", {}, idempotency_key="k1")["structured"]["result"], "local")
    os.kill(first, signal.SIGKILL)
    down = wait_until(lambda: (s := hub.status()["local"]).startswith("down:") and s, "the hub to see it die")
    assert re.fullmatch(r"down: the server closed the connection; retrying in (60|59) s", down)

    began = time.monotonic()
    second = host_pid(hub.call("mcp__local__pid", {}, idempotency_key="k2")["structured"]["result"], "local")

    assert second != first and time.monotonic() - began < 30  # well before the 60 s backoff's end
    assert hub.status()["local"] == "up"
    assert [call["key"] for call in read_calls(tmp_path / "local.calls")] == ["k1", "k2"]


def test_a_call_to_a_server_that_cannot_start_was_not_sent(tmp_path: Path, hubs: Callable[..., McpHub]) -> None:
    hub = hubs(McpServerConfig("missing", command=str(tmp_path / "no-such-program")), backoff_base=60.0)
    with pytest.raises(CallNotSent, match=r"mcp__missing__echo: MCP server missing is unavailable \(\[Errno 2\]"):
        hub.call("mcp__missing__echo", {"text": "x"}, idempotency_key="k")


def test_an_http_server_that_goes_away_is_reconnected_when_it_is_back(hubs: Callable[..., McpHub]) -> None:
    first = HttpServer("remote")
    first.start()
    hub = hubs(McpServerConfig("remote", url=first.url), backoff_base=0.2, backoff_max=0.5)
    assert hub.call("mcp__remote__echo", {"text": "one"}, idempotency_key="k1")["text"] == "one"

    first.stop()

    with pytest.raises(McpToolError, match="mcp__remote__echo"):
        hub.call("mcp__remote__echo", {"text": "two"}, idempotency_key="k2")
    wait_until(lambda: hub.status()["remote"].startswith("down:"), "the hub to see the server gone")
    port = int(first.url.rsplit(":", 1)[1].split("/")[0])
    with serve_http("remote", port) as second:
        wait_until(lambda: hub.status()["remote"] == "up", "the hub to reconnect")
        assert hub.call("mcp__remote__echo", {"text": "three"}, idempotency_key="k3")["text"] == "three"
        assert [call["key"] for call in second.recorded()] == ["k3"]


def test_backoff_doubles_up_to_its_cap_while_a_server_keeps_failing(
    tmp_path: Path, hubs: Callable[..., McpHub], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="console.agents.mcp")
    hubs(McpServerConfig("missing", command=str(tmp_path / "no-such-program")), backoff_base=0.05, backoff_max=0.2)

    def delays() -> list[str]:
        return [r.getMessage().rpartition("retrying in ")[2] for r in caplog.records
                if r.getMessage().startswith("MCP server missing is down")]

    wait_until(lambda: len(delays()) >= 5, "five failed attempts")
    assert delays()[:5] == ["0.05 s", "0.1 s", "0.2 s", "0.2 s", "0.2 s"]


def test_close_leaves_no_server_process_and_no_thread(tmp_path: Path) -> None:
    hub = McpHub({name: local(tmp_path, name) for name in ("one", "two")}, places=sandbox_places(tmp_path))
    hub.start()
    pids = [host_pid(hub.call(f"mcp__{name}__pid", {}, idempotency_key="k")["structured"]["result"], name)
            for name in ("one", "two")]
    children = {child.pid for child in psutil.Process().children(recursive=True)}
    assert set(pids) <= children

    hub.close()

    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert not any(thread.name == "mcp-hub" for thread in threading.enumerate())
    assert hub.status() == {"one": "down: closed", "two": "down: closed"}
    with pytest.raises(McpToolError, match="closed"):
        hub.call("mcp__one__pid", {}, idempotency_key="k")


def test_a_stdio_servers_stderr_goes_to_the_debug_log_not_the_terminal(
    tmp_path: Path, hubs: Callable[..., McpHub], caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="console.agents.mcp")
    hub = hubs(local(tmp_path))

    hub.call("mcp__local__echo", {"text": "x"}, idempotency_key="k")

    line = wait_until(lambda: next((r for r in caplog.records if mcp_servers.STDERR_MARKER in r.getMessage()), None),
                      "the stderr line in the log")
    assert line.levelno == logging.DEBUG
    assert mcp_servers.STDERR_MARKER not in capfd.readouterr().err


def test_a_hub_that_is_not_started_reports_every_server_unavailable(tmp_path: Path) -> None:
    hub = McpHub({"local": local(tmp_path)}, places=sandbox_places(tmp_path))

    assert hub.tools() == ([], {"local": "the MCP hub is not started"})
    assert hub.status() == {"local": "down: not started"}
    with pytest.raises(McpToolError, match="not started"):
        hub.call("mcp__local__echo", {"text": "x"}, idempotency_key="k")
