"""A broken MCP server is visible (issue 21): the engine holding the lease records it down with the reason,
and `agent-console status` / `status --json` show it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
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
