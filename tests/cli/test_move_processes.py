"""A move with real processes: `agent-console serve` acknowledging signed deliveries and an `ingest` loop keep
writing to the source while `agent-console migrate` copies it into PostgreSQL. Every key acknowledged is in the
target afterwards; every write that was not taken was refused with a signal to try again (503 + Retry-After for a
webhook, exit 2 and a "being moved" or "moved" line for the CLI)."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from console.core import Store, StoreError
from console.core.copy import _columns, _write_mark
from tests.cli.helpers import ROOT, assert_user_error, isolated_env, run_process
from tests.edges.signing import SECRETS, sign
from tests.support import wait_until

T = 1_700_000_000
CONFIG = """
[webhooks]
enabled = true
host = "127.0.0.1"
port = 0
[webhooks.sources.github]
verifier = "github"
secret_env = "MOVE_TEST_GITHUB_SECRET"
"""
# Enough rows that the copy takes a while: the writers get to write while it runs.
BACKLOG = 20_000
KILLS = 8


@dataclass
class Tally:
    acknowledged: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # source, source id, the refusal
    wrong: list[str] = field(default_factory=list)  # an answer that is neither: the test fails on it
    during_move: int = 0  # answers given while migrate ran


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _fill(db: Path) -> None:
    with Store.open(db) as store:
        for start in range(0, BACKLOG, 5_000):
            store.ingest_many([("backlog", f"b-{n}", {"n": n, "text": "x" * 200})
                               for n in range(start, start + 5_000)], now=T)


def test_nothing_acknowledged_during_a_move_is_lost(tmp_path: Path, postgres_url: str) -> None:
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    config.write_text(CONFIG)
    _fill(db)
    env = isolated_env(tmp_path / "home", MOVE_TEST_GITHUB_SECRET=SECRETS["github"])
    base = [sys.executable, "-m", "console", "--db", str(db), "--config", str(config)]
    serve = subprocess.Popen([*base, "serve"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    tally = Tally()
    moving = threading.Event()
    stop = threading.Event()
    log: list[str] = []
    try:
        assert serve.stderr is not None
        reader = threading.Thread(target=lambda: log.extend(iter(serve.stderr.readline, "")), daemon=True)
        reader.start()
        found = wait_until(lambda: re.search(r"listening on (http://127\.0\.0\.1:\d+)", "".join(log)),
                           "serve to listen", limit=30)
        address = found.group(1)

        def deliveries() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"hook-{n}"
                # A body of its own: the same signed body again would be refused as a replay.
                body = b'{"repository": {"full_name": "me/agent"}, "sender": {"login": "eve"}, "n": %d}' % n
                status, headers, answer = _post(f"{address}/hooks/github", body,
                                                sign("github", body, now=int(time.time()), delivery_id=key))
                tally.during_move += moving.is_set()
                if status == 200 and answer == b'{"stored": true}':
                    tally.acknowledged.append(("github", key))
                elif status == 503 and headers.get("Retry-After", "").isdigit():
                    tally.refused.append(("github", key, answer.decode()))
                else:
                    tally.wrong.append(f"{key}: {status} {headers} {answer!r}")
                stop.wait(0.005)  # pacing: a sender, not a flood

        def ingests() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"cli-{n}"
                done = subprocess.run([*base, "ingest", "chat", key, '{"text": "hello"}'], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=60)
                tally.during_move += moving.is_set()
                if done.returncode == 0 and done.stdout.strip() == "stored":
                    tally.acknowledged.append(("chat", key))
                elif done.returncode == 2 and re.search(r"is being moved|was moved", done.stderr) \
                        and len(done.stderr.splitlines()) == 1:
                    tally.refused.append(("chat", key, done.stderr))
                else:
                    tally.wrong.append(f"{key}: exit {done.returncode} {done.stdout!r} {done.stderr!r}")

        writers = [threading.Thread(target=deliveries), threading.Thread(target=ingests)]
        for writer in writers:
            writer.start()
        wait_until(lambda: len(tally.acknowledged) >= 5, "the writers to be acknowledged before the move")
        moving.set()
        migrate = subprocess.run([*base, "migrate", "--from", str(db), "--to", postgres_url], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
        moving.clear()
        # The writers keep going a little after the move: the old inbox must take nothing more.
        after = len(tally.acknowledged) + len(tally.refused)
        wait_until(lambda: len(tally.acknowledged) + len(tally.refused) >= after + 4, "writes after the move")
        stop.set()
        for writer in writers:
            writer.join(timeout=60)
    finally:
        stop.set()
        serve.terminate()
        serve.wait(timeout=30)

    assert migrate.returncode == 0, migrate.stderr
    assert tally.wrong == []
    assert tally.during_move > 0, "no write was tried while migrate ran"
    assert any("was moved to" in answer for name, _, answer in tally.refused if name == "chat")  # after the move
    # A sender is told to deliver again, and nothing of where the inbox went; serve's log says where.
    told = '{"error": "this inbox is being moved or was moved: deliver again later"}'
    refusals = {answer for name, _, answer in tally.refused if name == "github"}
    assert told in refusals and all(answer == told or "busy" in answer for answer in refusals), refusals
    assert any("detail=this inbox is being moved to postgresql://" in line for line in log)
    with Store.open(postgres_url) as target:
        missing = [key for key in tally.acknowledged if target.find_event(*key) is None]
    assert missing == [], f"{len(missing)} of {len(tally.acknowledged)} acknowledged keys are not in the target"
    with Store.open(db, read_only=True) as source:
        assert all(source.find_event(source_name, key) is None for source_name, key, _ in tally.refused)


def _state(db: Path, url: str) -> tuple[object, object]:
    """The marks a stopped migrate left: (the source's, the target's), each a state or None."""
    with Store.open(db, read_only=True) as source:
        source_mark = source.move_mark()
    try:
        with Store.open(url, read_only=True) as target:
            target_mark = target.move_mark()
    except StoreError:  # the target's schema was not made yet
        return (source_mark and source_mark[0], "none")
    return (source_mark and source_mark[0], target_mark and target_mark[0])


def test_migrate_killed_at_random_points_and_run_again_ends_complete_and_verified(tmp_path: Path,
                                                                                 postgres_url: str) -> None:
    db = tmp_path / "inbox.db"
    _fill(db)
    env = isolated_env(tmp_path / "home")
    command = [sys.executable, "-m", "console", "migrate", "--from", str(db), "--to", postgres_url]
    rng = random.Random(25)
    left: list[tuple[float, object]] = []
    for _ in range(KILLS):
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        delay = rng.uniform(0.1, 3.0)
        try:
            proc.wait(timeout=delay)  # the kill point: this long after the start, unless it ended first
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL) and "Traceback" not in err, err
        left.append((round(delay, 2), _state(db, postgres_url)))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (left, done.stderr)
    assert re.search(r"all 20,000 event keys verified", done.stdout), done.stdout
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "the move was already done" in again.stdout, again.stdout + again.stderr
    with Store.open(db, read_only=True) as source, Store.open(postgres_url, read_only=True) as target:
        assert source.move_mark() is not None and source.move_mark()[:2] == ("moved", postgres_url)  # type: ignore[index]
        assert target.move_mark() is None
        assert target.counts() == source.counts()
        keys = "SELECT id, source, source_id FROM inbox ORDER BY id"
        assert [tuple(r) for r in source.connection.execute(keys)] == \
            [tuple(r) for r in target.connection.execute(keys)]
    print("kill points and what they left (source mark, target mark):", left)


def test_an_unfinished_copy_and_a_moved_inbox_take_no_work(tmp_path: Path) -> None:
    """`run`, `serve` and `ingest` on a target a migrate has not finished, or on a source it moved: one line each,
    exit 2, before anything listens or claims."""
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = isolated_env(tmp_path / "home", MOVE_TEST_GITHUB_SECRET=SECRETS["github"])
    copy, moved = tmp_path / "copy.db", tmp_path / "moved.db"
    for path, state, other, said in [
        (copy, "incomplete", "/old/inbox.db", "this inbox is an unfinished copy from /old/inbox.db"),
        (moved, "moved", "postgresql://me@db/agent?schema=ada", "this inbox was moved to postgresql://me@db/agent"),
    ]:
        with Store.open(path) as store:
            store.ingest("chat", "m-1", {}, now=T)
            with store.storage.transaction(guarded=False):
                _write_mark(store, state, other, T)
        for command in (["run"], ["serve", "--port", "0"], ["ingest", "chat", "m-2"]):
            done = run_process(["--db", str(path), "--config", str(config), *command], env, timeout=60)
            assert_user_error(done.returncode, done.stdout, done.stderr, said)
            assert "listening" not in done.stdout + done.stderr
        with Store.open(path, read_only=True) as store:
            assert [e.source_id for e in store.events()] == ["m-1"] and store.lease() is None


def test_an_engine_frozen_through_a_move_takes_no_work_when_it_wakes(tmp_path: Path, postgres_url: str) -> None:
    """An engine frozen (SIGSTOP, a closed lid) past its lease: migrate may move the inbox. Woken, the engine's
    renewals, claims and finishes are refused ("moved"): the source stays exactly what was copied."""
    db = tmp_path / "inbox.db"
    env = isolated_env(tmp_path / "home", AGENT_CONSOLE_LEASE_TTL="2")
    log = tmp_path / "run.log"
    with log.open("w") as handle:
        engine = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=handle)
        try:
            wait_until(lambda: "mode: active" in log.read_text(), "the engine to hold the lease")
            engine.send_signal(signal.SIGSTOP)
            with Store.open(db) as store:
                store.ingest_many([("chat", f"m-{n}", {"text": "hello"}) for n in range(3)], now=int(time.time()))
                wait_until(lambda: (lease := store.lease()) is not None and lease.until < time.time() - 1,
                           "the frozen engine's lease to lapse", limit=30)
            migrate = subprocess.run([sys.executable, "-m", "console", "migrate", "--from", str(db), "--to",
                                      postgres_url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert migrate.returncode == 0, migrate.stderr
            engine.send_signal(signal.SIGCONT)
            wait_until(lambda: "this inbox was moved to" in log.read_text(), "the woken engine to meet the mark")
        finally:
            engine.send_signal(signal.SIGCONT)
            engine.kill()
            engine.wait(timeout=30)
    with Store.open(db, read_only=True) as old, Store.open(postgres_url, read_only=True) as new:
        for table in ("inbox", "attempts", "lease", "lease_log", "refused_finishes", "journal", "outbox"):
            names = ", ".join(_columns(old, table))
            assert sorted(map(tuple, old.connection.execute(f"SELECT {names} FROM {table}")), key=repr) == \
                sorted(map(tuple, new.connection.execute(f"SELECT {names} FROM {table}")), key=repr), table
        assert [e.status for e in old.events()] == ["pending"] * 3
