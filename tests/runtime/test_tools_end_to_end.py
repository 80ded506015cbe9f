"""Tools end to end (issue 9): the built-in agent and the example shop MCP server it uses by default, the
Claude agent against MCP servers, a crash between a tool's answer and its commit, and secrets from ${VAR}."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.runtime.engine import Engine
from tests.agents.mcp_servers import read_calls, serve_http
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.core.workers import spawn
from tests.support import inbox_until, read_until, wait_until

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_790_000_000


def shop_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture
async def offline(tmp_path: Path) -> AsyncIterator[Engine]:
    """The engine as a new user gets it: the built-in agent, the example shop server, the demo policy."""
    settings = Settings(db=tmp_path / "inbox.db", approval_expiry=600, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


async def test_the_built_in_agent_looks_up_at_once_and_refunds_only_on_yes(offline: Engine, tmp_path: Path) -> None:
    state = tmp_path / "mcp-data" / "shop" / "shop.json"
    await offline.ingest("chat", "m1", {"text": "please look up order 881"})
    sent = await read_until(offline, lambda s: [m.body for m in s.outbox_messages()])
    assert sent[0].startswith('mcp__shop__lookup_order(order="881"): ') and "Ada Lovelace" in sent[0]

    await offline.ingest("chat", "m2", {"text": "refund order 881 please"})
    (approval,) = await read_until(offline, lambda s: s.pending_approvals())
    assert (approval.tool, approval.arguments) == ("mcp__shop__refund", {"order": "881"})
    assert approval.action == 'mcp__shop__refund(order="881")'
    assert shop_state(state)["calls"].get("mcp__shop__refund", shop_state(state)["calls"].get("refund")) is None
    assert await offline.answer(approval.request_id, "yes") == "yes"
    done = await read_until(offline, lambda s: [m.body for m in s.outbox_messages() if m.body.startswith("Done")])
    assert f"Done: mcp__shop__refund(order=\"881\") (approved, {approval.request_id})" in done[0]
    after = shop_state(state)
    assert after["calls"]["refund"] == 1 and after["orders"]["881"]["refunded"] == 42.5
    step = await offline.read(lambda s: s.journal_step(f"tool:{approval.request_id}"))
    assert step.state == "committed" and step.executions == 1


async def test_the_claude_agent_never_reaches_a_denied_tool(tmp_path: Path, claude: FakeClaude,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    state = tmp_path / "mcp-data" / "shop" / "shop.json"
    servers = {"shop": {"command": sys.executable, "args": ["-m", "console.examples.shop_server"],
                        "env": {"SHOP_STATE": str(state)}}}
    settings = Settings(db=tmp_path / "inbox.db", agent="claude", claude_base_url=claude.url, mcp_servers=servers,
                        permissions={"allow": ["send_message", "mcp__shop__lookup_*"], "deny": ["mcp__shop__delete_*"]},
                        instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        claude.reply(tool("t1", "mcp__shop__delete_order", order="882"), tool("t2", "mcp__shop__lookup_order",
                                                                               order="882"))
        claude.reply(text("Done."))
        await engine.ingest("chat", "m1", {"text": "delete order 882"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
    finally:
        await engine.stop()
    offered = [t["name"] for t in claude.requests[0]["tools"]]
    assert "mcp__shop__lookup_order" in offered and "mcp__shop__refund" in offered
    assert "mcp__shop__delete_order" not in offered  # denied: not even offered
    denied, looked = claude.requests[1]["messages"][-1]["content"]
    assert denied["is_error"] and "denied by the owner's policy" in denied["content"]
    assert "Grace Hopper" in looked["content"]
    assert shop_state(state)["calls"] == {"lookup_order": 1}  # the denied call never reached the server


def test_a_crash_between_the_servers_answer_and_the_commit_is_one_refund_at_the_server(tmp_path: Path) -> None:
    """The approved refund reaches the shop server, which answers; the worker is SIGKILLed before the journal
    commits. A real engine takes over, runs the same approved call again under the same key, and the server,
    which honours the key, refunds once: it answers the repeat from its record."""
    db, state = tmp_path / "inbox.db", tmp_path / "mcp-data" / "shop" / "shop.json"
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), AGENT_CONSOLE_DB=str(db),
               AGENT_CONSOLE_LEASE_TTL="2", AGENT_CONSOLE_BACKOFF_BASE="0", AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *",
               PYTHONPATH=str(ROOT))
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "refund order 883"}, now=int(time.time()))
    engine = subprocess.Popen([sys.executable, "-m", "console", "run"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        approval = inbox_until(db, lambda s: s.pending_approvals() and s.pending_approvals()[0])
        inbox_until(db, lambda s: s.counts()["done"] == 1)
        engine.send_signal(signal.SIGTERM)  # a clean stop: the lease is released for the crasher
        assert engine.wait(timeout=30) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    with Store.open(db) as store:
        assert store.answer_approval(approval.request_id, "yes", now=int(time.time())) == "yes"
    crasher = spawn("resume-call-then-die", db, "crasher", 2, env=env)
    out, err = crasher.communicate(timeout=60)
    assert crasher.returncode == -signal.SIGKILL, err
    assert json.loads(out)["answered"]["is_error"] is False
    with Store.open(db) as store:
        step = store.journal_step(f"tool:{approval.request_id}")
        assert step is not None and step.state == "claimed"  # the call ran; its commit never happened
    assert shop_state(state)["calls"]["refund"] == 1

    engine = subprocess.Popen([sys.executable, "-m", "console", "run"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = inbox_until(db, lambda s: (p := s.journal_step(f"tool:{approval.request_id}"))
                        and p.state == "committed" and p)
        inbox_until(db, lambda s: s.counts()["done"] == 2)
    finally:
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=30)
    assert done.executions == 2  # claimed twice: the crashed worker's and the new engine's
    after = shop_state(state)
    assert after["calls"]["refund"] == 1 and after["replays"]["refund"] == 1  # the server refunded once
    assert after["orders"]["883"]["refunded"] == 120.0
    with Store.open(db) as store:
        bodies = [m.body for m in store.outbox_messages()]
    assert sum(body.startswith("Done: mcp__shop__refund") for body in bodies) == 1


def test_an_engine_killed_mid_call_leaves_the_call_unknown_and_the_next_engine_asks_instead_of_calling_again(
    tmp_path: Path,
) -> None:
    """An allowed refund at a server that does not de-duplicate (it records every call before acting): the
    engine is SIGKILLed while the call is under way. The next engine takes the event over, replays it to the
    same call, finds its journal step claimed and never answered: it does not call the server again, it asks
    the owner whether to (may or may not have happened)."""
    db, calls = tmp_path / "inbox.db", tmp_path / "mcp-data" / "rec" / "rec.calls"  # in its data_dir
    config = tmp_path / "config" / "agent-console" / "config.toml"
    config.parent.mkdir(parents=True)
    server = json.dumps(str(ROOT / "tests" / "agents" / "mcp_servers.py"))
    config.write_text(f"""
[mcp_servers.rec]
command = {json.dumps(sys.executable)}
args = [{server}, "rec"]
env = {{ CALL_LOG = {json.dumps(str(calls))}, REFUND_SECONDS = "30" }}
call_timeout = 60

[permissions]
allow = ["send_message", "mcp__rec__refund"]
""")
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), AGENT_CONSOLE_DB=str(db),
               AGENT_CONSOLE_LEASE_TTL="2", AGENT_CONSOLE_BACKOFF_BASE="0", AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *",
               PYTHONPATH=str(ROOT))
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "refund order 881"}, now=int(time.time()))

    def engine() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "console", "run"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    first = engine()
    try:
        wait_until(lambda: read_calls(calls), "the refund to reach the server")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the engine and its MCP server, mid-call
        first.wait(timeout=30)
    second = engine()
    try:
        approval = inbox_until(db, lambda s: s.pending_approvals() and s.pending_approvals()[0], limit=60)
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=30)
    assert [c["tool"] for c in read_calls(calls)] == ["refund"]  # one real refund: never sent again unasked
    assert (approval.tool, approval.arguments) == ("mcp__rec__refund", {"order": "881"})
    assert "may or may not have happened" in approval.action
    assert "stopped before its answer was recorded" in approval.details["outcome_unknown"]
    with Store.open(db) as store:
        (step,) = [s for s in store.journal_steps(approval.event_id) if s.idem_key.startswith("tool:")]
        assert step.state == "unknown" and step.idem_key == read_calls(calls)[0]["key"]


@pytest.fixture
def tracker() -> Iterator[Any]:
    with serve_http("tracker") as server:
        yield server


async def test_a_header_secret_from_the_environment_reaches_the_server_and_never_the_inbox_logs_or_model(
    tmp_path: Path, claude: FakeClaude, tracker: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "trk-" + os.urandom(8).hex()
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("TRACKER_TOKEN", secret)
    servers = {"tracker": {"url": tracker.url, "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}}}
    settings = Settings(db=tmp_path / "inbox.db", agent="claude", claude_base_url=claude.url, mcp_servers=servers,
                        permissions={"allow": ["send_message", "mcp__tracker__*"]}, instructions=tmp_path / "x.md")
    engine = build_engine(settings, clock=ManualClock(NOW), holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        claude.reply(tool("t1", "mcp__tracker__whoami"))
        claude.reply(tool("t2", "send_message", text="Checked."))
        claude.reply(text("Done."))
        await engine.ingest("chat", "m1", {"text": "check the tracker"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
    finally:
        await engine.stop()
    (call,) = tracker.recorded()
    assert call["authorization"] == f"Bearer {secret}" and call["key"].startswith("tool:")
    files = [p for p in tmp_path.iterdir() if p.name.startswith("inbox.db")]
    assert files and all(secret.encode() not in p.read_bytes() for p in files)
    assert secret not in caplog.text and secret not in json.dumps(claude.requests)
    assert '"seen"' in json.dumps(claude.requests[1]["messages"][-1])
