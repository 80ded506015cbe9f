"""Provider back-pressure and a configuration the provider refuses never cost an event an attempt.

The engine runs the Claude agent against the stand-in Messages API on 127.0.0.1 (tests/agents/
stand_in.py), on a ManualClock, so a wait ends when the test moves the clock.
"""

from __future__ import annotations

import email.utils
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from console.agents.claude import ClaudeAgent, ClaudeError
from console.agents.errors import AgentPaused, ProviderBusy
from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.runtime.engine import Engine
from tests.agents.stand_in import FakeClaude, text, text_of, tool
from tests.agents.test_claude_agent import FAKE_KEY, NOW, ROOT, run
from tests.cli.helpers import isolated_env, run_process
from tests.support import read_until, until

LIMIT = 60.0  # a bound for failing, never a wait


@asynccontextmanager
async def running_engine(tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch,
                         **settings: Any) -> AsyncIterator[Engine]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    config = Settings(db=tmp_path / "inbox.db", agent="claude", claude_base_url=base_url, approval_expiry=600,
                      **settings)
    engine = build_engine(config, clock=ManualClock(NOW), holder="w", idle_cap=0.05, install_defaults=False)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


async def worker_holds_off(engine: Engine, times: int = 3) -> None:
    """Let the worker pass its gate (and hold off claiming) a few more times."""
    start = engine.worker.holds
    await until(lambda: engine.worker.holds >= start + times, "the worker to hold off claiming")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_date(seconds_from_now: int) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


BUSY = {
    "429 with retry-after seconds": (lambda fake: fake.fail(
        429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
        headers={"retry-after": "45"}), range(45, 46), "the Claude API is rate limiting (429"),
    "529 overloaded, no retry-after": (lambda fake: fake.fail(529, "overloaded_error", "Overloaded"),
                                       range(30, 31), "the Claude API is overloaded (529: Overloaded)"),
    "503 with an HTTP-date retry-after": (lambda fake: fake.fail(
        503, "api_error", "Service unavailable", headers={"retry-after": http_date(120)}),
        range(118, 122), "the Claude API is overloaded (503"),
    "no connection": (None, range(30, 31), "could not reach http://127.0.0.1:"),
}


@pytest.mark.parametrize("case", list(BUSY), ids=list(BUSY))
async def test_back_pressure_keeps_every_event_pending_and_spends_no_attempt(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    script, waits, reason = BUSY[case]
    base_url = claude.url if script else f"http://127.0.0.1:{closed_port()}"
    if script:
        script(claude)
    async with running_engine(tmp_path, base_url, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        state = await read_until(engine, lambda s: s.agent_state().state == "waiting" and s.agent_state())
        assert state.until - NOW in waits and state.reason.startswith(reason)
        status = await engine.read(lambda s: s.status(now=NOW)["agent"])
        assert status == {"state": "waiting", "reason": state.reason, "until": state.until}
        (event,) = await engine.read(lambda s: s.events())
        assert (event.status, event.attempts) == ("pending", 0)
        history = await engine.read(lambda s: s.history(event.id))
        assert [(a.kind, a.detail) for a in history][-1] == ("deferred", f"not run: {state.reason}")

        # Nothing is claimed while the agent waits, not even an event that arrives meanwhile.
        await engine.ingest("chat", "m2", {"text": "still there?"})
        await worker_holds_off(engine)
        assert await engine.read(lambda s: s.counts()["pending"]) == 2
        assert len(claude.requests) == (1 if script else 0)

        if not script:
            return  # nothing listens there: the agent would only wait again
        claude.reply(tool("t1", "send_message", text="Back, and here."))
        claude.reply(text("Done."))
        assert isinstance(engine.clock, ManualClock)
        engine.clock.advance(state.until - NOW)
        engine.wake()
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        events = await engine.read(lambda s: s.events())
        assert [e.attempts for e in events] == [1, 1]  # the wait cost them nothing
        assert await engine.read(lambda s: s.status(now=engine.clock.now())["agent"]) == {
            "state": "ready", "reason": None, "until": None}
        await read_until(engine, lambda s: s.agent_state().state == "ready")  # written just after the finish


async def test_a_wait_the_provider_does_not_size_grows_while_it_keeps_pushing_back(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        claude.fail(529, "overloaded_error", "Overloaded")
    async with running_engine(tmp_path, claude.url, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        assert isinstance(engine.clock, ManualClock)
        lengths = []
        for attempt in range(1, 4):
            state = await read_until(engine, lambda s, n=attempt: s.agent_state().waits == n and s.agent_state())
            lengths.append(state.until - engine.clock.now())
            engine.clock.set(state.until)
            engine.wake()
        assert lengths == [30, 60, 120]
        (event,) = await engine.read(lambda s: s.events())
        assert (event.status, event.attempts) == ("pending", 0)


PAUSES = {
    "401 bad key": (401, "authentication_error", "invalid x-api-key", None,
                    "the Claude API refused the key (401: invalid x-api-key); check ANTHROPIC_API_KEY"),
    "403 no permission": (403, "permission_error", "Your API key does not have permission to use this model", None,
                          "the Claude API refused the key (403: Your API key does not have permission to use "
                          "this model); check ANTHROPIC_API_KEY"),
    "404 unknown model": (404, "not_found_error", "model: claude-nonesuch", None,
                          "the Claude API rejected the request (404: model: claude-nonesuch); check claude_model"),
    "400 invalid model": (400, "invalid_request_error", "invalid model name: claude-nonesuch", None,
                          "the Claude API rejected the model (400: invalid model name: claude-nonesuch); "
                          "check claude_model"),
    "429 spend limit": (429, "rate_limit_error", "You have reached your monthly spend limit",
                        "enforced_spend_limit_reached",
                        "the Claude API refused for lack of budget (429: You have reached your monthly spend "
                        "limit)"),
}


@pytest.mark.parametrize("case", list(PAUSES), ids=list(PAUSES))
async def test_a_refused_configuration_pauses_the_agent_with_one_urgent_message(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    status, kind, message, code, reason = PAUSES[case]
    claude.fail(status, kind, message, error_code=code)
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-nonesuch") as engine:
        for n in range(3):
            await engine.ingest("chat", f"m{n}", {"text": f"message {n}"})
        state = await read_until(engine, lambda s: s.agent_state().state == "paused" and s.agent_state())
        assert state.reason == reason
        assert await engine.read(lambda s: s.status(now=NOW)["agent"]) == {
            "state": "paused", "reason": reason, "until": None}
        for n in range(3, 6):  # more keep arriving while it is paused
            await engine.ingest("chat", f"m{n}", {"text": f"message {n}"})
        await worker_holds_off(engine, times=5)
        events = await engine.read(lambda s: s.events())
        assert len(events) == 6 and all((e.status, e.attempts) == ("pending", 0) for e in events)
        assert len(claude.requests) == 1  # one try found the problem; nothing since
        (notice,) = await engine.read(lambda s: s.outbox_messages())
        assert notice.urgent and notice.body.startswith(f"The agent is paused: {reason}.")
        assert "restart" in notice.body


async def test_a_restart_tries_again_and_tells_the_owner_only_of_a_new_problem(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.fail(401, "authentication_error", "invalid x-api-key")
    async with running_engine(tmp_path, claude.url, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        await read_until(engine, lambda s: s.agent_state().state == "paused")
    claude.fail(401, "authentication_error", "invalid x-api-key")
    async with running_engine(tmp_path, claude.url, monkeypatch) as engine:  # restarted, same configuration
        await read_until(engine, lambda s: len(claude.requests) == 2 and s.agent_state().state == "paused")
        assert len(await engine.read(lambda s: s.outbox_messages())) == 1  # told once
    claude.reply(tool("t1", "send_message", text="Hello again."))
    claude.reply(text("Done."))
    async with running_engine(tmp_path, claude.url, monkeypatch) as engine:  # fixed, restarted
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        (event,) = await engine.read(lambda s: s.events())
        assert event.attempts == 1
        await read_until(engine, lambda s: s.agent_state().state == "ready" and s.agent_state().notified is None)


def test_a_bad_request_that_mentions_the_model_is_still_the_events_failure(claude: FakeClaude, store: Store) -> None:
    agent = ClaudeAgent(api_key=FAKE_KEY, model="m", max_tokens=64, base_url=claude.url)
    claude.fail(400, "invalid_request_error",
                "max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for this model")
    store.ingest("chat", "m1", {"text": "hi"}, now=NOW)
    with pytest.raises(ClaudeError) as failure:
        run(agent, store)
    assert not isinstance(failure.value, ProviderBusy | AgentPaused)
    assert str(failure.value).startswith("the Claude API rejected the request (400: max_tokens: 64000 > 32000")


def test_a_timeout_is_the_events_failure_and_names_the_setting(claude: FakeClaude, store: Store) -> None:
    agent = ClaudeAgent(api_key=FAKE_KEY, model="m", max_tokens=64, base_url=claude.url, timeout=0.3)
    claude.stall()
    store.ingest("chat", "m1", {"text": "hi"}, now=NOW)
    with pytest.raises(ClaudeError) as failure:
        run(agent, store)
    assert str(failure.value) == f"no reply from {claude.url} within 0.3 s (claude_timeout)"
    assert not isinstance(failure.value, ProviderBusy | AgentPaused)


# --- a real engine process, and `status` from another -------------------------------------------

def status_of(db: Path, env: dict[str, str]) -> dict[str, Any]:
    done = run_process(["--db", str(db), "status", "--json"], env)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def read(db: Path, fn: Callable[[Store], Any]) -> Any:
    with Store.open(db, check=False) as store:
        return fn(store)


def wait_in_process(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + LIMIT
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # the polling interval of a condition check
    return result


@pytest.mark.parametrize("case", ["waiting", "paused"])
def test_status_in_another_process_shows_what_the_running_engine_obeys(
    tmp_path: Path, claude: FakeClaude, case: str
) -> None:
    if case == "waiting":
        claude.fail(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                    headers={"retry-after": "600"})
        reason = "the Claude API is rate limiting (429: Number of requests has exceeded your rate limit)"
    else:
        claude.fail(401, "authentication_error", "invalid x-api-key")
        reason = "the Claude API refused the key (401: invalid x-api-key); check ANTHROPIC_API_KEY"
    db = tmp_path / "inbox.db"
    env = isolated_env(tmp_path / "home", AGENT_CONSOLE_AGENT="claude", AGENT_CONSOLE_CLAUDE_BASE_URL=claude.url,
                       AGENT_CONSOLE_LEASE_TTL="3", ANTHROPIC_API_KEY=FAKE_KEY)
    log = tmp_path / "run.log"
    with log.open("w") as stderr:
        engine = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        assert run_process(["--db", str(db), "ingest", "chat", "m1", '{"text": "hi"}'], env).returncode == 0
        wait_in_process(lambda: read(db, lambda s: s.agent_state().state == case), f"the agent {case}")
        agent = status_of(db, env)["agent"]  # `status` is another process: it reads what the engine wrote
        assert agent["state"] == case and agent["reason"] == reason
        if case == "waiting":
            assert 595 <= agent["until"] - time.time() <= 601
        else:
            assert agent["until"] is None

        arrived = int(time.time())
        read(db, lambda s: s.ingest("chat", "m2", {"text": "anyone?"}, now=arrived))
        # The engine goes on renewing its lease (each pass renews, then stops at the agent's state) ...
        wait_in_process(lambda: read(db, lambda s: s.lease().renewed_at > arrived), "a pass after it arrived")
        # ... and claims nothing: no attempt spent, no second request.
        with Store.open(db, check=False) as store:
            events = store.events()
            notices = store.outbox_messages()
        assert [(e.status, e.attempts) for e in events] == [("pending", 0), ("pending", 0)]
        assert len(claude.requests) == 1
        assert [m.urgent for m in notices] == ([True] if case == "paused" else [])
        text = run_process(["--db", str(db), "status"], env).stdout
        assert f"agent      {'paused until the engine restarts' if case == 'paused' else 'waiting ('}" in text

        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=30) == 0
        output = log.read_text()
        assert "1 event(s) back to pending unrun" in output and "Traceback" not in output
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=30)


# --- the batch handed to one model call fits a token budget --------------------------------------

def user_turn(request: dict[str, Any]) -> str:
    return text_of(request["messages"][0]["content"])


async def test_a_batch_too_big_for_one_call_is_split_without_spending_attempts(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        claude.reply(text("Noted."))
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_batch_tokens=20_000) as engine:
        await engine.write(lambda s: s.ingest_many(
            [("github", f"d-{n}", {"log": f"{n}" * 30_000}) for n in range(5)], now=NOW))
        await read_until(engine, lambda s: s.counts()["done"] == 5)
        events = sorted(await engine.read(lambda s: s.events()), key=lambda e: e.id)
        assert [e.attempts for e in events] == [1] * 5  # handed back unrun, never counted
        turns = [user_turn(r) for r in claude.requests]
        assert [turn.count("## event ") for turn in turns] == [2, 2, 1]
        assert all(len(turn.encode()) <= 3 * 20_000 for turn in turns)  # within the budget's estimate
        history = await engine.read(lambda s: s.history(events[4].id))
        deferred = [a.detail for a in history if a.kind == "deferred"]
        assert deferred == ["did not fit one model call (claude_batch_tokens = 20000); a later run takes it"] * 2


def test_a_lone_event_over_the_budget_is_cut_to_fit(claude: FakeClaude, store: Store) -> None:
    agent = ClaudeAgent(api_key=FAKE_KEY, model="m", max_tokens=64, base_url=claude.url, batch_tokens=1_000)
    store.ingest("github", "huge", {"log": "x" * 50_000}, now=NOW)
    claude.reply(text("Too long to read; nothing to say."))
    ctx = run(agent, store)
    turn = user_turn(claude.requests[0])
    assert len(turn.encode()) <= 3 * 1_000 and "(cut: the payload has 50011 characters)" in turn
    assert ctx.deferred == {} and store.counts()["done"] == 1
