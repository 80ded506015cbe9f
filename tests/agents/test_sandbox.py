"""Tools in a box (issue 33): stdio MCP servers started by the hub under real bubblewrap, with the engine's egress
proxy as their only way out. A hostile server (tests/agents/hostile_server.py, the `mcp` SDK) tries to read the
owner's key, the inbox and the secrets file, to write in the home and /etc, to read the engine's variables, to
connect around the proxy, to reach a host it was not given, and to leave a process behind."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from console.agents.egress import host_allowed
from console.agents.mcp import McpHub
from console.agents.mcp_config import McpServerConfig
from console.agents.sandbox import SandboxPlaces, owner_homes, places_for
from console.config import Settings
from tests.agents import hostile_server
from tests.agents.mcp_servers import REPO, read_calls, stdio_command
from tests.support import wait_until

ENGINE_SECRET = "engine-only-value-7f3a"
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY----- planted"


class Allowed(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the allowed host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def allowed_site() -> Iterator[int]:
    """The host the hostile server may reach ("allowed.test"), a real HTTP server on 127.0.0.1."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Allowed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture
def outside_listener() -> Iterator[socket.socket]:
    """A listener on the machine's 127.0.0.1, outside any sandbox."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


class Machine:
    """A temp home with a planted key, an inbox and a secrets file, and the environment the engine runs in."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        (self.home / ".ssh").mkdir(parents=True)
        self.key = self.home / ".ssh" / "id_rsa"
        self.key.write_text(KEY_TEXT, encoding="utf-8")
        self.inbox = root / "inbox" / "inbox.db"
        self.inbox.parent.mkdir()
        self.inbox.write_text("the inbox", encoding="utf-8")
        self.secrets = root / "config" / "secrets.env"
        self.secrets.parent.mkdir()
        self.secrets.write_text("TELEGRAM_TOKEN=secret", encoding="utf-8")
        self.env = {"HOME": str(self.home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8",
                    "ENGINE_SECRET": ENGINE_SECRET}
        self.settings = Settings(db=self.inbox, webhooks={"secrets_file": str(self.secrets)})
        self.places = places_for(self.settings, self.env)


def mapped(ports: dict[str, int]) -> Callable[[str, int], Any]:
    """The egress proxy's way out in these tests: names mapped to local servers, nothing else reachable."""
    async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if host not in ports:
            raise OSError(f"{host} is not mapped in this test")
        return await asyncio.open_connection("127.0.0.1", ports[host])
    return connect


def hostile_config(**options: Any) -> McpServerConfig:
    return McpServerConfig("hostile", command=sys.executable, args=(str(REPO / "tests/agents/hostile_server.py"),),
                           read_paths=(REPO,), connect_timeout=30.0, **options)


def forked_children() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if hostile_server.FORK_MARKER in process.cmdline():
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_hostile_server_gets_nothing_it_was_not_given(
    tmp_path: Path, allowed_site: int, outside_listener: socket.socket
) -> None:
    machine = Machine(tmp_path)
    hub = McpHub({"hostile": hostile_config(allow_hosts=("allowed.test",))}, env=machine.env, places=machine.places,
                 egress_connect=mapped({"allowed.test": allowed_site}))
    hub.start()
    try:
        assert hub.status() == {"hostile": "up"}
        result = hub.call("mcp__hostile__attempt", {
            "reads": {"key": str(machine.key), "inbox": str(machine.inbox), "secrets": str(machine.secrets)},
            "writes": {"home": str(machine.home / "dropped"), "etc": "/etc/dropped"},
            "variable": "ENGINE_SECRET", "port": outside_listener.getsockname()[1],
            "fetch": {"allowed": "http://allowed.test/", "refused": "http://refused.test/"},
            "tunnel": "allowed.test:443",
        }, idempotency_key="k")
        report = result["structured"]["result"] if "result" in result["structured"] else result["structured"]

        forbidden = ["read key", "read inbox", "read secrets", "write home", "write etc", "env", "connect",
                     "fetch refused"]
        assert {name: report[name]["ok"] for name in forbidden} == dict.fromkeys(forbidden, False), report
        assert "No such file or directory" in report["read key"]["detail"]
        assert "Connection refused" in report["connect"]["detail"]
        assert "403" in report["fetch refused"]["detail"]
        assert report["fetch allowed"] == {"ok": True, "detail": "hello from the allowed host"}
        assert report["tunnel"] == {"ok": True, "detail": "hello from the allowed host"}
        assert report["home"]["detail"] == str(machine.places.default_data_dir("hostile"))
        assert not (machine.home / "dropped").exists() and not Path("/etc/dropped").exists()
        assert KEY_TEXT not in json.dumps(result)
        assert report["fork"]["ok"] is True
        wait_until(forked_children, "the forked child to be running")

        assert hub.boxes() == {"hostile": ("on", (("refused.test:80", 1),))}
        data_dir = machine.places.default_data_dir("hostile")
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    finally:
        hub.close()
    assert forked_children() == [], "a process the server forked outlived it"


def test_a_machine_without_user_namespaces_does_not_start_the_server(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    bwrap = fake / "bwrap"
    bwrap.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
                     encoding="utf-8")
    bwrap.chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(tmp_path / "home")}
    places = SandboxPlaces(data_root=tmp_path / "mcp-data", homes=owner_homes(env), hidden=())
    boxed = McpServerConfig(**stdio_command("boxed", tmp_path / "boxed" / "calls"))
    bare = McpServerConfig(**{**stdio_command("bare", tmp_path / "bare" / "calls"), "sandbox": False})
    (tmp_path / "bare").mkdir()  # a bare server's data_dir is not made for it: it may write anywhere
    hub = McpHub({"boxed": boxed, "bare": bare}, env=env, places=places, backoff_base=30.0)
    hub.start()
    try:
        status = hub.status()
        assert status["boxed"].startswith(
            "down: the sandbox cannot start: bwrap: setting up uid map: Permission denied: allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1; Ubuntu: kernel.apparmor_restrict_unprivileged_"
            "userns=0), or set sandbox = false in [mcp_servers.boxed] to run it bare; retrying in")
        assert not (tmp_path / "boxed").exists(), "the server was started (or its folder made) without a sandbox"
        # sandbox = false runs bare, and says so.
        assert status["bare"] == "up"
        assert hub.call("mcp__bare__echo", {"text": "bare"}, idempotency_key="k")["text"] == "bare"
        assert [call["tool"] for call in read_calls(tmp_path / "bare" / "calls")] == ["echo"]
        assert hub.boxes() == {"boxed": ("on", ()), "bare": ("off", ())}
    finally:
        hub.close()


def test_a_machine_without_bwrap_does_not_start_the_server(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path / "home")}
    places = SandboxPlaces(data_root=tmp_path / "mcp-data", homes=owner_homes(env), hidden=())
    hub = McpHub({"boxed": McpServerConfig(**stdio_command("boxed", tmp_path / "boxed" / "calls"))}, env=env,
                 places=places, backoff_base=30.0)
    hub.start()
    try:
        assert hub.status()["boxed"].startswith(
            "down: the sandbox cannot start: bubblewrap (bwrap) is not installed: install bubblewrap (Debian/Ubuntu: "
            "apt install bubblewrap")
    finally:
        hub.close()


def test_a_command_inside_the_hidden_home_is_named_with_what_to_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    tool = home / "bin" / "my-server"
    tool.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    tool.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    places = SandboxPlaces(data_root=tmp_path / "mcp-data", homes=owner_homes(env), hidden=())
    hub = McpHub({"mine": McpServerConfig("mine", command=str(tool))}, env=env, places=places, backoff_base=30.0)
    hub.start()
    try:
        assert hub.status()["mine"].startswith(
            f"down: the command {tool} is in {home}, which the sandbox hides: add its installation's folder to "
            "mcp_servers.mine.read_paths")
    finally:
        hub.close()


@pytest.mark.parametrize(("host", "port", "allowed"), [
    ("api.github.com", 443, True), ("api.github.com", 80, True), ("api.github.com", 22, False),
    ("API.GitHub.com.", 443, True), ("github.com", 443, False), ("a.example.org", 443, True),
    ("a.b.example.org", 80, True), ("example.org", 443, False), ("badexample.org", 443, False),
    ("shop.test", 8443, True), ("shop.test", 443, False),
])
def test_the_allow_list_names_hosts_subdomains_and_ports(host: str, port: int, allowed: bool) -> None:
    assert host_allowed(host, port, ("api.github.com", "*.example.org", "shop.test:8443")) is allowed
