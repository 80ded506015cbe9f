"""Real processes on one inbox file: a lease race, and a worker killed with SIGKILL mid-run 50 times."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from console.core import Store
from tests.core.workers import ForkedLife, spawn

T = 1_000_000


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_processes_racing_for_the_lease_never_overlap(tmp_path: Path, inbox_target: str) -> None:
    """At least 1,000 lease requests from two processes at ticks of a shared clock.

    The proof: every generation was handed to exactly one holder; each holder saw its generations
    increase; and the last moment a generation was known live (its last renewal + TTL, or its
    release) lies before the tick at which the next generation was taken. Together: never two live
    holders at once.
    """
    db, counter = inbox_target, tmp_path / "ticks"
    ttl, rounds = 3, 500
    Store.open(db, lease_ttl=ttl).close()
    logs = {holder: tmp_path / f"{holder}.log" for holder in ("A", "B")}
    procs = [spawn("lease-race", db, counter, logs[h], h, rounds, ttl, seed, stdin=subprocess.PIPE)
             for seed, h in enumerate(logs)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err

    holder_of: dict[int, str] = {}
    start: dict[int, int] = {}
    live_until: dict[int, int] = defaultdict(int)
    outcomes: Counter[str] = Counter()
    for holder, path in logs.items():
        records = read_log(path)
        requests = sum(r["kind"] in ("blocked", "renew", "acquire") for r in records)
        assert rounds <= requests < rounds * 10, f"{holder} made {requests} requests: the race never got going"
        gens_seen = [r["gen"] for r in records if r["kind"] in ("acquire", "renew")]
        assert gens_seen == sorted(gens_seen), f"{holder} saw its generations go backwards"
        for record in records:
            outcomes[record["kind"]] += 1
            gen = record.get("gen")
            if record["kind"] == "acquire":
                assert gen not in holder_of, f"generation {gen} handed to {holder_of.get(gen)} and {holder}"
                holder_of[gen], start[gen] = holder, record["tick"]
                live_until[gen] = max(live_until[gen], record["tick"] + ttl)
            elif record["kind"] == "renew":
                assert holder_of[gen] == holder
                live_until[gen] = max(live_until[gen], record["tick"] + ttl)
            elif record["kind"] == "release" and record["ok"]:
                live_until[gen] = min(live_until[gen], record["tick"] - 1)
            elif record["kind"] == "release":
                # Refused: the lease was no longer this holder's. Either the other process took over meanwhile,
                # or it lapsed before the release's tick (a loaded machine can keep this process off the CPU
                # while the other moves the shared clock past its TTL, then finish racing). Nothing else.
                assert _taken_later(logs, holder, gen) or record["tick"] > live_until[gen], record

    gens = sorted(holder_of)
    assert gens == list(range(1, len(gens) + 1))  # no generation skipped or repeated
    for gen in gens[1:]:
        assert live_until[gen - 1] < start[gen], (
            f"generation {gen} ({holder_of[gen]}) was taken at tick {start[gen]} while generation "
            f"{gen - 1} ({holder_of[gen - 1]}) was live until {live_until[gen - 1]}"
        )
    # The race really happened: both took the lease from each other, and both were refused.
    switches = sum(holder_of[g] != holder_of[g - 1] for g in gens[1:])
    assert switches >= 20 and outcomes["blocked"] >= 20 and outcomes["renew"] >= 20, (switches, outcomes)

    with Store.open(db) as store:
        log = store.lease_log(limit=10_000)
        assert sorted({gen for _, kind, _, gen, _ in log if kind in ("acquire", "takeover")}) == gens
        assert all(holder_of[gen] == holder for _, kind, holder, gen, _ in log if kind != "release")
        assert store.integrity_check() == "ok"


def _taken_later(logs: dict[str, Path], holder: str, gen: int) -> bool:
    """Whether another process acquired a generation newer than gen (read from its log)."""
    return any(
        r["kind"] == "acquire" and r["gen"] > gen
        for other, path in logs.items() if other != holder for r in read_log(path)
    )


def run_until_killed(proc: ForkedLife, lines_before_kill: int) -> list[str]:
    """Read the worker's progress lines and SIGKILL it after the chosen number (or let it end)."""
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line.strip())
        if len(seen) >= lines_before_kill:
            proc.send_signal(signal.SIGKILL)
            break
    proc.communicate(timeout=30)
    return seen


def test_a_worker_killed_mid_run_50_times_loses_and_repeats_nothing(tmp_path: Path, inbox_target: str) -> None:
    db, effects = inbox_target, tmp_path / "effects.log"
    effects.touch()
    rng = random.Random(20260329)
    ttl, steps = 30, 2
    now = T
    kills = 0
    with Store.open(db) as store:
        for life in range(50):
            store.ingest_many([("chat", f"m-{life}-{n}", {"n": n}) for n in range(2)], now=now)
            proc = ForkedLife("worker", db, effects, f"W{life}", now, steps)
            # A life prints at least nine lines (its two fresh events: claimed, two steps and finished each; the
            # empty claim; idle). Killed after one of the first seven, it dies before its last claim; after the
            # eighth or later its exit could outrun the kill, and how many lines a life prints depends on how far
            # the lives before it got (more on a faster disk), so a count of kills would rest on timing.
            seen = run_until_killed(proc, rng.randint(1, 7))
            kills += proc.returncode == -signal.SIGKILL
            assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read() if proc.stderr else ""
            assert seen and seen[0].startswith("claimed"), seen  # each life took the lease over
            now += ttl + 1  # past the dead worker's lease
        assert kills >= 45  # the lives really died mid-run (a test process descheduled at a kill may lose one)

        # Unkilled workers drain the inbox; each comes later, past the backoff of what its takeover sent back.
        for drain in range(5):
            last = ForkedLife("worker", db, effects, f"D{drain}", now, steps)
            out, err = last.communicate(timeout=60)
            assert last.returncode == 0, err
            assert out.strip().endswith("idle")
            now += ttl + 1
            if store.counts()["pending"] == 0:
                break

        events = store.events(limit=1_000)
        assert len(events) == 100
        assert {e.status for e in events} <= {"done", "dead"}
        assert store.counts()["running"] == store.counts()["pending"] == 0
        # A reply past max_messages_per_hour is held for the owner instead of queued: it still counts as the
        # one reply its event made, and must be there exactly once either way.
        written = [(m.event_id, m.body) for m in store.outbox_messages(limit=1_000)]
        written += [(m.event_id, m.body) for m in store.held_messages(limit=1_000)]
        replies = Counter(event_id for event_id, _ in written)
        for event in events:
            expected = 1 if event.status == "done" else 0
            assert replies[event.id] == expected, (event, replies[event.id])
            if event.status == "done":
                bodies = [body for event_id, body in written if event_id == event.id]
                assert bodies == [f"reply to {event.source_id}"]
                for step in range(steps):
                    journal = store.journal_step(f"{event.source_id}:step:{step}")
                    assert journal is not None and journal.state == "committed"
            else:
                assert event.attempts == 3 and event.error
        # A side effect repeats only when a worker died between executing it and committing it.
        lines = Counter(line.split(" gen=")[0] for line in effects.read_text().splitlines())
        for key, count in lines.items():
            journal = store.journal_step(key)
            if journal is not None:
                assert count <= journal.executions, (key, count, journal)
        assert sum(lines.values()) - len(lines) <= kills
        assert store.integrity_check() == "ok"
        status = store.status(now=now + 60)
        assert status["takeovers"] >= 50
