"""`agent-console models` and status's "models" (issue 34): the chain in order, each model's state as the inbox
holds it, and the one in use; from another process than the engine that wrote it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.core import Store
from tests.cli.helpers import assert_user_error, invoke

CONFIG = """agent = "claude"
[[models]]
name = "claude"
protocol = "anthropic"
model = "claude-sonnet-5-5"
api_key_env = "ANTHROPIC_API_KEY"

[[models]]
name = "local"
protocol = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "qwen3"
"""


def test_models_and_status_show_a_cooling_primary_and_the_fallback_in_use(tmp_path: Path) -> None:
    db, conf = tmp_path / "inbox.db", tmp_path / "config.toml"
    conf.write_text(CONFIG)
    now = int(time.time())
    with Store.open(db) as store:
        gen = store.acquire("w1", now=now)
        assert gen is not None
        assert store.set_model_health("w1", gen, "claude:abc", "claude", "cooling", now=now, until=now + 600,
                                      reason="the Claude API is rate limiting (429)", failing_since=now)
    base = ["--db", str(db), "--config", str(conf)]
    listed = invoke([*base, "models"], env={})
    assert listed.exit_code == 0, listed.output
    first, second = listed.output.splitlines()
    assert first.startswith("  claude ") and "cooling (until in " in first and "rate limiting (429)" in first
    assert second.startswith("* local ") and "openai" in second and "qwen3" in second and "in use" in second
    rows = json.loads(invoke([*base, "models", "--json"], env={}).output)
    assert [(r["name"], r["state"], r["in_use"]) for r in rows] == [
        ("claude", "cooling", False), ("local", "ready", True)]
    status = json.loads(invoke([*base, "status", "--json"], env={}).output)
    assert status["models"] == [
        {"name": "claude", "state": "cooling", "until": now + 600, "reason": "the Claude API is rate limiting (429)"},
        {"name": "local", "state": "ready", "until": None, "reason": None}]
    text = invoke([*base, "status"], env={}).output
    assert "models     claude cooling" in text and "local in use" in text


def test_the_claude_settings_are_a_chain_of_one_and_the_offline_agent_has_none(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    Store.open(db).close()
    shown = json.loads(invoke(["--db", str(db), "models", "--json"], env={"AGENT_CONSOLE_AGENT": "claude"}).output)
    assert [(r["name"], r["model"], r["state"], r["in_use"]) for r in shown] == [
        ("claude", "claude-sonnet-5-5", "ready", True)]
    assert json.loads(invoke(["--db", str(db), "status", "--json"], env={}).output)["models"] == []


def test_a_bad_models_table_is_one_line_and_exit_2(tmp_path: Path) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text('[[models]]\nname = "a"\nprotocol = "openai"\n')
    result = invoke(["--db", str(tmp_path / "inbox.db"), "--config", str(conf), "models"], env={})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "[[models]] 'a' needs model")
