"""A damaged inbox takes no new work: `run`, `serve` and `ingest` refuse it before anything listens, claims or
is acknowledged (the gate before intake, console/core/gate.py); a write that meets damage later stops intake
(503, never a 200 "stored"); every command either works or says so in one line (exit 2); a command that only
reads leaves the file's bytes as they were, damaged or not."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from console.core import Store, StoreError
from console.core.gate import check_before_intake
from tests.cli.helpers import ROOT, assert_user_error, invoke, run_process
from tests.edges.signing import SECRETS, sign
from tests.support import wait_until

WEBHOOKS = """
[webhooks]
enabled = true
host = "127.0.0.1"
port = 0
[webhooks.sources.github]
verifier = "github"
secret_env = "DAMAGE_TEST_GITHUB_SECRET"
"""
# Small enough that a loaded machine still reads it whole within ingest's 0.2 s bound many times over (a quick
# check of it takes a few milliseconds), large enough for the inbox table and its key index to span many pages.
EVENTS = 600
# Where the garbage goes: a leaf of the inbox table holding old events, a page of the events' key index (every
# ingest walks it), and whatever page sits in the middle of the file.
PLACES = ("inbox leaf", "key index", "middle of the file")


def build(path: Path) -> None:
    with Store.open(path) as store:
        store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 300}) for n in range(EVENTS)], now=1_000)
        store.add_timer("tick", 2_000, {}, every=60, now=1_000)
        store.set_memory("owner", "me", now=1_000)
    assert not Path(f"{path}-wal").exists()  # all in the main file: the damage below is what readers see


def pages_of(path: Path, name: str) -> list[int]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [int(p) for (p,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", (name,))]
    finally:
        conn.close()


def page_size(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:18], "big")


def damage(path: Path, place: str) -> list[int]:
    """Write garbage over pages of the file (SQLite not involved): which pages, by place."""
    size = page_size(path)
    if place == "inbox leaf":
        leaves = pages_of(path, "inbox")
        victims = [leaves[len(leaves) // 3]]
    elif place == "key index":
        victims = pages_of(path, "sqlite_autoindex_inbox_1")
    else:
        victims = [path.stat().st_size // size // 2]
    garbage = random.Random(7)
    with path.open("r+b") as handle:
        for page in victims:
            handle.seek((page - 1) * size)
            handle.write(garbage.randbytes(size))
    return victims


def fingerprint(path: Path) -> dict[str, str | None]:
    """The bytes of the inbox and of its WAL (absent or empty: None)."""
    found: dict[str, str | None] = {}
    for suffix in ("", "-wal"):
        part = Path(f"{path}{suffix}")
        data = part.read_bytes() if part.exists() else b""
        found[suffix or "db"] = hashlib.sha256(data).hexdigest() if data else None
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One healthy inbox for the module's tests to copy (building it is most of a test's time)."""
    path = tmp_path_factory.mktemp("built") / "inbox.db"
    build(path)
    return path


def copy_of(built: Path, folder: Path) -> Path:
    path = folder / "inbox.db"
    for suffix in ("", "-wal"):
        if Path(f"{built}{suffix}").exists():
            shutil.copyfile(f"{built}{suffix}", f"{path}{suffix}")
    return path


@pytest.fixture(params=PLACES)
def damaged(request: pytest.FixtureRequest, built: Path, tmp_path: Path) -> Path:
    path = copy_of(built, tmp_path)
    damage(path, str(request.param))
    return path


DAMAGE_LINE = "is damaged: it failed its integrity check"


# --- the gate before intake, in real processes ----------------------------------------------------------

def test_ingest_into_a_damaged_inbox_is_refused_in_one_line_and_stores_nothing(
    damaged: Path, isolated: dict[str, str]
) -> None:
    done = run_process(["--db", str(damaged), "ingest", "chat", "new-1", '{"text": "hi"}'], isolated)
    assert_user_error(done.returncode, done.stdout, done.stderr, str(damaged), DAMAGE_LINE, "restore a backup")
    assert "stored" not in done.stdout


def start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "console", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    assert proc.stderr is not None
    stream = proc.stderr
    threading.Thread(target=lambda: log.extend(iter(stream.readline, "")), daemon=True).start()
    return proc, log


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_damaged_inbox_never_gets_a_listening_receiver(
    damaged: Path, tmp_path: Path, isolated: dict[str, str], command: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(WEBHOOKS)
    env = dict(isolated, DAMAGE_TEST_GITHUB_SECRET=SECRETS["github"])
    before = pages_of_lease(damaged)
    done = run_process(["--db", str(damaged), "--config", str(config), command], env, timeout=60)
    assert "listening on" not in done.stderr  # the receiver never listened
    assert_user_error(done.returncode, done.stdout, done.stderr, str(damaged), DAMAGE_LINE)
    assert pages_of_lease(damaged) == before  # nor did a worker take the lease


def pages_of_lease(path: Path) -> object:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT * FROM lease").fetchall()
    finally:
        conn.close()


def test_the_gate_says_what_check_says_first(built: Path, tmp_path: Path, isolated: dict[str, str]) -> None:
    damaged = copy_of(built, tmp_path)
    damage(damaged, "inbox leaf")
    checked = run_process(["--db", str(damaged), "check"], isolated)
    assert checked.returncode == 1 and "Traceback" not in checked.stdout + checked.stderr
    refused = run_process(["--db", str(damaged), "run"], isolated)
    line = assert_user_error(refused.returncode, refused.stdout, refused.stderr)
    headline = checked.stdout.splitlines()[0]
    # The same line; what is listed in it may differ: `check` runs the full check, the gate the quick one.
    said, listed = re.compile(r"\(\d+ problems?: .*\)"), "(...)"
    assert said.sub(listed, line) == f"agent-console: error: {said.sub(listed, headline)}"
    assert headline.startswith(f"inbox {damaged} {DAMAGE_LINE} (")


# --- every command against damage ---------------------------------------------------------------------

READERS = (["status"], ["status", "--json"], ["events"], ["events", "--status", "pending", "--json"], ["show", "1"],
           ["show", "450"], ["timers"], ["memory"], ["dead"], ["usage"], ["budget"], ["held"],
           ["prune", "--days", "1", "--dry-run"])
WRITERS = (["say", "hello"], ["timers", "add", "t2", "--every", "60"], ["approve", "req-1", "yes"], ["retry", "1"],
           ["discard", "2"], ["memory", "set", "k", "v"], ["prune", "--days", "1"], ["budget", "--daily", "5"],
           ["held", "release", "--all"])


@pytest.mark.parametrize("args", [*READERS, *WRITERS], ids=" ".join)
def test_every_command_on_a_damaged_inbox_works_or_says_so_in_one_line(damaged: Path, args: list[str]) -> None:
    result = invoke(["--db", str(damaged), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.strip() != "stored"
    if args[0] == "approve" and result.exit_code == 1:
        assert result.stdout == "unknown\n"  # never requested: the answer that stands
    elif result.exit_code != 0:
        line = assert_user_error(result.exit_code, result.stdout, result.stderr)
        if "damaged" in line:
            assert f"inbox {damaged} {DAMAGE_LINE}" in line


def test_migrate_from_a_damaged_inbox_copies_all_of_it_or_says_so_in_one_line(damaged: Path, tmp_path: Path) -> None:
    """A copy reads every row of every table: damage it meets stops it in one line (the target is left
    marked incomplete, as after any failed copy). Damage only in an index is not met (rows are read from the
    tables, and the target builds its own indexes): that copy is whole, every key verified."""
    target = tmp_path / "copy.db"
    result = invoke(["migrate", "--from", str(damaged), "--to", str(target)])
    if result.exit_code != 0:
        assert_user_error(result.exit_code, result.stdout, result.stderr, str(damaged))  # migrate's own words
        if target.exists():
            with Store.open(target) as copy, pytest.raises(StoreError, match="unfinished copy"):
                check_before_intake(copy)
        return
    assert f"every table's count and all {EVENTS:,} event keys verified" in result.stdout
    with Store.open(target) as copy:
        assert copy.counts()["pending"] == EVENTS


@pytest.mark.parametrize("args", [*READERS, ["check"]], ids=" ".join)
def test_a_command_that_reads_leaves_a_damaged_file_byte_identical(damaged: Path, args: list[str]) -> None:
    before = fingerprint(damaged)
    invoke(["--db", str(damaged), *args])
    assert fingerprint(damaged) == before


@pytest.fixture(scope="module")
def killed_writer(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy inbox whose WAL still holds a commit: its writer was SIGKILLed before it could checkpoint.
    Anything that checkpoints on the way out (as the last connection to close normally does) changes the file."""
    path = copy_of(built, tmp_path_factory.mktemp("killed"))
    code = ("import os, signal, sys\nfrom console.core import Store\nstore = Store.open(sys.argv[1])\n"
            "store.ingest('chat', 'late', {'text': 'in the WAL'}, now=1_500)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{path}-wal").stat().st_size > 0
    return path


@pytest.mark.parametrize("args", [*READERS, ["check"]], ids=" ".join)
def test_a_command_that_reads_leaves_a_healthy_file_and_its_wal_byte_identical(
    killed_writer: Path, tmp_path: Path, args: list[str]
) -> None:
    path = copy_of(killed_writer, tmp_path)
    before = fingerprint(path)
    result = invoke(["--db", str(path), *args])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert fingerprint(path) == before


def test_status_in_its_own_process_leaves_the_file_byte_identical(
    killed_writer: Path, tmp_path: Path, isolated: dict[str, str]
) -> None:
    path = copy_of(killed_writer, tmp_path)
    before = fingerprint(path)
    done = run_process(["--db", str(path), "status"], isolated)
    assert done.returncode == 0, done.stderr
    assert f"{EVENTS + 1:,} pending" in done.stdout  # it read the commit that is only in the WAL
    assert fingerprint(path) == before


# --- damage met later, while running ------------------------------------------------------------------

def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def deliver(address: str, delivery_id: str) -> tuple[int, dict[str, object]]:
    body = json.dumps({"repository": {"full_name": "me/agent"}, "n": delivery_id}).encode()
    return post(f"{address}/hooks/github", body, sign("github", body, now=int(time.time()), delivery_id=delivery_id))


def health(address: str) -> int:
    try:
        with urllib.request.urlopen(f"{address}/healthz", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.fixture
def serving(built: Path, tmp_path: Path, isolated: dict[str, str]) -> Iterator[tuple[Path, str, list[str]]]:
    db, config = copy_of(built, tmp_path), tmp_path / "config.toml"
    config.write_text(WEBHOOKS)
    env = dict(isolated, DAMAGE_TEST_GITHUB_SECRET=SECRETS["github"])
    proc, log = start(["--db", str(db), "--config", str(config), "serve", "--port", "0"], env)
    try:
        found = wait_until(lambda: re.search(r"listening on (http://127\.0\.0\.1:\d+)", "".join(log))
                           or proc.poll() is not None, "serve to listen")
        assert isinstance(found, re.Match), "".join(log)
        yield db, found.group(1), log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_serve_stops_acknowledging_once_a_write_meets_damage(serving: tuple[Path, str, list[str]]) -> None:
    db, address, log = serving
    assert deliver(address, "before") == (200, {"stored": True})
    with Store.open(db) as store:  # the delivery's pages into the file, so that the damage below is what is read
        wait_until(store.shrink_wal, "a checkpoint with no reader in the way")
    damage(db, "key index")
    with Store.open(db) as store:  # another commit: serve's connection drops what it had cached of the file
        store.set_memory("nudge", "x", now=2_000)
    status, answer = deliver(address, "after")
    assert status == 503 and DAMAGE_LINE in str(answer["error"])
    # Every later delivery is refused without touching the file, and the health check says why.
    assert deliver(address, "later")[0] == 503
    assert health(address) == 503
    wait_until(lambda: "refusing every delivery from now on" in "".join(log), "serve to log why")
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        stored = {row[0] for row in conn.execute("SELECT source_id FROM inbox NOT INDEXED WHERE source = 'github'")}
    finally:
        conn.close()
    assert stored == {"before"}, stored
