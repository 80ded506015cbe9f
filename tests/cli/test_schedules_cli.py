"""`agent-console schedules [--json]`, `schedules renew|pause|resume|delete ID` and `status --json`'s `schedules`
(issue 35), on a real inbox file with a schedule a run's finish wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

from console.core import RunOutcome, ScheduleDraft, ScheduleSpec, Store
from tests.cli.helpers import assert_user_error, invoke

HOUR = 3600
UNTRUSTED = {"trusted": False, "event_id": 1, "source": "github", "source_id": "d-1", "tainted_by": ["github d-1"]}


def with_schedule(db: Path, now: int) -> None:
    spec = ScheduleSpec("deploys", "check deploys", "look at the deploys", "every", at=now + HOUR, every=HOUR,
                        expires_at=now + 2 * HOUR + 60)
    with Store.open(db) as store:
        store.ingest("github", "d-1", {}, now=now)
        gen = store.acquire("w", now=now)
        assert gen is not None
        events = store.claim_batch("w", gen, now=now)
        assert store.finish_run("w", gen, [e.id for e in events],
                                RunOutcome(schedules=[ScheduleDraft(spec, UNTRUSTED)]), now=now)
        store.release("w", gen)


def test_schedules_lists_and_steers_and_status_shows_them(tmp_path: Path) -> None:
    db, now = tmp_path / "inbox.db", int(time.time())
    with_schedule(db, now)
    (row,) = json.loads(invoke(["--db", str(db), "schedules", "--json"]).output)
    assert (row["id"], row["title"], row["state"], row["next"], row["expires"], row["spend_month"]) == (
        "deploys", "check deploys", "active", now + HOUR, now + 2 * HOUR + 60, 0.0)
    assert row["next_fires"] == [now + HOUR, now + 2 * HOUR] and row["trusted"] is False
    status = json.loads(invoke(["--db", str(db), "status", "--json"]).output)
    assert [{k: s[k] for k in ("id", "title", "next", "state", "spend_month", "expires")}
            for s in status["schedules"]] == [{"id": "deploys", "title": "check deploys", "next": now + HOUR,
                                               "state": "active", "spend_month": 0.0, "expires": now + 2 * HOUR + 60}]
    listed = invoke(["--db", str(db), "schedules"]).output
    assert "deploys  active  'check deploys'  every 1 hour" in listed and "⚠ runs untrusted" in listed
    assert "schedules  1 active · next: deploys" in invoke(["--db", str(db), "status"]).output

    assert invoke(["--db", str(db), "schedules", "pause", "deploys"]).output.strip() == "paused deploys"
    (row,) = json.loads(invoke(["--db", str(db), "schedules", "--json"]).output)
    assert (row["state"], row["next"], row["paused_reason"]) == ("paused", None, "paused by you")
    assert invoke(["--db", str(db), "schedules", "resume", "deploys"]).exit_code == 0
    renewed = invoke(["--db", str(db), "schedules", "renew", "deploys"])
    assert renewed.exit_code == 0 and renewed.output.startswith("renewed deploys: expires ")
    (row,) = json.loads(invoke(["--db", str(db), "schedules", "--json"]).output)
    assert row["state"] == "active" and row["expires"] >= now + 30 * 24 * HOUR
    assert invoke(["--db", str(db), "schedules", "delete", "deploys"]).output.strip() == "deleted deploys"
    assert invoke(["--db", str(db), "schedules"]).output.strip() == "no schedules"


def test_an_unknown_schedule_is_one_clear_line(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    with_schedule(db, int(time.time()))
    for verb in ("renew", "pause", "resume", "delete"):
        result = invoke(["--db", str(db), "schedules", verb, "nope"])
        assert_user_error(result.exit_code, result.stdout, result.stderr, "no schedule 'nope'")
    result = invoke(["--db", str(db), "schedules", "--json", "pause", "deploys"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "--json goes after")
