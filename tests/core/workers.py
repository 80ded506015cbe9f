"""Worker processes for the crash and race tests: `python -m tests.core.workers ROLE ARGS...`.

Each role is a real process on the real inbox file. Time is never read from the wall clock: every
`now` comes from argv or from the shared tick counter, so the tests decide what time it is.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from console.core import Batch, Store

ROOT = Path(__file__).resolve().parents[2]


def spawn(
    role: str, *args: object, stdin: int | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start one worker process from the repository root (works in any checkout)."""
    env = dict(env if env is not None else os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-m", "tests.core.workers", role, *map(str, args)],
        cwd=ROOT, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


class ForkedLife:
    """A worker life as a process forked from a server that imported console.core and psycopg once
    (multiprocessing's forkserver, one a test process): starting an interpreter and importing them took each life
    0.25 s of CPU on SQLite and 0.65 s on PostgreSQL, and the 50-kill test starts 55 lives a backend. Each life is
    still a process of its own that opened nothing before it starts (the server holds no inbox open), killed with
    a real SIGKILL; it answers what the tests ask of a subprocess.Popen: stdout, stderr, send_signal, communicate,
    returncode."""

    def __init__(self, role: str, *args: object) -> None:
        context = _forkserver()
        out_read, out_write = context.Pipe(duplex=False)
        err_read, err_write = context.Pipe(duplex=False)
        self._process = context.Process(target=_forked, args=(role, [str(arg) for arg in args], out_write, err_write),
                                        daemon=True)
        self._process.start()
        out_write.close()
        err_write.close()
        self.pid = self._process.pid
        self.stdout = os.fdopen(os.dup(out_read.fileno()), encoding="utf-8")
        self.stderr = os.fdopen(os.dup(err_read.fileno()), encoding="utf-8")
        out_read.close()
        err_read.close()

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        out, err = self.stdout.read(), self.stderr.read()  # both end when the life does
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"worker life {self.pid}", timeout or 0)
        self.stdout.close()
        self.stderr.close()
        return out, err


_FORKSERVER: Any = None


def _forkserver() -> Any:
    global _FORKSERVER
    if _FORKSERVER is None:
        import multiprocessing

        _FORKSERVER = multiprocessing.get_context("forkserver")
        _FORKSERVER.set_forkserver_preload(["console.core", "psycopg", "tests.core.workers"])
    return _FORKSERVER


def _forked(role: str, args: list[str], out: Any, err: Any) -> None:
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    out.close()
    err.close()
    ROLES[role](*args)
    sys.stdout.flush()


def append_line(path: str, line: str) -> None:
    """A side effect that survives the process: one line, flushed to the file before returning."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def next_tick(counter: str) -> int:
    """A clock shared by processes: every call returns a new, larger integer."""
    fd = os.open(counter, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 32)
        tick = int(raw or b"0") + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(tick).encode())
        return tick
    finally:
        os.close(fd)  # closing releases the lock


def journal_crash(db: str, effects: str, key: str, now: str) -> None:
    """Take the lease, run one journalled step whose side effect happens, then die before the commit."""
    store = Store.open(db, lease_ttl=10)
    gen = store.acquire("crasher", now=int(now))
    assert gen is not None

    def effect() -> Any:
        append_line(effects, f"{key} gen={gen}")
        os.kill(os.getpid(), signal.SIGKILL)  # between execute and commit

    store.run_once(key, effect, gen=gen, now=int(now))
    raise AssertionError("unreachable: the process was killed inside the step")


def ask_then_die(db: str, holder: str, ttl: str) -> None:
    """Claim a batch on the wall clock, run the offline agent over it (it asks its approvals), and die
    before the finish: a crash between a run's asks and its fenced finish."""
    from console.agents.base import RunContext
    from console.agents.offline import OfflineAgent
    from console.agents.registry import build_tools
    from console.config import load_settings

    store = Store.open(db, lease_ttl=int(ttl), check=False)
    now = int(time.time())
    gen = store.acquire(holder, now=now)
    assert gen is not None
    events = store.claim_batch(holder, gen, now=now)
    ctx = RunContext(store, events, now, holder, gen, approval_expiry=3600)
    OfflineAgent(build_tools(load_settings(None))).run(ctx)  # the tools and policy the engine would have
    print(json.dumps({"claimed": [e.id for e in events], "asked": [a.request_id for a in ctx.approvals]}),
          flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def resume_call_then_die(db: str, holder: str, ttl: str) -> None:
    """Claim the approval event that is due and resume it with the engine's own agent and tools; the real MCP
    call reaches the server and answers, and the process is killed before the journal commits its result
    (the crash point is the one line wrapped here: everything before and inside the call is the real path)."""
    from console.agents.base import RunContext
    from console.agents.registry import build_agent
    from console.config import load_settings

    store = Store.open(db, lease_ttl=int(ttl), check=False)
    now = int(time.time())
    gen = store.acquire(holder, now=now)
    assert gen is not None
    events = store.claim_batch(holder, gen, now=now)
    assert [e.source for e in events] == ["approval"], events
    agent = build_agent("offline", load_settings(None))
    hub = agent.tools._hub()  # type: ignore[attr-defined]
    real_call = hub.call

    def call_then_die(*args: Any, **kwargs: Any) -> Any:
        result = real_call(*args, **kwargs)
        print(json.dumps({"answered": result}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # after the server's answer, before the journal's commit

    hub.call = call_then_die
    agent.run(RunContext(store, events, now, holder, gen, approval_expiry=3600))
    raise AssertionError("unreachable: the process was killed inside the call")


def resume_then_die(holder: str, now: str, where: str) -> None:
    """Claim what is due at `now` (argv) in the inbox the settings name, and resume it with the engine's own
    agent and tools, dying mid-resume: `tools`, as the tools start (starting the MCP servers is a resume's
    first slow moment), before the approved call reaches its server; `after-call`, once the server has
    answered the call, before the journal commits its result."""
    from console.agents.base import RunContext
    from console.agents.registry import build_agent
    from console.config import load_settings

    settings = load_settings(None)
    store = Store.open(settings.db, options=settings.store_options())
    at = int(now)
    gen = store.acquire(holder, now=at)
    assert gen is not None
    events = store.claim_batch(holder, gen, now=at)
    print(json.dumps({"claimed": [[e.id, e.source, e.attempts] for e in events]}), flush=True)
    agent = build_agent("offline", settings)
    gateway: Any = agent.tools  # type: ignore[attr-defined]

    def die(*_args: Any, **_kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "tools":
        gateway._hub = die
    else:
        hub = gateway._hub()
        real_call = hub.call

        def call_then_die(*args: Any, **kwargs: Any) -> Any:
            real_call(*args, **kwargs)
            die()

        hub.call = call_then_die
    agent.run(RunContext(store, events, at, holder, gen, approval_expiry=3600))
    raise AssertionError("unreachable: the process was killed mid-resume")


def lease_race(db: str, counter: str, log: str, holder: str, rounds: str, ttl: str, seed: str) -> None:
    """Ask for the lease at shared ticks, writing every outcome to this process's log.

    A holder sometimes releases, sometimes stalls (stops renewing so its lease lapses under it),
    and sometimes simply renews, so both takeovers and refusals happen many times. How often they
    happen depends on how the OS interleaves the two processes, so each keeps racing past `rounds`
    requests until both have seen enough of each (a shared marker file per holder says so), up to
    ten times `rounds`: the race is then certain to have happened, however the machine schedules.
    """
    store = Store.open(db, lease_ttl=int(ttl), check=False)
    rng = random.Random(int(seed))
    print("ready", flush=True)
    sys.stdin.readline()  # both processes start racing together
    held: int | None = None
    last_own_gen = 0
    seen: dict[str, int] = {"taken back": 0, "blocked": 0, "renew": 0}
    done_marker = Path(f"{counter}.done-{holder}")
    requests = 0
    with open(log, "w", encoding="utf-8") as out:
        while requests < int(rounds) * 10:
            if requests >= int(rounds) and _race_done(counter):
                break
            requests += 1
            tick = next_tick(counter)
            gen = store.acquire(holder, now=tick)
            if gen is None:
                out.write(json.dumps({"kind": "blocked", "tick": tick}) + "\n")
                seen["blocked"] += 1
                held = None
                continue
            kind = "renew" if gen == held else "acquire"
            out.write(json.dumps({"kind": kind, "gen": gen, "tick": tick}) + "\n")
            if kind == "renew":
                seen["renew"] += 1
            elif last_own_gen and gen != last_own_gen + 1:
                seen["taken back"] += 1  # the other process held the generations in between
            held = last_own_gen = gen
            if min(seen.values()) >= 10:
                done_marker.touch()
            choice = rng.random()
            if choice < 0.25:
                release_tick = next_tick(counter)
                released = store.release(holder, gen, now=release_tick)
                out.write(json.dumps({"kind": "release", "gen": gen, "tick": release_tick, "ok": released}) + "\n")
                held = None
                next_tick(counter)  # a released holder idles a moment, as a worker between runs does
            elif choice < 0.45:
                for _ in range(int(ttl) + 1):  # stall: let shared time pass without renewing
                    next_tick(counter)
        out.flush()
    store.close()


def _race_done(counter: str) -> bool:
    return all(Path(f"{counter}.done-{holder}").exists() for holder in ("A", "B"))


def worker(db: str, effects: str, holder: str, now: str, steps: str) -> None:
    """One worker life: take the lease, then claim and run events until none is left.

    Each event runs `steps` journalled side effects and finishes with one reply, each event on its own
    so that a reply belongs to exactly one event. A line on stdout after every step lets the test
    pick a moment to kill it.
    """
    at = int(now)
    store = Store.open(db, lease_ttl=30, max_attempts=3, backoff_base=1, backoff_max=4, check=False)
    gen = store.acquire(holder, now=at)
    if gen is None:
        print("no-lease", flush=True)
        return
    while True:
        batch = store.claim_batch(holder, gen, now=at)
        print(f"claimed {len(batch)}", flush=True)
        if not batch:
            break
        for event in batch:
            for step in range(int(steps)):
                key = f"{event.source_id}:step:{step}"
                store.run_once(key, _effect(effects, key, gen), gen=gen, now=at, event_id=event.id)
                print(f"step {key}", flush=True)
            store.finish(holder, gen, [event.id], now=at, messages=[f"reply to {event.source_id}"])
            print(f"finished {event.source_id}", flush=True)
    print("idle", flush=True)
    store.close()


def _effect(effects: str, key: str, gen: int) -> Callable[[], Any]:
    def run() -> Any:
        append_line(effects, f"{key} gen={gen}")
        return {"key": key, "gen": gen}

    return run


def dispatch_hang(db: str, now: str) -> None:
    """A dispatcher that claims a batch and hangs inside the send until it is killed."""
    store = Store.open(db, outbox_gap=3600, send_timeout=60, check=False)

    def send(batch: Batch) -> None:
        print(json.dumps({"key": batch.key, "bodies": batch.bodies}), flush=True)
        sys.stdin.read()  # blocks: the test kills this process here, mid-send

    store.dispatch(send, now=int(now))


def long_reader(db: str) -> None:
    """A reader that holds one snapshot open (as a scan of the whole file does) until told to let go."""
    store = Store.open(db, read_only=True)
    conn = store.connection
    conn.execute("BEGIN")
    conn.execute("SELECT COUNT(*) FROM inbox").fetchall()  # the snapshot is taken at the first read
    print("reading", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    store.close()
    print("let go", flush=True)


ROLES: dict[str, Callable[..., None]] = {
    "long-reader": long_reader,
    "journal-crash": journal_crash,
    "ask-then-die": ask_then_die,
    "resume-call-then-die": resume_call_then_die,
    "resume-then-die": resume_then_die,
    "lease-race": lease_race,
    "worker": worker,
    "dispatch-hang": dispatch_hang,
}


def main(argv: Sequence[str]) -> None:
    ROLES[argv[0]](*argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
