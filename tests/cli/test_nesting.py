"""Deep nesting through the CLI: refused with one line at the limit, and readable by every command below it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.core import MAX_PAYLOAD_DEPTH, Store
from tests.cli.helpers import assert_user_error, invoke, run_process


def nested_text(depth: int) -> str:
    """JSON text `depth` objects deep."""
    return '{"k": ' * depth + '"leaf"' + "}" * depth


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 990, 100_000])
def test_ingest_refuses_a_payload_past_the_limit_in_one_line(tmp_path: Path, depth: int) -> None:
    db = tmp_path / "inbox.db"
    result = invoke(["--db", str(db), "ingest", "hook", "deep", "-"], input=nested_text(depth))
    assert_user_error(result.exit_code, result.stdout, result.stderr,
                      f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    result = invoke(["--db", str(db), "timers", "add", "deep", "--every", "60", "--payload",
                     '{"a": ' + nested_text(depth - 1) + "}"])
    assert_user_error(result.exit_code, result.stdout, result.stderr,
                      f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    with Store.open(db) as store:
        assert store.events() == [] and store.timers() == []


def test_every_command_reads_a_payload_at_the_limit(tmp_path: Path, isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    text = nested_text(MAX_PAYLOAD_DEPTH)
    stored = run_process(["--db", str(db), "ingest", "hook", "deepest", "-"], isolated, input=text)
    assert (stored.returncode, stored.stdout, stored.stderr) == (0, "stored\n", "")
    payload = json.loads(text)
    listed = run_process(["--db", str(db), "events", "--json"], isolated)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["payload"] == payload
    shown = run_process(["--db", str(db), "show", "1", "--json"], isolated)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["event"]["payload"] == payload
    human = run_process(["--db", str(db), "show", "1"], isolated)
    assert human.returncode == 0 and "Traceback" not in human.stderr, human.stderr
    assert human.stdout.count('"k": {') == MAX_PAYLOAD_DEPTH - 1
    table = run_process(["--db", str(db), "events"], isolated)
    assert table.returncode == 0 and "hook/deepest" in table.stdout, table.stderr


def test_settings_nested_too_deeply_are_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("keys = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    result = invoke(["--config", str(config), "--db", str(tmp_path / "inbox.db"), "status"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "is not valid TOML: it is nested too deeply")
    result = invoke(["--db", str(tmp_path / "inbox.db"), "status"],
                    env={"AGENT_CONSOLE_KEYS": "[" * 5000 + "]" * 5000})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "AGENT_CONSOLE_KEYS", "nested too deeply")
