"""An owner's yes is never lost silently (issue 25 item 4).

The event that carries an approval's answer (source `approval`, source id = the request id) is an event like
any other: crashes mid-resume spend its attempts and park it dead. Then the approved call has not happened and,
before this, nothing said so. Real processes: the engine's own agent resumes the answer and is SIGKILLed as its
tools start, once per attempt; a real `agent-console run` finds the last claim lost and parks the event dead;
the owner is told (an urgent message, `status`, `show`); `retry` makes the real engine run the call, and the
example shop server (an MCP server over stdio that counts the refunds it really makes) refunds once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from console.agents.base import RunContext
from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings, load_settings
from console.core import Store
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.cli.helpers import invoke, isolated_env
from tests.core.workers import spawn
from tests.support import inbox_until, read_until

ROOT = Path(__file__).resolve().parents[2]


def shop_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def ask_for_a_refund(target: str, now: int) -> tuple[str, int]:
    """A run asks the owner to approve refunding order 881 (the call the built-in agent binds a refund request
    to) and finishes. Returns the request id and the asking event's id."""
    with Store.open(target) as store:
        store.ingest("chat", "m1", {"text": "refund order 881 please"}, now=now)
        gen = store.acquire("asker", now=now)
        assert gen is not None
        events = store.claim_batch("asker", gen, now=now)
        ctx = RunContext(store, events, now, "asker", gen, approval_expiry=3600)
        ctx.ask('mcp__shop__refund(order="881")', tool="mcp__shop__refund", arguments={"order": "881"})
        assert ctx.finish()
        assert store.release("asker", gen, now=now)
        (approval,) = store.pending_approvals()
        return approval.request_id, events[0].id


def crash_mid_resume(env: dict[str, str], crashes: list[str], start: int) -> list[Any]:
    """The answer's resume, killed at each of `crashes` in turn (`tools`: as its tools start; `after-call`:
    once the server answered the call, before its commit), each under a later lease generation."""
    claimed = []
    for crash, where in enumerate(crashes, start=1):
        crasher = spawn("resume-then-die", f"crasher-{crash}", start + 100 * crash, where, env=env)
        out, err = crasher.communicate(timeout=60)
        assert crasher.returncode == -signal.SIGKILL, err
        claimed.append(json.loads(out)["claimed"])
    return claimed


def settings_env(tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The engine processes' environment; this process's settings are set to the same."""
    env = isolated_env(tmp_path, AGENT_CONSOLE_DB=target, AGENT_CONSOLE_LEASE_TTL="2",
                       AGENT_CONSOLE_BACKOFF_BASE="0", AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *")
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "AGENT_CONSOLE_DB", "AGENT_CONSOLE_LEASE_TTL",
                 "AGENT_CONSOLE_BACKOFF_BASE"):
        monkeypatch.setenv(name, env[name])
    return env


@pytest.fixture
def engine_env(tmp_path: Path, inbox_target: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return settings_env(tmp_path, inbox_target, monkeypatch)


def run_engine(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "console", "run"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(engine: subprocess.Popen[str]) -> None:
    engine.send_signal(signal.SIGTERM)
    try:
        engine.wait(timeout=30)
    except subprocess.TimeoutExpired:
        engine.kill()
        engine.wait()


def test_a_yes_whose_resume_dies_in_crashes_is_told_to_the_owner_and_a_retry_runs_it_once(
    engine_env: dict[str, str], inbox_target: str
) -> None:
    env = engine_env
    shop = load_settings(None).inbox_folder / "mcp-data" / "shop" / "shop.json"  # the demo shop's data_dir
    start = int(time.time()) - 10_000  # the crashes happen at argv times before the engine's wall clock
    request_id, asker = ask_for_a_refund(inbox_target, start)
    with Store.open(inbox_target) as store:
        assert store.answer_approval(request_id, "yes", now=start + 1, via="cli") == "yes"
        answer = store.find_event("approval", request_id)
        assert answer is not None

    claims = crash_mid_resume(env, ["tools"] * 3, start)
    assert claims == [[[answer.id, "approval", attempt]] for attempt in (1, 2, 3)]

    engine = run_engine(env)
    try:
        dead = inbox_until(inbox_target, lambda s: (e := s.event(answer.id)) is not None and e.status == "dead" and e,
                           "the answer's event parked dead")
        assert dead.dead_reason == "lost" and dead.attempts == 3
        assert shop_state(shop).get("calls", {}).get("refund") is None  # the approved refund has not happened

        # The owner is told, in the transaction that parked the event: one urgent message naming the call.
        with Store.open(inbox_target) as store:
            told = [m for m in store.outbox_messages(limit=100) if m.event_id == answer.id]
            assert len(told) == 1 and told[0].urgent and told[0].approval_id is None  # a notice, not a Yes/No card
            (stranded,) = store.stranded_answers()
        body = told[0].body
        assert 'mcp__shop__refund(order="881")' in body and request_id in body
        assert f"#{answer.id}" in body and "lost in 3 crashes" in body and "was not run" in body
        assert f"agent-console retry {answer.id}" in body
        assert (stranded.request_id, stranded.event_id, stranded.outcome, stranded.call, stranded.asked_by) == \
            (request_id, answer.id, "yes", "not_run", asker)
        line = f"approved, but not run: its event #{answer.id} is dead (lost in 3 crashes) — retry #{answer.id} to " \
               "run it"
        assert stranded.in_words() == line

        status = invoke(["status"], env=env)
        assert status.exit_code == 0 and line in status.output and request_id in status.output
        as_json = json.loads(invoke(["status", "--json"], env=env).output)
        assert [(s["request_id"], s["event_id"], s["call"]) for s in as_json["stranded_answers"]] == \
            [(request_id, answer.id, "not_run")]
        shown = invoke(["show", str(answer.id)], env=env)
        assert shown.exit_code == 0 and line in shown.output
        asking = invoke(["show", str(asker)], env=env)
        assert asking.exit_code == 0 and line in asking.output
        listed = invoke(["dead"], env=env)
        assert listed.exit_code == 0 and f'yes to mcp__shop__refund(order="881"): {line}' in listed.output

        # A retry by hand: the engine runs the approved call, exactly the one on the approvals row, once.
        retried = invoke(["retry", str(answer.id)], env=env)
        assert retried.exit_code == 0, retried.output
        inbox_until(inbox_target, lambda s: (e := s.event(answer.id)) is not None and e.status == "done",
                    "the retried answer done")
    finally:
        stop(engine)
    after = shop_state(shop)
    assert after["calls"]["refund"] == 1 and after.get("replays", {}).get("refund") is None
    assert after["orders"]["881"]["refunded"] == 42.5
    with Store.open(inbox_target) as store:
        step = store.journal_step(f"tool:{request_id}")
        assert step is not None and (step.state, step.executions) == ("committed", 1)
        assert store.stranded_answers() == []
        bodies = [m.body for m in store.outbox_messages(limit=100)]
    assert sum(b.startswith('Done: mcp__shop__refund(order="881")') for b in bodies) == 1
    assert os.environ.get("AGENT_CONSOLE_DB") == inbox_target


def test_a_yes_whose_worker_died_during_the_call_is_told_unknown_and_its_retry_is_one_refund_at_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first crash falls after the shop server refunded and answered, before the journal committed; the
    next two as the tools start. The owner is told the outcome is unknown; the retry makes the call again
    under the same idempotency key, and the server, which keeps the keys it has seen, refunds once."""
    target = str(tmp_path / "inbox.db")
    env = settings_env(tmp_path, target, monkeypatch)
    shop = load_settings(None).inbox_folder / "mcp-data" / "shop" / "shop.json"  # the demo shop's data_dir
    start = int(time.time()) - 10_000
    request_id, _ = ask_for_a_refund(target, start)
    with Store.open(target) as store:
        assert store.answer_approval(request_id, "yes", now=start + 1, via="cli") == "yes"
        answer = store.find_event("approval", request_id)
        assert answer is not None
    crash_mid_resume(env, ["after-call", "tools", "tools"], start)
    assert shop_state(shop)["calls"]["refund"] == 1  # the refund happened; nothing in the inbox says so

    engine = run_engine(env)
    try:
        inbox_until(target, lambda s: (e := s.event(answer.id)) is not None and e.status == "dead",
                    "the answer's event parked dead")
        with Store.open(target) as store:
            (stranded,) = store.stranded_answers()
            (told,) = [m.body for m in store.event_replies(answer.id)]
        assert stranded.call == "unknown"
        assert told.startswith(f'Your yes to mcp__shop__refund(order="881") (request {request_id}) may not have '
                               "been carried out")
        assert invoke(["retry", str(answer.id)], env=env).exit_code == 0
        inbox_until(target, lambda s: (e := s.event(answer.id)) is not None and e.status == "done",
                    "the retried answer done")
    finally:
        stop(engine)
    after = shop_state(shop)
    assert (after["calls"]["refund"], after["replays"]["refund"]) == (1, 1)  # the repeat answered from its record
    assert after["orders"]["881"]["refunded"] == 42.5
    with Store.open(target) as store:
        step = store.journal_step(f"tool:{request_id}")
        assert step is not None and (step.state, step.executions) == ("committed", 2)

async def test_a_declined_answer_retried_after_its_event_died_never_runs_the_call(tmp_path: Path) -> None:
    """A no whose event died is retried by hand: the conversation resumes and reports the refusal; the refund is
    never asked of the shop server, under any key."""
    db, shop = tmp_path / "inbox.db", tmp_path / "mcp-data" / "shop" / "shop.json"
    start = 1_790_000_000
    with Store.open(db, lease_ttl=60, max_attempts=1) as store:
        request_id, _ = ask_for_a_refund(str(db), start)
        assert store.answer_approval(request_id, "no", now=start + 1, via="cli") == "no"
        answer = store.find_event("approval", request_id)
        assert answer is not None
        for holder, at in (("crashed", start + 100), ("next", start + 200)):  # the one attempt is lost in a crash
            gen = store.acquire(holder, now=at)
            assert gen is not None
            store.claim_batch(holder, gen, now=at)
        assert store.event(answer.id).status == "dead"  # type: ignore[union-attr]
        assert store.stranded_answer(answer.id).call is None  # type: ignore[union-attr]
        assert store.release("next", gen, now=start + 200)
    settings = Settings(db=db, approval_expiry=600, instructions=tmp_path / "none.md")
    engine = build_engine(settings, clock=ManualClock(start + 300), holder="w", idle_cap=0.1,
                          install_defaults=False)
    await engine.start()
    try:
        with Store.open(db) as store:
            assert store.retry_dead(answer.id, now=start + 300)
        said = await read_until(engine, lambda s: [m.body for m in s.event_replies(answer.id)
                                                   if m.body.startswith("Nothing done")])
    finally:
        await engine.stop()
    assert said == [f'Nothing done: mcp__shop__refund(order="881") was declined ({request_id})']
    with Store.open(db) as store:
        assert store.event(answer.id).status == "done"  # type: ignore[union-attr]
        assert store.journal_step(f"tool:{request_id}") is None and store.stranded_answers() == []
        (call,) = [c for c in store.tool_calls(answer.id)]
        assert (call.tool, call.decision, call.outcome) == ("mcp__shop__refund", "declined", "refused")
    assert shop_state(shop).get("calls", {}).get("refund") is None


async def test_a_yes_whose_call_ran_but_whose_report_kept_failing_is_told_and_never_run_twice(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Claude agent: the approved refund runs (a journal step), then the model turn that reports it fails
    on every attempt (500), so the answer's event dies. The owner hears the refund was made but not reported;
    a retry resumes the conversation and the shop server is not asked again."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    db, shop = tmp_path / "inbox.db", tmp_path / "mcp-data" / "shop" / "shop.json"
    servers = {"shop": {"command": sys.executable, "args": ["-m", "console.examples.shop_server"],
                        "env": {"SHOP_STATE": str(shop)}}}
    settings = Settings(db=db, agent="claude", claude_base_url=claude.url, mcp_servers=servers,
                        permissions={"allow": ["send_message"]}, instructions=tmp_path / "none.md",
                        max_attempts=2, backoff_base=0)
    clock = ManualClock(1_790_000_000)
    engine = build_engine(settings, clock=clock, holder="w", idle_cap=0.1, install_defaults=False)
    await engine.start()
    try:
        claude.reply(tool("t1", "mcp__shop__refund", order="881"))
        await engine.ingest("chat", "m1", {"text": "refund order 881"})
        (approval,) = await read_until(engine, lambda s: s.pending_approvals())
        # No reply is scripted for the turns after the call: the stand-in answers each with a 500.
        assert await engine.answer(approval.request_id, "yes") == "yes"
        answer = await read_until(engine, lambda s: (e := s.find_event("approval", approval.request_id))
                                  is not None and e.status == "dead" and e, "the answer's event dead")
        (stranded,) = await engine.read(lambda s: s.stranded_answers())
        told = await engine.read(lambda s: [(m.body, m.urgent) for m in s.event_replies(answer.id)])
        assert shop_state(shop)["calls"]["refund"] == 1
        assert (stranded.call, stranded.dead_reason, stranded.attempts) == ("done", "failed", 2)
        assert len(told) == 1 and told[0][1] and "was carried out, but the conversation did not resume" in told[0][0]

        claude.reply(tool("t2", "send_message", text="Refunded order 881."))
        claude.reply(text("Done."))
        with Store.open(db) as store:  # `agent-console retry`, from beside the engine
            assert store.retry_dead(answer.id, now=clock.now())
        await read_until(engine, lambda s: (e := s.event(answer.id)) is not None and e.status == "done",
                         "the retried answer done")
    finally:
        await engine.stop()
    assert shop_state(shop)["calls"]["refund"] == 1 and shop_state(shop)["orders"]["881"]["refunded"] == 42.5
    with Store.open(db) as store:
        step = store.journal_step(f"tool:{approval.request_id}")
        assert step is not None and (step.state, step.executions) == ("committed", 1)
        assert store.stranded_answers() == []
        # The conversation read the shop server's result (open-world), so its report is marked as coming from an
        # untrusted run (docs/security.md); the text is the model's own.
        assert any(m.body.endswith("\nRefunded order 881.") for m in store.outbox_messages())
