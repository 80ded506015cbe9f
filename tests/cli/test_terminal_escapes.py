"""Ids and text from outside never reach the terminal as control characters; JSON output stays exact."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from console.core import Store
from console.textsafe import TerminalSafeFormatter
from tests.cli.helpers import invoke

HOSTILE_ID = "evil\x1b]0;PWNED\x07\x1b[2J\x9b31m\n"   # title, bell, clear screen, 8-bit CSI, a fake new line
HOSTILE_TEXT = "hi\x1b[8m\u202egnp.exe\x7f"            # hide what follows, reverse it, DEL
UNSAFE = ["\x1b", "\x07", "\x9b", "\x7f", "\u202e"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "inbox.db"
    now = int(time.time())
    with Store.open(path) as store:  # as a signed webhook would store them
        store.ingest("github", HOSTILE_ID, {"type": "push", "body": {"note": HOSTILE_TEXT}}, now=now)
        gen = store.acquire("worker\x1b[31m", now=now)
        assert gen is not None
        claimed = store.claim_batch("worker\x1b[31m", gen, now=now)
        assert store.finish("worker\x1b[31m", gen, [e.id for e in claimed], now=now, error=f"boom {HOSTILE_TEXT}")
        store.request_approval(f"ask{HOSTILE_ID}", f"refund {HOSTILE_TEXT}", now=now, expires_in=600)
        store.add_timer(f"t{HOSTILE_ID}".strip(), now + 60, {"note": HOSTILE_TEXT}, every=60)
    return path


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    return [text for item in value for text in strings(item)] if isinstance(value, list) else []


def shown(args: list[str], db: Path) -> str:
    result = invoke(["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    for char in UNSAFE:
        assert char not in result.stdout, (char, result.stdout)
    return result.stdout


@pytest.mark.parametrize("args", [["events"], ["show", "1"], ["status"], ["timers"]])
def test_human_output_escapes_control_characters(db: Path, args: list[str]) -> None:
    text = shown(args, db)
    assert "PWNED" in text or "refund" in text or "gnp.exe" in text  # the text is there, escaped


def test_events_and_show_print_the_escapes_readably(db: Path) -> None:
    events = shown(["events"], db)
    assert "github/evil\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\n" in events
    assert len(events.splitlines()) == 1  # the id's newline could not fake a second event
    detail = shown(["show", "1"], db)
    assert "\\u202egnp.exe\\u007f" in detail  # the payload is still JSON: its escapes are JSON's
    assert "error: boom hi\\x1b[8m\\u202egnp.exe\\x7f" in detail


@pytest.mark.parametrize("args", [["events", "--json"], ["show", "1", "--json"], ["status", "--json"],
                                  ["timers", "list", "--json"]])
def test_json_output_is_exact_and_safe(db: Path, args: list[str]) -> None:
    data = json.loads(shown(args, db))
    assert any(HOSTILE_TEXT in text or HOSTILE_ID.strip() in text for text in strings(data))  # exact, decoded
    if args[0] == "events":
        assert data[0]["source_id"] == HOSTILE_ID
        assert data[0]["payload"]["body"]["note"] == HOSTILE_TEXT


def test_log_lines_escape_what_they_quote() -> None:
    record = logging.LogRecord("agent_console.worker", logging.WARNING, __file__, 1, "run 3 failed: %s",
                               (f"boom {HOSTILE_TEXT}",), None)
    line = TerminalSafeFormatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING run 3 failed: boom hi\\x1b[8m\\u202egnp.exe\\x7f"
