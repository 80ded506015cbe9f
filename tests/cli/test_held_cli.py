"""`agent-console held`: the messages held over max_messages_per_hour, listed and released by the owner."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.agents.base import RunContext
from console.core import Store
from tests.cli.helpers import assert_user_error, invoke


def hold_two(db: Path) -> None:
    now = int(time.time())
    with Store.open(db, max_messages_per_hour=1) as store:
        store.ingest("chat", "m1", {}, now=now)
        gen = store.acquire("w", now=now)
        assert gen is not None
        ctx = RunContext(store, store.claim_batch("w", gen, now=now), now, "w", gen, approval_expiry=600)
        for text in ("first", "second", "third"):
            ctx.say(text)
        assert ctx.finish()
        store.release(gen=gen, holder="w")


def test_held_lists_and_releases_and_status_counts_them(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    hold_two(db)
    listed = invoke(["--db", str(db), "held", "--json"])
    assert listed.exit_code == 0, listed.output
    bodies = [message["body"] for message in json.loads(listed.output)]
    assert bodies == ["second", "third"]
    status = invoke(["--db", str(db), "status"])
    assert "2 held over the hourly cap" in status.output
    first_id = json.loads(listed.output)[0]["id"]
    released = invoke(["--db", str(db), "held", "release", str(first_id)])
    assert released.exit_code == 0 and "released 1 message" in released.output
    assert "third" in invoke(["--db", str(db), "held"]).output
    assert invoke(["--db", str(db), "held", "release", "--all"]).exit_code == 0
    assert invoke(["--db", str(db), "held"]).output.strip() == "no held messages"
    with Store.open(db) as store:
        assert [m.body for m in store.outbox_messages()][:2] == ["third", "second"]


def test_release_needs_ids_or_all_and_names_what_was_not_held(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    hold_two(db)
    result = invoke(["--db", str(db), "held", "release"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "give --all")
    result = invoke(["--db", str(db), "held", "release", "999"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "not held", "999")
