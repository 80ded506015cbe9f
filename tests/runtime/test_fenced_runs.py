"""Fenced runs with real engine processes (issue 8): a worker frozen with SIGSTOP or killed with SIGKILL can
never make the owner's approval run something else, ask twice, or write anything after it lost its lease.

The engines are real `agent-console run` processes on one inbox file; the Claude agent talks to a stand-in
Messages API on 127.0.0.1 that holds a reply until the test lets it go.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from aiohttp import web

from console.core import Store
from tests.agents.stand_in import text, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.core.workers import spawn
from tests.support import inbox_until

ROOT = Path(__file__).resolve().parents[2]
TTL = 3


class HeldClaude:
    """POST /v1/messages, answered by a function of the request's arrival number. A reply can be held
    until the test releases it (a model call in flight while its worker is frozen)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: dict[int, list[dict[str, Any]]] = {}
        self.held: dict[int, asyncio.Event] = {}
        self.arrived = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""

    def script(self, number: int, *blocks: dict[str, Any], hold: bool = False) -> None:
        self.replies[number] = list(blocks)
        if hold:
            self.held[number] = asyncio.Event()

    def release(self, number: int) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.held[number].set)

    def wait_for_requests(self, count: int, limit: float = 60.0) -> None:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=limit):
                raise AssertionError(f"only {len(self.requests)} model requests arrived, expected {count}")

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self.arrived:
            self.requests.append(body)
            number = len(self.requests)
            self.arrived.notify_all()
        if number in self.held:
            await self.held[number].wait()
        blocks = self.replies.get(number)
        if blocks is None:
            return web.json_response({"type": "error", "error": {"type": "api_error", "message": "unscripted"}},
                                     status=500)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        return web.json_response({
            "id": f"msg_{number}", "type": "message", "role": "assistant", "model": "claude-test",
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        })


@pytest.fixture
def held_claude() -> Iterator[HeldClaude]:
    fake = HeldClaude()
    loop = asyncio.new_event_loop()
    fake.loop = loop
    app = web.Application()
    app.router.add_post("/v1/messages", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock, shutdown_timeout=0.1).start())
    fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        for gate in fake.held.values():
            loop.call_soon_threadsafe(gate.set)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


FIXTURE_TOOLS = ROOT / "tests" / "fixtures" / "tools"  # a dist-info whose entry points are Python tools


def engine_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{FIXTURE_TOOLS}", XDG_CONFIG_HOME=str(tmp_path / "config"),
               AGENT_CONSOLE_LEASE_TTL=str(TTL), AGENT_CONSOLE_BACKOFF_BASE="0",
               AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *", TEST_SHOP_LOG=str(tmp_path / "tool-calls.log"),
               AGENT_CONSOLE_PERMISSIONS='{"ask": ["refund", "delete_branch"]}')
    env.update(extra)
    return env


def cli(db: str | Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", "--db", str(db), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "engines.log"

    def start(env: dict[str, str], db: str | Path | None = None) -> subprocess.Popen[bytes]:
        target = str(db if db is not None else tmp_path / "inbox.db")
        with log.open("ab") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "console", "--db", target, "run"],
                                    cwd=ROOT, env=env, stdout=sink, stderr=sink)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)


def test_a_frozen_worker_cannot_replace_the_approved_action_with_its_own(
    tmp_path: Path, inbox_target: str, held_claude: HeldClaude, engines: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """The review's repro: engine A is frozen while its model call is in flight; B takes over, asks the same
    turn and gets a call to delete branch old-ui, which the owner is shown; A wakes and its call returns a
    refund of order 881. A's late reply must never count: the owner's yes runs exactly the call the owner saw,
    once (the tools are real Python tools installed through entry points; each call that reaches one is a
    line in a log file)."""
    db = inbox_target
    env = engine_env(tmp_path, AGENT_CONSOLE_AGENT="claude", AGENT_CONSOLE_CLAUDE_BASE_URL=held_claude.url,
                     ANTHROPIC_API_KEY=FAKE_KEY)
    held_claude.script(1, tool("a1", "refund", order="881"), hold=True)  # A's call, held in flight
    held_claude.script(2, tool("b1", "delete_branch", branch="old-ui"))  # B's call of the same turn
    held_claude.script(3, text("Done."))                                 # resumed on yes, with the result
    assert cli(db, env, "ingest", "chat", "m-1", '{"text": "tidy up the repo"}').stdout.strip() == "stored"

    first = engines(env, db)
    held_claude.wait_for_requests(1)
    first.send_signal(signal.SIGSTOP)  # the closed lid, with the model call in flight
    engines(env, db)
    (approval,) = inbox_until(db, lambda s: s.pending_approvals(), what="B's approval")
    assert (approval.tool, approval.arguments) == ("delete_branch", {"branch": "old-ui"})
    event = inbox_until(db, lambda s: (e := s.find_event("chat", "m-1")) and e.status == "done" and e,
                        what="B's finish")

    held_claude.release(1)
    first.send_signal(signal.SIGCONT)
    # A's reply arrives and its commit is refused (recorded): it learns it is fenced and stops.
    refused = inbox_until(db, lambda s: [r for r in s.refused_finishes() if r.kind == "commit"], what="A's refusal")
    assert refused[0].detail == f"claude:{event.id}:turn:1" and refused[0].gen == 1
    inbox_until(db, lambda s: [r for r in s.refused_finishes() if r.kind == "finish"], what="A's refused finish")
    with Store.open(db, check=False) as store:
        assert [a.tool for a in store.pending_approvals()] == ["delete_branch"]
        turn = store.journal_step(f"claude:{event.id}:turn:1")
        assert turn is not None and turn.gen == 2 and "delete_branch" in str(turn.result)
        session = store.load_session(approval.request_id)
        assert "refund" not in str(session)

    answered = cli(db, env, "approve", approval.request_id, "yes")
    assert answered.stdout.strip() == "yes", answered.stderr
    performed = inbox_until(db, lambda s: (p := s.journal_step(f"tool:{approval.request_id}"))
                         and p.state == "committed" and p, what="the approved call")
    assert performed.result == "deleted old-ui" and performed.executions == 1
    inbox_until(db, lambda s: s.counts()["done"] == 2, what="the resumed run's finish")
    assert (tmp_path / "tool-calls.log").read_text().splitlines() == ["delete_branch old-ui"]
    with Store.open(db, check=False) as store:
        steps = store.connection.execute("SELECT idem_key, result FROM journal").fetchall()
        assert "881" not in str(steps)
        bodies = [m.body for m in store.outbox_messages()]
        assert not any("refund" in body for body in bodies)
        assert sum(f"Approval needed [{approval.request_id}]" in body for body in bodies) == 1


def test_a_frozen_worker_writes_no_journal_step_after_its_lease_is_taken(
    tmp_path: Path, inbox_target: str, engines: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """A long task: A is frozen mid-task, B takes over and finishes it, A is woken. A's in-flight step and
    everything after it are refused and recorded; no row is committed under A's generation after that."""
    db = inbox_target
    env = engine_env(tmp_path)
    assert cli(db, env, "ingest", "jobs", "long-1", '{"long_task": 6}').stdout.strip() == "stored"
    first = engines(env, db)
    event_id = inbox_until(db, lambda s: (e := s.find_event("jobs", "long-1")) and e.id)
    inbox_until(db, lambda s: (step := s.journal_step(f"long:{event_id}:1")) and step.state == "committed",
             what="two chunks done by A")
    first.send_signal(signal.SIGSTOP)
    with Store.open(db, check=False) as store:
        by_a = {s.idem_key for s in store.journal_steps(event_id) if s.gen == 1 and s.state == "committed"}
    engines(env, db)
    inbox_until(db, lambda s: (e := s.event(event_id)) and e.status == "done", what="B finishing the task")
    first.send_signal(signal.SIGCONT)
    inbox_until(db, lambda s: [r for r in s.refused_finishes() if r.holder != (s.lease().holder if s.lease() else "")
                            and r.kind == "finish"], what="A's refused finish")
    with Store.open(db, check=False) as store:
        steps = store.journal_steps(event_id)
        assert [s.idem_key for s in steps if s.state == "committed"] == [f"long:{event_id}:{n}" for n in range(6)]
        assert {s.idem_key for s in steps if s.gen == 1} == by_a  # nothing committed by A after the freeze
        refusals = store.refused_finishes()
        assert {r.gen for r in refusals} == {1}
        assert {r.kind for r in refusals} <= {"commit", "step", "finish"}
        history = [a.kind for a in store.history(event_id)]
        assert history.count("refused") == len(refusals)  # every stale write is in the event's history
        assert store.status(now=int(time.time()))["refused_finishes"] == len(refusals)


def test_a_batch_killed_after_asking_asks_once_per_event_and_each_yes_performs_once(
    tmp_path: Path, engines: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """The fault audit's repro: a batch [refund 1, refund 2] asks its approvals and is killed before its finish;
    each event is then retried alone. Nothing of the killed run was written, each event asks once under an id
    anchored on itself, every request was announced, and yes to both performs each refund once."""
    db = tmp_path / "inbox.db"
    env = engine_env(tmp_path)
    for n in (1, 2):
        assert cli(db, env, "ingest", "chat", f"r-{n}", f'{{"text": "refund order {n}"}}').stdout.strip() == "stored"
    # Every write the crasher makes is fenced at its claim's time (its RunContext has no wall clock), when its lease
    # holds whatever its length: a one-second lease, which the engine after it waits out, is all it needs.
    crasher = spawn("ask-then-die", db, "crasher", 1, env=env)
    out, err = crasher.communicate(timeout=60)
    assert crasher.returncode == -signal.SIGKILL, err
    killed = json.loads(out)
    assert len(killed["claimed"]) == 2 and len(killed["asked"]) == 2
    with Store.open(db, check=False) as store:
        assert store.pending_approvals() == [] and store.outbox_messages() == []  # nothing half-asked

    engines(env)
    approvals = inbox_until(db, lambda s: len(s.pending_approvals()) == 2 and s.pending_approvals(),
                         what="both events asking again")
    inbox_until(db, lambda s: s.counts()["done"] == 2, what="both retries finished")
    with Store.open(db, check=False) as store:
        events = {e.id: e for e in store.events(source="chat")}
        assert sorted(a.request_id for a in approvals) == sorted(killed["asked"])  # the same ids as before
        for approval in approvals:
            assert approval.event_id in events
            order = events[approval.event_id].source_id[-1]
            assert (approval.tool, approval.arguments) == ("refund", {"order": order})
        bodies = [m.body for m in store.outbox_messages()]
        for approval in approvals:
            assert sum(f"[{approval.request_id}]" in body for body in bodies) == 1
        assert len(store.connection.execute("SELECT * FROM approvals").fetchall()) == 2

    for approval in approvals:
        assert cli(db, env, "approve", approval.request_id, "yes").stdout.strip() == "yes"
    inbox_until(db, lambda s: s.counts()["done"] == 4, what="both answers run")
    with Store.open(db, check=False) as store:
        performed = [store.journal_step(f"tool:{a.request_id}") for a in approvals]
        assert all(p is not None and p.state == "committed" and p.executions == 1 for p in performed)
        assert store.pending_approvals() == []
    assert sorted((tmp_path / "tool-calls.log").read_text().splitlines()) == ["refund 1 None", "refund 2 None"]


def write_lock_held(db: Path) -> bool:
    """Whether some process has held the SQLite file's write lock for a second (a frozen engine mid-write)."""
    probe = apsw.Connection(str(db))
    probe.set_busy_timeout(1_000)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except apsw.BusyError:
        return True
    finally:
        probe.close()


@pytest.mark.parametrize("seed", [11])
def test_random_kills_and_freezes_never_ask_twice_perform_twice_or_commit_stale_steps(
    tmp_path: Path, engines: Callable[..., subprocess.Popen[bytes]], seed: int
) -> None:
    """Engines killed (SIGKILL) or frozen and overtaken (SIGSTOP, a second engine, SIGCONT) at random moments
    while risky requests, long tasks and yes answers flow; then one engine drains the inbox. Each request was
    asked once, every request was announced, each yes performed its own action once, and no generation
    committed a journal step after a newer generation had started."""
    rng = random.Random(seed)
    db = tmp_path / "inbox.db"
    # Every kill mid-run costs the running events an attempt (counted at claim): with the default three, an
    # unlucky event is parked dead as poison, which is right but not what this test is about.
    env = engine_env(tmp_path, AGENT_CONSOLE_LEASE_TTL="2", AGENT_CONSOLE_MAX_ATTEMPTS="100")
    Store.open(db).close()

    def answer_all(store: Store) -> None:
        for approval in store.pending_approvals():
            store.answer_approval(approval.request_id, "yes", now=int(time.time()))

    for round_ in range(4):
        with Store.open(db, check=False) as store:
            store.ingest_many([("chat", f"r{round_}-a", {"text": f"refund order {round_}01"}),
                               ("chat", f"r{round_}-b", {"text": f"deploy web build {round_}"}),
                               ("jobs", f"r{round_}-c", {"long_task": 1})], now=int(time.time()))
            answer_all(store)
        engine = engines(env)
        time.sleep(rng.uniform(0.3, 2.0))  # a random moment to strike, not a wait for a result
        if rng.random() < 0.5:
            engine.send_signal(signal.SIGKILL)
        else:
            engine.send_signal(signal.SIGSTOP)
            with Store.open(db, check=False) as store:
                frozen = store.lease()
            frozen_gen = frozen.gen if frozen else 0
            rival = engines(env)

            def taken_over(store: Store, old: int = frozen_gen) -> bool:
                return (lease := store.lease()) is not None and lease.gen > old

            try:
                inbox_until(db, taken_over, what="a rival engine holding the lease", limit=20)
            except AssertionError:
                if not write_lock_held(db):
                    inbox_until(db, taken_over, what="a rival engine holding the lease")  # only slow
                else:
                    # Frozen inside a write transaction: SQLite cannot take its write lock back from a stopped
                    # process (PostgreSQL's server ends such a transaction, tests/core/test_postgres.py), so
                    # nobody can take over while it sleeps, and the rival gave up on the busy inbox at start
                    # (a service manager restarts it). This round's freeze becomes a kill mid-write.
                    engine.send_signal(signal.SIGKILL)
                    engine.wait(timeout=30)
                    rival.kill()
                    rival = engines(env)
                    inbox_until(db, taken_over, what="a rival engine holding the lease once the frozen one died")
            time.sleep(rng.uniform(0.0, 1.0))  # a random moment for the frozen engine to wake
            engine.send_signal(signal.SIGCONT)
            time.sleep(rng.uniform(0.0, 0.5))  # ... and to strike again
            rival.send_signal(signal.SIGKILL)
            engine.send_signal(signal.SIGKILL)

    engines(env)
    deadline = time.monotonic() + 90
    with Store.open(db, check=False) as store:
        while True:
            answer_all(store)
            counts = store.counts()
            if counts["pending"] == counts["running"] == 0 and not store.pending_approvals():
                break
            assert time.monotonic() < deadline, f"the inbox never drained: {counts}"
            time.sleep(0.1)  # polling interval for the draining engine
        chats = {e.id: e for e in store.events(source="chat", limit=1000)}
        assert all(e.status == "done" for e in chats.values()), [(e.id, e.status, e.error) for e in chats.values()]
        approvals = store.connection.execute("SELECT request_id, action, event_id, outcome FROM approvals").fetchall()
        assert sorted(event_id for _, _, event_id, _ in approvals) == sorted(chats)  # each asked once
        assert len({(event_id, action) for _, action, event_id, _ in approvals}) == len(approvals)
        bodies = [m.body for m in store.outbox_messages(limit=10_000)]
        log = tmp_path / "tool-calls.log"
        calls = log.read_text().splitlines() if log.exists() else []
        for request_id, action, _, outcome in approvals:
            # Announced once: a call to approve, or a plain question, each in its own words.
            assert sum(f"Approval needed [{request_id}]" in body or f"Question for you [{request_id}]" in body
                       for body in bodies) == 1
            assert outcome == "yes"
            if not action.startswith("refund("):
                continue  # a plain question: the answer went back, nothing ran
            performed = store.journal_step(f"tool:{request_id}")
            assert performed is not None and performed.state == "committed"
            # The tool ran as often as the journal says it was claimed: once, or again only when a kill fell
            # between its effect and its commit (at-least-once; an MCP server gets the key to dedupe on).
            order = action.split('"')[1]
            assert calls.count(f"refund {order} None") == performed.executions
        started = {gen: at for at, kind, _, gen, _ in store.lease_log(limit=1000) if kind in ("acquire", "takeover")}
        for idem_key, gen, committed_at in store.connection.execute(
                "SELECT idem_key, gen, committed_at FROM journal WHERE state = 'committed'"):
            newer = [at for g, at in started.items() if g > gen]
            assert not newer or committed_at <= min(newer), f"{idem_key} committed by stale generation {gen}"
