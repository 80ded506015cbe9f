"""Tools in a box, seen from outside (issue 33): the engine starts a configured server in its sandbox and one with
sandbox = false bare; the hosts the sandboxed one was refused are counted and named in `status --json`
(tools[].sandbox, tools[].refused_hosts), the `status` text and the audit trail."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from tests.agents import mcp_servers
from tests.support import read_until

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_790_000_000


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_refused_hosts_and_a_bare_server_show_in_status_and_the_audit_trail(tmp_path: Path) -> None:
    hostile = {"command": sys.executable, "args": [str(ROOT / "tests" / "agents" / "hostile_server.py")],
               "read_paths": [str(ROOT)], "allow_hosts": ["api.example.org"], "connect_timeout": 30}
    bare = {"command": sys.executable, "args": [str(mcp_servers.THIS_FILE), "bare"], "sandbox": False,
            "env": {"CALL_LOG": str(tmp_path / "bare.calls")}, "connect_timeout": 30}
    db = tmp_path / "inbox.db"
    settings = Settings(db=db, mcp_servers={"hostile": hostile, "bare": bare}, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await read_until(engine, lambda s: len([t for t in s.tool_health() if t["state"] == "up"]) == 2 or None,
                         "both servers recorded up")
        hub = engine.agent.tools.mcp  # type: ignore[attr-defined]
        said = await asyncio.to_thread(hub.call, "mcp__hostile__attempt", {
            "reads": {}, "writes": {}, "variable": "PYTHONPATH", "port": closed_port(),
            "fetch": {"refused": "http://refused.test/"}, "tunnel": "refused.test:443"}, idempotency_key="k")
        assert said["structured"]["fetch refused"]["ok"] is False
        (hostile_health,) = await read_until(engine, lambda s: [t for t in s.tool_health()
                                                                if t["server"] == "hostile" and t["refused_hosts"]],
                                             "the refused hosts recorded")
        assert hostile_health["refused_hosts"] == [{"host": "refused.test:443", "count": 1},
                                                   {"host": "refused.test:80", "count": 1}]
    finally:
        await engine.stop()

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    status = subprocess.run([sys.executable, "-m", "console", "--db", str(db), "status", "--json"], env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    tools = {tool["server"]: tool for tool in json.loads(status.stdout)["tools"]}
    assert {name: (tool["state"], tool["sandbox"]) for name, tool in tools.items()} == {
        "bare": ("up", "off"), "hostile": ("up", "on")}
    assert tools["hostile"]["refused_hosts"] == [{"host": "refused.test:443", "count": 1},
                                                 {"host": "refused.test:80", "count": 1}]
    text = subprocess.run([sys.executable, "-m", "console", "--db", str(db), "status"], env=env,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "tools      bare runs bare (sandbox = false)" in text
    assert "tools      hostile refused 2 connections: refused.test:443, refused.test:80" in text
    audit = subprocess.run([sys.executable, "-m", "console", "--db", str(db), "audit", "--json"], env=env,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [row for row in json.loads(audit) if row["kind"] == "egress"]
    assert sorted(row["detail"] for row in rows) == [
        "MCP server hostile tried to reach refused.test:443, which its allow_hosts does not name: refused (1 more)",
        "MCP server hostile tried to reach refused.test:80, which its allow_hosts does not name: refused (1 more)"]
    assert {row["tool"] for row in rows} == {"mcp__hostile"}
