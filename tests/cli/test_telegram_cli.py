"""`agent-console telegram pair|unpair|chats` and the channel in `status` (issue 20)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.core import Store
from console.core.chats import code_hash
from tests.cli.helpers import assert_user_error, invoke


def test_pair_prints_a_code_the_inbox_accepts_once(tmp_path: Path) -> None:
    db = str(tmp_path / "inbox.db")
    result = invoke(["--db", db, "telegram", "pair"])
    assert result.exit_code == 0, result.output
    code = result.output.split("/pair ", 1)[1].split()[0]
    with Store.open(db) as store:
        assert store.pair_chat("telegram", code_hash(code), chat_id="42", owner_id="42", kind="private", title=None,
                               now=int(time.time()))
        assert not store.pair_chat("telegram", code_hash(code), chat_id="43", owner_id="43", kind="private",
                                   title=None, now=int(time.time()))
    assert "1 paired chat" in invoke(["--db", db, "status"]).output
    info = json.loads(invoke(["--db", db, "status", "--json"]).output)["telegram"]
    assert set(info) >= {"state", "reason", "paired_chats", "refused_messages"}
    assert [c["chat_id"] for c in info["paired_chats"]] == ["42"]
    assert "owner 42" in invoke(["--db", db, "telegram", "chats"]).output
    assert invoke(["--db", db, "telegram", "unpair", "42"]).output.strip() == "unpaired 1 chat"


def test_unpairing_a_chat_not_paired_is_one_line(tmp_path: Path) -> None:
    result = invoke(["--db", str(tmp_path / "inbox.db"), "telegram", "unpair", "5"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "chat 5 is not paired")
