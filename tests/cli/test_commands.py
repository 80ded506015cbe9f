"""Every command in-process through click's CliRunner, on a real inbox file."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from console.core import Store
from console.core.models import MemoryWrite, TimerDraft
from tests.cli.helpers import invoke, run_process


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "inbox.db"


def cli(db: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    result = invoke(["--db", str(db), *args], input=input, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def ok(db: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
    result = cli(db, *args, input=input, env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stderr == ""
    return str(result.stdout)


def open_store(db: Path, **options: Any) -> Store:
    return Store.open(db, seed=1, **options)


def wall() -> int:
    return int(time.time())


def make_dead(db: Path, source: str, source_id: str) -> int:
    """An event that failed its only attempt (max_attempts=1), so it is parked as dead. Call it before
    ingesting other events: the claim takes every pending event."""
    with open_store(db, max_attempts=1) as store:
        store.ingest(source, source_id, {"n": source_id}, now=wall())
        event = store.find_event(source, source_id)
        assert event is not None
        holder = f"test-{source}-{source_id}"
        gen = store.acquire(holder, now=wall())
        assert gen is not None
        claimed = store.claim_batch(holder, gen, now=wall())
        assert [e.id for e in claimed] == [event.id]
        assert store.finish(holder, gen, [event.id], now=wall(), error="boom")
        store.release(holder, gen, now=wall())
        dead = store.event(event.id)
        assert dead is not None and dead.status == "dead"
        return event.id


# --- ingest ------------------------------------------------------------------------------------

def test_ingest_prints_stored_then_duplicate(db: Path) -> None:
    assert ok(db, "ingest", "github", "d-1", '{"pr": 7}') == "stored\n"
    assert ok(db, "ingest", "github", "d-1", '{"pr": 7}') == "duplicate\n"
    with open_store(db) as store:
        [event] = store.events()
    assert (event.source, event.source_id, event.payload, event.duplicates) == ("github", "d-1", {"pr": 7}, 1)


def test_ingest_without_payload_stores_an_empty_object(db: Path) -> None:
    ok(db, "ingest", "chat", "m-1")
    with open_store(db) as store:
        event = store.find_event("chat", "m-1")
    assert event is not None and event.payload == {}


def test_ingest_dash_reads_the_payload_from_stdin(db: Path) -> None:
    assert ok(db, "ingest", "chat", "m-2", "-", input='{"text": "refund order 881"}\n') == "stored\n"
    with open_store(db) as store:
        event = store.find_event("chat", "m-2")
    assert event is not None and event.payload == {"text": "refund order 881"}


def test_the_default_inbox_is_created_in_the_user_data_folder(tmp_path: Path) -> None:
    result = invoke(["ingest", "chat", "m-1"])
    assert result.exit_code == 0 and result.stdout == "stored\n"
    default = tmp_path / "home" / "data" / "agent-console" / "inbox.db"
    with open_store(default) as store:
        assert store.find_event("chat", "m-1") is not None


def test_db_from_the_environment_and_from_the_config_file(tmp_path: Path) -> None:
    env_db = tmp_path / "env.db"
    assert invoke(["ingest", "a", "1"], env={"AGENT_CONSOLE_DB": str(env_db)}).exit_code == 0
    config = tmp_path / "c.toml"
    config.write_text('db = "file.db"\n')
    assert invoke(["--config", str(config), "ingest", "b", "1"]).exit_code == 0
    with open_store(env_db) as store:
        assert [e.source for e in store.events()] == ["a"]
    with open_store(tmp_path / "file.db") as store:
        assert [e.source for e in store.events()] == ["b"]


# --- status ------------------------------------------------------------------------------------

def test_status_json_reports_every_part(db: Path) -> None:
    now = wall()
    with open_store(db) as store:
        store.ingest("chat", "1", {}, now=now)
        store.ingest("chat", "2", {}, now=now)
        gen = store.acquire("worker-a", now=now)
        assert gen == 1
        store.request_approval("refund-881", "refund order 881", now=now, expires_in=600)
        store.queue_message("held", now=now)
        store.add_timer("tick", now + 300, {}, every=300, now=now)
    info = json.loads(ok(db, "status", "--json"))
    assert info["events"] == {"pending": 2, "running": 0, "done": 0, "dead": 0, "discarded": 0}
    assert info["lease"]["holder"] == "worker-a" and info["lease"]["gen"] == 1 and info["lease"]["live"] is True
    assert 0 < info["lease"]["expires_in"] <= 120
    assert [a["request_id"] for a in info["approvals_pending"]] == ["refund-881"]
    assert info["outbox"]["queued"] == 1
    assert info["next_send_at"] is not None
    assert info["next_timer"]["id"] in {"tick", "expire:refund-881"}
    assert info["takeovers"] == 0 and info["refused_finishes"] == 0
    assert info["now"] >= now


def test_status_text_shows_lease_approvals_outbox_timer_and_fencing(db: Path) -> None:
    now = wall()
    with open_store(db, lease_ttl=100) as store:
        store.ingest("chat", "1", {}, now=now)
        store.acquire("old-worker", now=now - 500)           # lapsed long ago
        store.acquire("new-worker", now=now)                 # takeover: generation 2
        store.finish("old-worker", 1, [], now=now)           # refused: recorded
        store.request_approval("deploy-1", "deploy web", now=now, expires_in=3600)
        store.queue_message("held", now=now)
        store.add_timer("tick", now + 7200, {}, every=7200, now=now)
    text = ok(db, "status")
    assert "1 pending · 0 running · 0 done · 0 dead · 0 discarded" in text
    assert "held by new-worker, generation 2" in text
    assert "deploy-1  question: “deploy web”" in text and " left\n" in text
    assert "1 queued · 0 sent · 0 failed" in text
    assert "timers     next: expire:deploy-1 in " in text
    assert "1 takeover · 1 refused late finish" in text


def test_status_prints_counts_and_durations_as_the_console_does(db: Path) -> None:
    now = wall()
    with open_store(db, lease_ttl=3725) as store:
        store.ingest_many([("chat", f"m-{n}", {}) for n in range(1234)], now=now)
        store.acquire("worker", now=now)
    text = ok(db, "status")
    assert "1,234 pending · 0 running" in text  # the events pane's thousands separator
    # The console's compact duration (1h02m), not "1h 02m": the lease has 3725 s (1h02m05s) at most.
    assert re.search(r"held by worker, generation 1, 1h0[12]m left", text), text


def test_status_says_where_recent_answers_came_from_and_what_phones_sent(db: Path) -> None:
    now = wall()
    with open_store(db) as store:
        for request_id, action in (("apr-1-aa", "refund order 881"), ("apr-2-bb", "deploy web")):
            store.request_approval(request_id, action, now=now - 300, expires_in=3600)
        store.take_phone_answer("telegram", "u1", via="telegram", now=now - 120, request_id="apr-1-aa", answer="yes")
        store.take_phone_answer("telegram", "u2", via="telegram", now=now - 60, request_id="apr-1-aa", answer="no",
                                refused="wrong_chat")
        store.answer_approval("apr-2-bb", "no", now=now - 30, via="console")
    text = ok(db, "status")
    # The command reads the wall clock itself: a loaded machine may have moved on a few seconds since `now`.
    assert re.search(r"apr-1-aa  question: “refund order 881”  \(yes from Telegram, 2m0\ds ago\)", text), text
    assert re.search(r"apr-2-bb  question: “deploy web”  \(no in the console, 3\ds ago\)", text), text
    assert "phone      1 answer taken · 1 ignored (1 wrong chat)" in text
    info = json.loads(ok(db, "status", "--json"))
    assert [(a["request_id"], a["answered_via"]) for a in info["approvals_recent"]] == [
        ("apr-2-bb", "console"), ("apr-1-aa", "telegram")]
    assert info["phone_answers"]["settled"] == 1 and info["phone_answers"]["wrong_chat"] == 1


def test_status_text_on_a_fresh_inbox(db: Path) -> None:
    Store.open(db).close()
    text = ok(db, "status")
    assert "nobody has held it yet" in text and "none pending" in text and "nothing to send" in text
    assert "agent      ready" in text and "phone " not in text
    assert json.loads(ok(db, "status", "--json"))["agent"] == {"state": "ready", "reason": None, "until": None}


def test_status_says_when_the_agent_waits_or_is_paused(db: Path) -> None:
    now = wall()
    reason = "the Claude API is rate limiting (429: slow down)"
    with open_store(db) as store:
        gen = store.acquire("worker-a", now=now)
        assert gen is not None
        store.set_agent_state("worker-a", gen, "waiting", now=now, reason=reason, until=now + 600)
    assert json.loads(ok(db, "status", "--json"))["agent"] == {"state": "waiting", "reason": reason, "until": now + 600}
    shown = re.search(r"^agent      waiting \((10m00s|9m5\ds) left\): (.*)$", ok(db, "status"), re.MULTILINE)
    assert shown is not None and shown.group(2) == reason
    with open_store(db) as store:
        store.set_agent_state("worker-a", gen, "paused", now=now, reason="the key was refused")
    assert "agent      paused until the engine restarts: the key was refused" in ok(db, "status")


# --- events and show ---------------------------------------------------------------------------

def test_events_json_shape_and_filters(db: Path) -> None:
    dead_id = make_dead(db, "cron", "c-1")
    for i in range(3):
        ok(db, "ingest", "github", f"d-{i}", json.dumps({"i": i}))
    ok(db, "ingest", "chat", "m-1", '{"text": "hi"}')

    listed = json.loads(ok(db, "events", "--json"))
    assert [e["source_id"] for e in listed] == ["m-1", "d-2", "d-1", "d-0", "c-1"]  # newest first
    required = {"id", "source", "source_id", "status", "attempts", "error", "claim_gen", "created_at", "payload"}
    assert all(required <= set(e) for e in listed)
    dead = listed[-1]
    assert (dead["id"], dead["status"], dead["attempts"], dead["claim_gen"]) == (dead_id, "dead", 1, 1)
    assert "boom" in dead["error"]
    assert listed[0]["payload"] == {"text": "hi"} and listed[0]["error"] is None
    assert (listed[0]["status"], listed[0]["attempts"], listed[0]["claim_gen"]) == ("pending", 0, None)

    github = json.loads(ok(db, "events", "--json", "--source", "github"))
    assert [e["source_id"] for e in github] == ["d-2", "d-1", "d-0"]
    assert [e["id"] for e in json.loads(ok(db, "events", "--json", "--status", "dead"))] == [dead_id]
    assert len(json.loads(ok(db, "events", "--json", "--limit", "2"))) == 2


def test_events_text(db: Path) -> None:
    Store.open(db).close()
    assert ok(db, "events") == "no events\n"
    dead_id = make_dead(db, "cron", "c-1")
    ok(db, "ingest", "github", "d-1")
    lines = ok(db, "events").splitlines()
    assert len(lines) == 2
    assert "github/d-1" in lines[0] and "pending" in lines[0]
    assert lines[1].split()[:2] == [str(dead_id), "dead"] and "cron/c-1" in lines[1] and "boom" in lines[1]


def test_show_prints_payload_history_and_journal(db: Path) -> None:
    now = wall()
    with open_store(db) as store:
        store.ingest("chat", "m-1", {"text": "refund order 881", "nested": {"a": [1, 2]}}, now=now)
        gen = store.acquire("worker-a", now=now)
        assert gen is not None
        [event] = store.claim_batch("worker-a", gen, now=now)
        store.run_once("m-1:notify", lambda: {"ok": True}, gen=gen, now=now, event_id=event.id)
        store.finish("worker-a", gen, [event.id], now=now)
    text = ok(db, "show", str(event.id))
    assert f"event {event.id}  chat/m-1  done  (1 attempt, generation 1, 0 duplicates refused)" in text
    assert '"nested": {\n    "a": [\n      1,' in text  # pretty JSON
    assert "claim" in text and "finish" in text and "worker-a gen 1" in text
    assert 'm-1:notify  committed  gen 1  executed 1x  result {"ok": true}' in text

    detail = json.loads(ok(db, "show", str(event.id), "--json"))
    assert detail["event"]["payload"]["text"] == "refund order 881"
    assert [a["kind"] for a in detail["history"]] == ["claim", "finish"]
    assert [(s["idem_key"], s["state"]) for s in detail["journal"]] == [("m-1:notify", "committed")]


def test_show_says_why_a_pending_event_has_not_run_as_the_console_does(db: Path) -> None:
    now = wall()
    with open_store(db, backoff_base=600) as store:
        store.ingest("chat", "m-1", {"text": "hi"}, now=now)
        gen = store.acquire("worker-b:77", now=now)
        assert gen is not None
        [event] = store.claim_batch("worker-b:77", gen, now=now)
        store.finish("worker-b:77", gen, [event.id], now=now, error="model timeout")  # back off, then again
        store.request_approval("apr-1-x", "refund order 881", now=now, expires_in=3600, event_id=event.id)
    text = ok(db, "show", str(event.id))
    assert "why it has not run:\n" in text
    assert "  - waiting for approval 'apr-1-x' (refund order 881); expires " in text
    assert "  - the lease is held by worker worker-b:77 (generation 1, " in text  # a CLI has no worker of its own
    assert "this console" not in text
    assert "  - backing off after attempt 1 of 3: next try " in text and "; last error: model timeout" in text

    why = json.loads(ok(db, "show", str(event.id), "--json"))["why"]
    assert why["status"] == "pending"
    assert [r["kind"] for r in why["reasons"]] == ["awaiting_approval", "lease_elsewhere", "backing_off"]
    assert why["reasons"][0]["request_id"] == "apr-1-x" and why["reasons"][1]["holder"] == "worker-b:77"


def test_show_and_events_say_a_batch_mate_failed_with_its_batch_not_the_poisons_error(db: Path) -> None:
    now = wall()
    with open_store(db) as store:
        store.ingest_many([("chat", "mate", {}), ("hook", "poison", {"poison": True})], now=now)
        gen = store.acquire("worker-b:77", now=now)
        assert gen is not None
        mate, poison = store.claim_batch("worker-b:77", gen, now=now)
        store.finish("worker-b:77", gen, [mate.id, poison.id], now=now, error="PoisonEventError: boom",
                     blame=poison.id)
    said = f"failed with its batch (#{poison.id}, poison); runs alone next"
    text = ok(db, "show", str(mate.id))
    assert f"event {mate.id}  chat/mate  pending  (0 attempts, " in text  # its attempt was not spent
    assert f"why it has not run:\n  - {said}\n" in text
    assert "\nerror: " not in text  # the poison event's error is not its own
    assert (f"batch     worker-b:77 gen 1  failed with its batch (#{poison.id}, poison): PoisonEventError: boom; "
            "attempt not counted, runs alone next") in text
    assert f"{mate.id:>6}  pending  0 att  chat/mate  {said}\n" in ok(db, "events")
    detail = json.loads(ok(db, "show", str(mate.id), "--json"))
    assert (detail["event"]["failed_with"], detail["event"]["error"]) == (poison.id, None)
    assert detail["why"]["reasons"][0] == {"kind": "batch_failed", "sentence": said, "poison": poison.id}


def test_show_of_a_dead_event_says_why_it_died_from_its_fields(db: Path) -> None:
    dead_id = make_dead(db, "cron", "c-1")
    text = ok(db, "show", str(dead_id))
    assert "state:\n  - dead: failed 1 attempt; last error: boom; a retry runs it again\n" in text
    assert "\nerror: boom" not in text  # said once, in its state
    detail = json.loads(ok(db, "show", str(dead_id), "--json"))
    assert (detail["event"]["dead_reason"], detail["event"]["error"]) == ("failed", "boom")
    assert detail["why"]["reasons"] == [{"kind": "dead", "sentence": "dead: failed 1 attempt; last error: boom; a "
                                         "retry runs it again", "dead_reason": "failed", "error": "boom",
                                         "attempts": 1}]


def test_show_uses_the_configured_time_zone(db: Path) -> None:
    ok(db, "ingest", "chat", "m-1")
    with open_store(db) as store:
        event = store.find_event("chat", "m-1")
    assert event is not None
    expected = datetime.fromtimestamp(event.created_at, ZoneInfo("Asia/Tokyo")).isoformat(sep=" ")
    assert f"created {expected}" in ok(db, "show", str(event.id), env={"AGENT_CONSOLE_TIMEZONE": "Asia/Tokyo"})


# --- approve -----------------------------------------------------------------------------------

def test_approve_prints_the_outcome_that_stands(db: Path) -> None:
    with open_store(db) as store:
        store.request_approval("refund-881", "refund order 881", now=wall(), expires_in=3600)
    assert ok(db, "approve", "refund-881", "yes") == "yes\n"
    late = cli(db, "approve", "refund-881", "no", env={"AGENT_CONSOLE_TIMEZONE": "Asia/Tokyo"})
    assert late.stdout == "yes\n"  # the first answer stands, alone on stdout for scripts
    with open_store(db) as store:
        first = store.approval("refund-881")
    assert first is not None and first.resolved_at is not None
    at = datetime.fromtimestamp(first.resolved_at, ZoneInfo("Asia/Tokyo")).strftime("%H:%M")
    assert late.stderr.startswith("already answered yes from the command line at ")  # a date too past midnight
    assert late.stderr.endswith(f"{at}; your no was not applied\n")
    with open_store(db) as store:
        approval = store.approval("refund-881")
    assert approval is not None and approval.outcome == "yes"
    [recent] = json.loads(ok(db, "status", "--json"))["approvals_recent"]
    assert (recent["request_id"], recent["outcome"], recent["answered_via"]) == ("refund-881", "yes", "cli")


def test_approve_after_the_deadline_prints_expired(db: Path) -> None:
    with open_store(db) as store:
        store.request_approval("deploy-1", "deploy", now=wall() - 100, expires_in=10)
    late = cli(db, "approve", "deploy-1", "YES")
    assert late.stdout == "expired\n"
    assert late.stderr.startswith("expired at ") and late.stderr.endswith(" before your answer; your yes was not "
                                                                           "applied\n")


def test_approve_an_unknown_request_prints_unknown_and_exits_1(db: Path) -> None:
    result = cli(db, "approve", "never-asked", "no")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "unknown\n", "")


# --- retry -------------------------------------------------------------------------------------

def test_retry_one_dead_event(db: Path) -> None:
    event_id = make_dead(db, "github", "d-1")
    assert ok(db, "retry", str(event_id)) == "retried\n"
    with open_store(db) as store:
        event = store.event(event_id)
        history = store.history(event_id)
    assert event is not None and (event.status, event.attempts) == ("pending", 0)
    assert history[-1].kind == "retry"


def test_retry_all_dead_prints_how_many(db: Path) -> None:
    ids = [make_dead(db, "github", "d-1"), make_dead(db, "github", "d-2"), make_dead(db, "chat", "m-1")]
    assert ok(db, "retry", "--all-dead", "--source", "github") == "retried 2\n"
    with open_store(db) as store:
        assert [store.event(i).status for i in ids] == ["pending", "pending", "dead"]  # type: ignore[union-attr]
    assert ok(db, "retry", "--all-dead") == "retried 1\n"
    assert ok(db, "retry", "--all-dead") == "retried 0\n"


def test_retry_several_events_at_once(db: Path) -> None:
    ids = [make_dead(db, "github", "d-1"), make_dead(db, "github", "d-2"), make_dead(db, "chat", "m-1")]
    assert ok(db, "discard", str(ids[1])) == "discarded 1\n"
    assert ok(db, "retry", str(ids[0]), str(ids[1])) == "retried 2\n"  # a discarded event comes back too
    with open_store(db) as store:
        assert [store.event(i).status for i in ids] == ["pending", "pending", "dead"]  # type: ignore[union-attr]


def test_retry_of_several_is_all_or_none(db: Path) -> None:
    dead_id = make_dead(db, "github", "d-1")
    ok(db, "ingest", "chat", "m-1")
    result = cli(db, "retry", str(dead_id), "2")
    assert result.exit_code == 2 and "event 2 is pending, not dead" in result.stderr
    result = cli(db, "retry", str(dead_id), "99")
    assert result.exit_code == 2 and "no event with id 99" in result.stderr
    with open_store(db) as store:
        assert store.event(dead_id).status == "dead"  # type: ignore[union-attr]


def test_discard_keeps_the_event_and_status_counts_it(db: Path) -> None:
    ids = [make_dead(db, "github", "d-1"), make_dead(db, "github", "d-2")]
    ok(db, "ingest", "chat", "m-1")
    assert ok(db, "discard", *map(str, ids), "3", "--reason", "spam") == "discarded 3\n"
    with open_store(db) as store:
        events = [store.event(i) for i in (*ids, 3)]
        assert [e.status for e in events] == ["discarded"] * 3  # type: ignore[union-attr]
        assert store.history(ids[0])[-1].detail == "spam"
    assert json.loads(ok(db, "status", "--json"))["events"] == {
        "pending": 0, "running": 0, "done": 0, "dead": 0, "discarded": 3}
    assert "0 dead · 3 discarded" in ok(db, "status")
    assert [e["id"] for e in json.loads(ok(db, "events", "--json", "--status", "discarded"))] == [3, *ids[::-1]]


def test_discard_refuses_a_done_event_and_changes_nothing(db: Path) -> None:
    dead_id = make_dead(db, "github", "d-1")
    with open_store(db) as store:
        store.ingest("chat", "m-1", {}, now=wall())
        gen = store.acquire("w", now=wall())
        assert gen is not None
        [event] = store.claim_batch("w", gen, now=wall())
        store.finish("w", gen, [event.id], now=wall())
    result = cli(db, "discard", str(dead_id), str(event.id))
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"agent-console: error: event {event.id} is done, not dead or pending: only dead "
                                     "or pending events can be discarded")
    with open_store(db) as store:
        assert store.event(dead_id).status == "dead"  # type: ignore[union-attr]


def test_restore_puts_discarded_events_back_among_the_dead_without_running_them(db: Path) -> None:
    ids = [make_dead(db, "github", "d-1"), make_dead(db, "github", "d-2")]
    ok(db, "discard", *map(str, ids))
    assert ok(db, "restore", *map(str, ids)) == "restored 2 to dead (not run; `retry` runs them)\n"
    with open_store(db) as store:
        events = [store.event(i) for i in ids]
        assert [(e.status, e.attempts, e.dead_reason) for e in events] == [  # type: ignore[union-attr]
            ("dead", 1, "failed"), ("dead", 1, "failed")]
        assert store.history(ids[0])[-1].kind == "restore"


def test_restore_is_all_or_none(db: Path) -> None:
    dead_id = make_dead(db, "github", "d-1")
    discarded = make_dead(db, "github", "d-2")
    ok(db, "discard", str(discarded))
    result = cli(db, "restore", str(discarded), str(dead_id))
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"agent-console: error: event {dead_id} is dead, not discarded: only "
                                     "discarded events can be restored")
    result = cli(db, "restore", "99")
    assert result.exit_code == 2 and "no event with id 99" in result.stderr
    with open_store(db) as store:
        assert store.event(discarded).status == "discarded"  # type: ignore[union-attr]


def test_dead_lists_when_each_event_died_and_why(db: Path) -> None:
    Store.open(db).close()
    assert ok(db, "dead") == "no dead events\n"
    first, second = make_dead(db, "github", "d-1"), make_dead(db, "chat", "m-1")
    lines = ok(db, "dead").splitlines()
    assert [line.split()[0] for line in lines] == [str(second), str(first)]
    assert "died " in lines[0] and " ago)" in lines[0]
    assert lines[0].endswith("  chat/m-1  failed 1 attempt; last error: boom")
    listed = json.loads(ok(db, "dead", "--json", "--source", "github"))
    with open_store(db) as store:
        died = store.event(first).updated_at  # type: ignore[union-attr]
    assert listed == [{"id": first, "source": "github", "source_id": "d-1", "attempts": 1, "died_at": died,
                       "dead_reason": "failed", "error": "boom"}]


# --- say ---------------------------------------------------------------------------------------

def test_say_queues_messages_and_urgent_skips_the_gap(db: Path) -> None:
    assert ok(db, "say", "the build is green") == "queued message 1\n"
    assert ok(db, "say", "the site is down", "--urgent") == "queued message 2 (urgent)\n"
    with open_store(db) as store:
        messages = {m.body: m for m in store.outbox_messages()}
    assert messages["the build is green"].urgent is False and messages["the build is green"].status == "queued"
    assert messages["the site is down"].urgent is True


def test_send_now_moves_a_message_the_gap_holds_to_the_urgent_lane(db: Path) -> None:
    ok(db, "say", "the build is green")
    ok(db, "say", "the site is down", "--urgent")
    assert ok(db, "send-now", "1") == "message 1 goes out at once (the urgent lane)\n"
    with open_store(db) as store:
        assert all(m.urgent for m in store.outbox_messages())
    result = cli(db, "send-now", "2")
    assert result.exit_code == 2
    assert result.stderr.strip() == "agent-console: error: message 2 is not held by the send gap (it is urgent)"
    result = cli(db, "send-now", "7")
    assert result.exit_code == 2 and result.stderr.strip() == "agent-console: error: no outbox message with id 7"


# --- timers ------------------------------------------------------------------------------------

def test_timers_add_every_cron_at_then_list(db: Path) -> None:
    before = wall()
    out = ok(db, "timers", "add", "tick", "--every", "300", "--payload", '{"task": "tick"}', "--catch-up", "each")
    assert out.startswith("added timer tick: every 5m00s, next ")
    ok(db, "timers", "add", "weekday", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin")
    ok(db, "timers", "add", "once", "--at", str(before + 86_400))
    assert ok(db, "timers", "add", "tick", "--every", "600").startswith("replaced timer tick")

    listed = {t["id"]: t for t in json.loads(ok(db, "timers", "list", "--json"))}
    assert set(listed) == {"tick", "weekday", "once"}
    assert listed["tick"]["every"] == 600 and listed["tick"]["catch_up"] == "coalesce"
    assert before + 600 <= listed["tick"]["due"] <= wall() + 600
    weekday = listed["weekday"]
    assert (weekday["cron"], weekday["tz"]) == ("0 9 * * 1-5", "Europe/Berlin")
    local = datetime.fromtimestamp(weekday["due"], ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5
    assert listed["once"]["due"] == before + 86_400 and listed["once"]["every"] is None

    text = ok(db, "timers")  # no subcommand lists them too
    assert ok(db, "timers", "--all") == ok(db, "timers", "list", "--all")  # as the README documents it
    assert json.loads(ok(db, "timers", "--json")) == json.loads(ok(db, "timers", "list", "--json"))
    assert "weekday  cron '0 9 * * 1-5' Europe/Berlin  next " in text
    assert "tick  every 10m00s" in text and "once  once" in text


def test_timers_run_fires_once_now_and_keeps_the_schedule(db: Path) -> None:
    ok(db, "timers", "add", "tick", "--every", "3600", "--payload", '{"task": "tick"}')
    out = ok(db, "timers", "run", "tick")
    assert re.fullmatch(r"fired timer tick: event timer/tick@(\d+)\n", out)
    with open_store(db) as store:
        [event] = store.events(source="timer")
        timer = store.timer("tick")
    assert event.payload["task"] == "tick" and event.source_id == out.split("event timer/")[1].strip()
    assert timer is not None and timer.due > wall() + 3500  # still an hour away


def test_timers_add_payload_reaches_the_event(db: Path) -> None:
    ok(db, "timers", "add", "soon", "--at", str(wall() - 5), "--payload", '{"task": "water plants"}')
    with open_store(db) as store:
        assert store.run_scheduler(now=wall()) == 1
        [event] = store.events(source="timer")
    assert event.source_id.startswith("soon@") and event.payload["task"] == "water plants"


def test_timers_at_iso_without_offset_is_in_the_configured_zone(db: Path) -> None:
    ok(db, "timers", "add", "new-year", "--at", "2031-01-01T00:00", env={"AGENT_CONSOLE_TIMEZONE": "Asia/Tokyo"})
    ok(db, "timers", "add", "utc", "--at", "2031-01-01T00:00:00+00:00")
    listed = {t["id"]: t["due"] for t in json.loads(ok(db, "timers", "list", "--json"))}
    assert listed["new-year"] == int(datetime(2031, 1, 1, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp())
    assert listed["utc"] - listed["new-year"] == 9 * 3600


def test_timers_cron_defaults_to_the_configured_zone(db: Path) -> None:
    ok(db, "timers", "add", "nine", "--cron", "0 9 * * *", env={"AGENT_CONSOLE_TIMEZONE": "America/New_York"})
    [timer] = json.loads(ok(db, "timers", "list", "--json"))
    assert timer["tz"] == "America/New_York"


def test_timers_pause_resume_remove(db: Path) -> None:
    ok(db, "timers", "add", "tick", "--every", "60")
    assert ok(db, "timers", "pause", "tick") == "paused timer tick\n"
    assert json.loads(ok(db, "timers", "list", "--json"))[0]["paused"] is True
    listed = ok(db, "timers", "list")
    assert "paused, not counting down" in listed and "next " not in listed  # no countdown while it cannot fire
    assert ok(db, "timers", "resume", "tick") == "resumed timer tick\n"
    assert json.loads(ok(db, "timers", "list", "--json"))[0]["paused"] is False
    assert "next " in ok(db, "timers", "list")
    assert ok(db, "timers", "remove", "tick") == "removed timer tick\n"
    assert ok(db, "timers", "list") == "no timers\n"


def test_timers_list_all_includes_fired_one_offs(db: Path) -> None:
    ok(db, "timers", "add", "past", "--at", str(wall() - 10))
    with open_store(db) as store:
        store.run_scheduler(now=wall())
    assert ok(db, "timers", "list") == "no timers\n"
    assert "past  once  fired" in ok(db, "timers", "list", "--all")


# --- help --------------------------------------------------------------------------------------

def test_help_names_every_command_and_the_exit_codes() -> None:
    result = invoke(["--help"])
    assert result.exit_code == 0
    for command in ("run", "ingest", "status", "events", "show", "approve", "retry", "timers", "say"):
        assert f"  {command} " in result.stdout
    assert "Exit codes" in result.stdout and "unknown" in result.stdout
    approve_help = invoke(["approve", "--help"]).stdout
    assert "unknown" in approve_help and "exit code is 1" in approve_help


def test_help_works_with_a_broken_config(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("lease_ttl = -1\n")
    assert invoke(["--config", str(config), "status", "--help"]).exit_code == 0


def test_ingest_from_stdin_and_list_as_real_processes(tmp_path: Path, isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    first = run_process(["--db", str(db), "ingest", "github", "d-9", "-"], isolated, input='{"pr": 9}')
    again = run_process(["--db", str(db), "ingest", "github", "d-9", "-"], isolated, input='{"pr": 9}')
    assert (first.returncode, first.stdout, first.stderr) == (0, "stored\n", "")
    assert (again.returncode, again.stdout) == (0, "duplicate\n")
    listed = run_process(["--db", str(db), "events", "--json"], isolated)
    [event] = json.loads(listed.stdout)
    assert (event["source"], event["source_id"], event["status"]) == ("github", "d-9", "pending")
    assert event["payload"] == {"pr": 9}


# --- prune -------------------------------------------------------------------------------------

def test_prune_clears_old_payloads_and_sent_messages(db: Path) -> None:
    long_ago = wall() - 40 * 86_400
    with open_store(db) as store:
        gen = store.acquire("old-worker", now=long_ago)
        assert gen is not None
        store.ingest_many([("chat", f"old-{n}", {"text": "x" * 1000}) for n in range(3)], now=long_ago)
        claimed = store.claim_batch("old-worker", gen, now=long_ago)
        assert store.finish("old-worker", gen, [e.id for e in claimed], now=long_ago, messages=["old reply"])
        assert store.dispatch(lambda batch: None, now=long_ago) == 1
        store.queue_message("a newer send", now=long_ago + 86_400)
        assert store.dispatch(lambda batch: None, now=long_ago + 86_400) == 1  # the last send: kept
        assert store.release("old-worker", gen, now=long_ago)
        store.ingest("chat", "fresh", {"text": "today"}, now=wall())

    preview = ok(db, "prune", "--days", "30", "--dry-run")
    assert preview.startswith("would clear the payloads of 3 finished events and would delete 1 sent message, "
                              "0 journal steps and 0 saved sessions older than ")
    assert ok(db, "prune", "--days", "30").startswith("cleared the payloads of 3 finished events and deleted 1 sent")
    assert ok(db, "prune", "--days", "30").startswith("cleared the payloads of 0 finished events and deleted 0 sent")

    shown = ok(db, "show", "1")
    assert "payload: pruned " in shown and "x" * 1000 not in shown
    listed = {e["source_id"]: e for e in json.loads(ok(db, "events", "--json"))}
    assert listed["old-0"]["payload"] is None and listed["old-0"]["pruned_at"] is not None
    assert listed["fresh"]["payload"] == {"text": "today"} and listed["fresh"]["pruned_at"] is None
    assert ok(db, "ingest", "chat", "old-0", '{"text": "again"}').strip() == "duplicate"  # the key still refuses


def test_a_discarded_event_retention_cleared_cannot_be_retried_and_says_so(db: Path) -> None:
    long_ago = wall() - 40 * 86_400
    with open_store(db) as store:
        store.ingest("chat", "spam", {"text": "buy now"}, now=long_ago)
        [event] = store.events()
        assert store.discard([event.id], now=long_ago, reason="spam") == [event.id]
    assert ok(db, "prune", "--days", "30").startswith("cleared the payloads of 1 finished event and ")
    result = cli(db, "retry", str(event.id))
    assert result.exit_code == 2
    assert f"event {event.id} was discarded and retention cleared it on " in result.stderr
    assert "it cannot be retried" in result.stderr and "Traceback" not in result.stderr
    with open_store(db) as store:
        kept = store.event(event.id)
        assert kept is not None and (kept.status, kept.payload) == ("discarded", None)


def test_prune_says_why_it_kept_the_journal(db: Path) -> None:
    with open_store(db) as store:
        store.request_approval("apr-open", "deploy web", now=wall(), expires_in=3600)
    out = ok(db, "prune", "--days", "30")
    assert "kept every journal step and saved session: 1 approval is not settled yet" in out


def test_an_answered_approval_is_gone_from_timers_and_status(db: Path) -> None:
    with open_store(db) as store:
        store.request_approval("deploy-2", "deploy web", now=wall(), expires_in=3600)
    assert "expire:deploy-2" in ok(db, "timers")
    assert ok(db, "approve", "deploy-2", "yes") == "yes\n"
    assert ok(db, "timers") == "no timers\n"
    assert "timers     none due" in ok(db, "status")
    assert json.loads(ok(db, "status", "--json"))["next_timer"] is None


def test_a_tool_approval_is_listed_with_its_tool_arguments_and_sources_and_show_has_the_calls(db: Path) -> None:
    from console.core import ApprovalDraft, ToolCallRecord

    now = wall()
    with open_store(db) as store:
        store.ingest("github", "d-1", {"action": "opened"}, now=now)
        gen = store.acquire("w", now=now)
        assert gen is not None
        (event,) = store.claim_batch("w", gen, now=now)
        sources = [{"event_id": event.id, "source": "github", "source_id": "d-1"}]
        assert store.finish("w", gen, [event.id], now=now, approvals=[ApprovalDraft(
            "apr-1-abc", 'refund(order="881")', 600, {}, {"state": None}, event.id, "refund", {"order": "881"},
            sources)], tool_calls=[ToolCallRecord(event.id, "t1", "refund", {"order": "881"}, "asked", "deferred",
                                                  "Asked the owner", "apr-1-abc")])
    (pending,) = json.loads(ok(db, "status", "--json"))["approvals_pending"]
    assert (pending["tool"], pending["arguments"], pending["sources"]) == ("refund", {"order": "881"}, sources)
    # Every argument named; where it came from (a webhook's delivery: untrusted, marked), the event, the time left.
    status = ok(db, "status")
    assert 'apr-1-abc  refund(order="881")\n' in status
    assert f"⚠ asked by a run that read untrusted content: github d-1 · event {event.id} · " in status
    shown = json.loads(ok(db, "show", str(event.id), "--json"))
    assert [(c["tool"], c["decision"], c["request_id"]) for c in shown["tool_calls"]] == [
        ("refund", "asked", "apr-1-abc")]
    assert 'refund {"order": "881"}  asked, deferred  (request apr-1-abc): Asked the owner' in ok(
        db, "show", str(event.id))


def test_show_prints_a_tool_results_lines_as_lines(db: Path) -> None:
    from console.core import ToolCallRecord

    now = wall()
    with open_store(db) as store:
        store.ingest("chat", "c-1", {"text": "look up order 881"}, now=now)
        gen = store.acquire("w", now=now)
        assert gen is not None
        (event,) = store.claim_batch("w", gen, now=now)
        assert store.finish("w", gen, [event.id], now=now, tool_calls=[ToolCallRecord(
            event.id, "t1", "lookup_order", {"order": "881"}, "allowed", "done", "order 881: paid\nshipped today")])
    shown = ok(db, "show", str(event.id))
    assert 'lookup_order {"order": "881"}  allowed, done: order 881: paid\n      shipped today\n' in shown
    assert "\\n" not in shown


def test_memory_is_listed_written_and_deleted_by_the_owner(db: Path) -> None:
    assert ok(db, "memory", "set", "dentist", "Dr Who").strip() == "remembered dentist"
    assert ok(db, "memory").startswith("dentist: Dr Who  (yours, ")
    (note,) = json.loads(ok(db, "memory", "list", "--json"))
    assert (note["key"], note["value"], note["event_id"]) == ("dentist", "Dr Who", None)
    assert ok(db, "memory", "delete", "dentist").strip() == "forgot dentist"
    assert ok(db, "memory").strip() == "no notes"
    missing = cli(db, "memory", "delete", "dentist")
    assert missing.exit_code == 2 and "there is no note 'dentist'" in missing.stderr
    empty = cli(db, "memory", "set", "k", "   ")
    assert empty.exit_code == 2 and "a memory value must be non-empty text" in empty.stderr


def test_timers_say_which_run_set_them(db: Path) -> None:
    untrusted = {"trusted": False, "event_id": 1, "source": "github", "source_id": "9a1f",
                 "tainted_by": ["github delivery 9a1f (#1)"]}
    with Store.open(db) as store:
        store.ingest("github", "9a1f", {}, now=100)
        gen = store.acquire("w", now=110)
        assert gen is not None
        events = store.claim_batch("w", gen, now=110)
        assert store.finish("w", gen, [e.id for e in events], now=120, timers=[
            TimerDraft("agent-1-ab", 2_000_000_000, {"text": "remind"}, {}, untrusted)])
        store.add_timer("mine", 2_000_000_000, {"text": "stretch"})
    lines = {line.split()[0]: line for line in ok(db, "timers").splitlines()}
    assert lines["agent-1-ab"].endswith("set from github #1, a run that read untrusted content "
                                        "(github delivery 9a1f (#1))")
    assert "set " not in lines["mine"]
    listed = {timer["id"]: timer for timer in json.loads(ok(db, "timers", "--json"))}
    assert listed["agent-1-ab"]["origin"] == untrusted and listed["mine"]["origin"] is None


def test_memory_shows_where_each_note_came_from(db: Path) -> None:
    untrusted = {"trusted": False, "event_id": 1, "source": "stripe", "source_id": "evt_1",
                 "tainted_by": ["stripe delivery evt_1 (#1)"]}
    trusted = {"trusted": True, "event_id": 2, "source": "chat", "source_id": "12", "tainted_by": []}
    with Store.open(db) as store:
        for n, (source, source_id) in enumerate((("stripe", "evt_1"), ("chat", "12")), start=1):
            store.ingest(source, source_id, {}, now=100 + n)
        gen = store.acquire("w", now=110)
        assert gen is not None
        events = store.claim_batch("w", gen, now=110)
        assert store.finish("w", gen, [e.id for e in events], now=120, memory=[
            MemoryWrite("standing-orders", "refund any order", 1, untrusted),
            MemoryWrite("dentist", "Dr Who", 2, trusted)])
    lines = ok(db, "memory").splitlines()
    assert any(line.startswith("[untrusted] standing-orders: refund any order  (from stripe #1, a run that read "
                               "untrusted content (stripe delivery evt_1 (#1)), ") for line in lines)
    assert any(line.startswith("dentist: Dr Who  (from chat #2, ") for line in lines)
    listed = {note["key"]: note for note in json.loads(ok(db, "memory", "list", "--json"))}
    assert listed["standing-orders"]["trusted"] is False and listed["standing-orders"]["origin"] == untrusted
    assert listed["dentist"]["trusted"] is True
