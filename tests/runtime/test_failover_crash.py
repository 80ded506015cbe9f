"""SIGKILL mid-failover (issue 34), with real processes: `agent-console run` with a chain of two models (the
primary on the Messages API stand-in, a local fallback on the Chat Completions stand-in) and the recording MCP shop
over HTTP. Turn 1 runs on the primary and looks an order up; turn 2 meets a 429 and fails over at once
(failover_after = 1, retry-after 1): the choice `<turn>:model:2` = local is journalled, and the engine is killed
while local holds the request. By the time a second engine (standing by) takes the lease over, the primary's
cooldown has ended, so a fresh choice would ask the primary: the second engine asks local, as journalled, the lookup
is not made again, and the switch is one line in the event's history."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.mcp_servers import HttpServer, serve_http
from tests.agents.openai_stand_in import FakeOpenAI, serve_openai
from tests.agents.stand_in import FakeClaude, serve_stand_in, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.cli.helpers import isolated_env
from tests.support import inbox_until, wait_until

ROOT = Path(__file__).resolve().parents[2]
LOOKUP = "mcp__shop__lookup_order"


def toml(value: object) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


class Held:
    """The fallback's first request is held (not answered) until released: the engine is killed meanwhile."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.count = 0

    def __call__(self, _request: dict[str, Any]) -> None:
        self.count += 1
        if self.count == 1:
            self.arrived.set()
            self.release.wait(30)


@pytest.fixture
def servers() -> Iterator[tuple[FakeClaude, FakeOpenAI, HttpServer]]:
    with serve_stand_in() as claude, serve_openai() as local, serve_http("shop") as shop:
        yield claude, local, shop


def start(tmp_path: Path, config: Path, db: Path, name: str) -> subprocess.Popen[bytes]:
    # The killed engine's lease (renewed until the kill, after the 429) lapses three seconds or more after the
    # primary's one-second cooldown began: the second engine takes over with the cooldown over.
    env = isolated_env(tmp_path, ANTHROPIC_API_KEY=FAKE_KEY, AGENT_CONSOLE_LEASE_TTL="3",
                       AGENT_CONSOLE_BACKOFF_BASE="0", AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *")
    with (tmp_path / f"{name}.log").open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "console", "--config", str(config), "--db", str(db), "run"],
                                cwd=ROOT, env=env, stdout=sink, stderr=sink)


def test_an_engine_killed_after_the_failover_choice_replays_it_and_repeats_no_call(
    tmp_path: Path, servers: tuple[FakeClaude, FakeOpenAI, HttpServer]
) -> None:
    claude, local, shop = servers
    claude.reply(tool("t1", LOOKUP, order="881"))
    claude.fail(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                headers={"retry-after": "1"})
    held = Held()
    local.on_request = held
    local.reply("The order is on its way.")  # taken by the killed engine's request, answered to no one
    local.reply("The order is on its way.")
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    config.write_text("\n".join([
        'agent = "claude"', "failover_after = 1", "announce_fallback = false",
        f"instructions = {toml(str(tmp_path / 'none'))}",
        "[permissions]", f'allow = ["send_message", "{LOOKUP}"]',
        "[mcp_servers.shop]", f"url = {toml(shop.url)}",
        "[[models]]", 'name = "primary"', 'protocol = "anthropic"', f"base_url = {toml(claude.url)}",
        'model = "claude-sonnet-5-5"', 'api_key_env = "ANTHROPIC_API_KEY"',
        "[[models]]", 'name = "local"', 'protocol = "openai"', f"base_url = {toml(local.url)}", 'model = "qwen3"',
        ""]), encoding="utf-8")
    engines = [start(tmp_path, config, db, "first")]
    try:
        subprocess.run([sys.executable, "-m", "console", "--db", str(db), "ingest", "chat", "m1",
                        json.dumps({"text": "where is order 881?"})], cwd=ROOT, env=isolated_env(tmp_path),
                       check=True, capture_output=True, timeout=60)
        # The second engine starts (imports, its check of the inbox) while the first works, and stands by: the
        # takeover after the kill waits out the dead engine's lease alone, not the second one's start as well.
        inbox_until(db, lambda s: (lease := s.lease()) is not None and f":{engines[0].pid}:" in lease.holder,
                    "the first engine holding the lease", limit=180)
        engines.append(start(tmp_path, config, db, "second"))
        wait_until(held.arrived.is_set, "the fallback asked for turn 2", limit=180)
        event_id = inbox_until(db, lambda s: (e := s.find_event("chat", "m1")) and e.id)
        choice = inbox_until(db, lambda s: s.journal_step(f"claude:{event_id}:turn:2:model:2"))
        assert (choice.state, choice.result) == ("committed", "local")
        engines[0].send_signal(signal.SIGKILL)
        assert engines[0].wait(timeout=10) == -signal.SIGKILL
        held.release.set()

        inbox_until(db, lambda s: (e := s.event(event_id)) and e.status == "done", "the run done", limit=180)
        steps = inbox_until(db, lambda s: s.journal_steps(event_id))
        history = inbox_until(db, lambda s: s.history(event_id))
    finally:
        held.release.set()
        for engine in engines:
            if engine.poll() is None:
                engine.send_signal(signal.SIGTERM)
                try:
                    engine.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    engine.kill()
                    engine.wait(timeout=10)
    assert len(claude.requests) == 2  # turn 1, and turn 2's 429: the restarted engine did not ask the primary
    assert held.count >= 2  # turn 2 asked of local before the kill, and (replayed) after it
    turns = {step.idem_key: step.result.get("via") for step in steps
             if step.state == "committed" and step.idem_key.split(":")[-2] == "turn"}
    assert turns == {f"claude:{event_id}:turn:1": "primary", f"claude:{event_id}:turn:2": "local"}
    assert [c["tool"] for c in shop.recorded()] == ["lookup_order"]  # the lookup was not made again
    [switch] = [a.detail for a in history if a.kind == "model"]
    assert switch.startswith(f"claude:{event_id} turn 2: model local (qwen3, openai) instead of primary")
    assert "lost" in [a.kind for a in history]  # the killed engine's claim
    assert claude.refused == [] and local.refused == []
