"""A broken MCP server is visible (issue 21): the engine holding the lease records it down with the reason,
and `agent-console status` / `status --json` show it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
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


async def test_a_server_that_cannot_start_shows_down_in_status(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-interpreter"
    servers = {"shop": {"command": str(missing), "args": ["-m", "console.examples.shop_server"]}}
    db = tmp_path / "inbox.db"
    settings = Settings(db=db, mcp_servers=servers, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {"text": "please look up order 881"})
        (shop,) = await read_until(engine, lambda s: [t for t in s.tool_health() if t["state"] == "down"],
                                   "the shop server recorded down")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        said = subprocess.run([sys.executable, "-m", "console", "--db", str(db), "status", "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        tools = json.loads(said.stdout)["tools"]
        assert [(t["server"], t["state"]) for t in tools] == [("shop", "down")]
        assert tools[0]["reason"] and tools[0]["reason"] == shop["reason"]
        assert "retrying in" not in tools[0]["reason"]
        text = subprocess.run([sys.executable, "-m", "console", "--db", str(db), "status"], env=env,
                              capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"tools      shop down — {shop['reason']} — retrying" in text
    finally:
        await engine.stop()


async def test_tool_health_is_written_when_the_engine_takes_the_lease_before_any_run(tmp_path: Path) -> None:
    """The console's engine (its agent built as it starts) records a server that cannot start with nothing
    in the inbox: the owner sees it before the first chat quietly becomes "Noted"."""
    shop = {"command": str(tmp_path / "no-such-interpreter"), "args": ["-m", "console.examples.shop_server"]}
    servers = {"shop": shop}
    settings = Settings(db=tmp_path / "inbox.db", mcp_servers=servers, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False,
                          late_agent=True)
    await engine.start()
    try:
        (down,) = await read_until(engine, lambda s: [t for t in s.tool_health() if t["state"] == "down"],
                                   "the shop server recorded down with no run")
        assert down["server"] == "shop" and down["reason"]
        assert engine.worker.runs == 0
    finally:
        await engine.stop()


async def test_a_server_that_goes_down_while_idle_is_recorded_without_a_run(tmp_path: Path) -> None:
    echo = {"command": sys.executable, "args": [str(mcp_servers.THIS_FILE), "echo"],
            "env": {"CALL_LOG": str(tmp_path / "mcp-data" / "echo" / "calls.jsonl")}}
    settings = Settings(db=tmp_path / "inbox.db", mcp_servers={"echo": echo}, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await read_until(engine, lambda s: [t for t in s.tool_health() if t["state"] == "up"], "echo recorded up")
        hub = engine.agent.tools.mcp  # type: ignore[attr-defined]
        said = await asyncio.to_thread(hub.call, "mcp__echo__pid", {}, idempotency_key="which-process")
        os.kill(mcp_servers.host_pid(int(said["text"]), "echo"), signal.SIGKILL)
        (down,) = await read_until(engine, lambda s: [t for t in s.tool_health() if t["state"] == "down"],
                                   "echo recorded down after its process died")
        assert down["reason"]
        assert engine.worker.runs == 0
    finally:
        await engine.stop()


async def test_the_built_in_example_shop_still_starts_on_first_use(tmp_path: Path) -> None:
    """With no [mcp_servers] the example shop is not started with the lease (it costs the MCP SDK's import and a
    process): taking the lease records no tool health."""
    settings = Settings(db=tmp_path / "inbox.db", instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        await read_until(engine, lambda s: s.lease() is not None, "the lease held")
        await engine.ingest("chat", "m1", {"text": "hello"})
        await read_until(engine, lambda s: s.counts()["done"] == 1, "the chat answered")
        assert engine.agent.tools.mcp.status() == {"shop": "down: not started"}  # type: ignore[attr-defined]
        assert await engine.read(lambda s: s.tool_health()) == []
    finally:
        await engine.stop()
