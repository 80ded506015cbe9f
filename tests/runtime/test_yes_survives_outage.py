"""An owner's yes survives a passing outage of its tool's server (issue 37 item 1).

Real processes: `agent-console run` resumes an approved refund while the shop's MCP server exits at every
start (tests/agents/flaky_shop.py). The call is never sent, so the yes is not spent: the answer's event waits,
tried again with the run's backoff, costing no attempt; once the server starts again the refund is made, once.
If the server is still down at the approval's deadline the answer is parked as a stranded answer whose message
says the call was not made and how to run it; `retry` then runs it once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from console.agents.base import RunContext
from console.core import Store
from tests.cli.helpers import invoke
from tests.runtime.test_stranded_answers import run_engine, settings_env, shop_state, stop
from tests.support import inbox_until

ROOT = Path(__file__).resolve().parents[2]


def flaky_shop(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path, Path]:
    """The config naming the flaky shop as server `shop`; (its state file, its down flag, its starts log). The
    server runs in its sandbox: the three files live in its data_dir, its one writable folder (tmp_path holds the
    inbox, which the sandbox hides), and the checkout is shown to it."""
    folder = tmp_path / "shop-data"
    folder.mkdir(mode=0o700)
    state, down, starts = folder / "shop.json", folder / "shop.down", folder / "shop.starts"
    config = Path(env["XDG_CONFIG_HOME"]) / "agent-console" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "[mcp_servers.shop]\n"
        f"command = {json.dumps(sys.executable)}\n"
        'args = ["-m", "tests.agents.flaky_shop"]\n'
        "connect_timeout = 20\n"
        f"data_dir = {json.dumps(str(folder))}\n"
        f"read_paths = [{json.dumps(str(ROOT))}]\n"
        f"env = {{ SHOP_STATE = {json.dumps(str(state))}, SHOP_DOWN = {json.dumps(str(down))}, "
        f"SHOP_STARTS = {json.dumps(str(starts))}, PYTHONPATH = {json.dumps(str(ROOT))} }}\n",
        encoding="utf-8")
    down.touch()
    return state, down, starts


def answer_yes_to_a_refund(target: str, now: int, expires_in: int) -> int:
    """A run asks to refund order 881 (deadline now + expires_in) and the owner says yes at once: the event
    carrying the answer."""
    with Store.open(target) as store:
        store.ingest("chat", "m1", {"text": "refund order 881 please"}, now=now)
        gen = store.acquire("asker", now=now)
        assert gen is not None
        ctx = RunContext(store, store.claim_batch("asker", gen, now=now), now, "asker", gen,
                         approval_expiry=expires_in)
        ctx.ask('mcp__shop__refund(order="881")', tool="mcp__shop__refund", arguments={"order": "881"})
        assert ctx.finish() and store.release("asker", gen, now=now)
        (approval,) = store.pending_approvals()
        assert store.answer_approval(approval.request_id, "yes", now=now, via="cli") == "yes"
        answer = store.find_event("approval", approval.request_id)
        assert answer is not None
        return answer.id


def unsent_tries(store: Store, event_id: int) -> list[Any]:
    return [a for a in store.history(event_id) if a.kind == "unsent"]


def test_a_yes_resumed_while_its_server_cannot_start_is_kept_and_runs_once_when_the_server_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite (the rule's both backends: tests/core/test_stranded_answers.py)."""
    inbox_target = str(tmp_path / "inbox.db")
    env = settings_env(tmp_path, inbox_target, monkeypatch)
    state, down, starts = flaky_shop(tmp_path, env)
    answer = answer_yes_to_a_refund(inbox_target, int(time.time()), expires_in=3600)

    engine = run_engine(env)
    try:
        # Tried twice while the server exits at start: each try gives its attempt back and waits.
        inbox_until(inbox_target, lambda s: len(unsent_tries(s, answer)) >= 2, "two tries that could not send")
        with Store.open(inbox_target) as store:
            event = store.event(answer)
            assert event is not None and event.status in ("pending", "running") and event.attempts <= 1
            assert store.event_replies(answer) == []  # no "Failed: ...": nothing is over yet
            assert store.journal_step(f"tool:{event.source_id}") is None  # the call was never sent
            assert "was not sent: mcp__shop__refund" in unsent_tries(store, answer)[0].detail
        assert "down" in starts.read_text() and shop_state(state).get("calls", {}).get("refund") is None

        down.unlink()  # the server is back
        inbox_until(inbox_target, lambda s: (e := s.event(answer)) is not None and e.status == "done",
                    "the answer's event done")
    finally:
        stop(engine)
    after = shop_state(state)
    assert after["calls"]["refund"] == 1 and after["orders"]["881"]["refunded"] == 42.5
    with Store.open(inbox_target) as store:
        bodies = [m.body for m in store.event_replies(answer)]
        step = store.journal_step(f"tool:{store.event(answer).source_id}")  # type: ignore[union-attr]
    assert len(bodies) == 1 and bodies[0].startswith('Done: mcp__shop__refund(order="881")'), bodies
    assert step is not None and (step.state, step.executions) == ("committed", 1)


def test_a_yes_whose_server_stays_down_past_the_approvals_deadline_is_stranded_and_retry_runs_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = str(tmp_path / "inbox.db")
    env = settings_env(tmp_path, target, monkeypatch)
    state, down, _starts = flaky_shop(tmp_path, env)
    # A deadline a few seconds off: the engine tries while the server is down until then, and a try at or past it
    # parks the answer (core/drain.py's _answer_not_sent), so an engine slow to start meets the same end.
    answer = answer_yes_to_a_refund(target, int(time.time()), expires_in=3)

    engine = run_engine(env)
    try:
        dead = inbox_until(target, lambda s: (e := s.event(answer)) is not None and e.status == "dead" and e,
                           "the answer parked dead at the approval's deadline")
        assert dead.dead_reason == "unsent"
        with Store.open(target) as store:
            (told,) = store.event_replies(answer)
            (stranded,) = store.stranded_answers()
        assert told.urgent and "the call was not made" in told.body and "Nothing was done" in told.body
        assert f"`agent-console retry {answer}` runs it, once" in told.body
        assert (stranded.event_id, stranded.call) == (answer, "not_run")
        status = json.loads(invoke(["status", "--json"], env=env).output)
        assert [(s["event_id"], s["call"]) for s in status["stranded_answers"]] == [(answer, "not_run")]
        assert shop_state(state).get("calls", {}).get("refund") is None

        down.unlink()
        assert invoke(["retry", str(answer)], env=env).exit_code == 0
        inbox_until(target, lambda s: (e := s.event(answer)) is not None and e.status == "done",
                    "the retried answer done")
    finally:
        stop(engine)
    assert shop_state(state)["calls"]["refund"] == 1
