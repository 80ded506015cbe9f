"""Read-only commands open the inbox read-only: no write lock, no migration, no integrity scan of the
whole file. Integrity is checked where it pays: before intake (the engine, `serve` and `ingest`, bounded in
time) and by `agent-console check`."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from console.assembly import build_engine
from console.config import Settings
from console.core import Store, StoreError
from console.core.db import SCHEMA_VERSION, connect, user_version
from console.core.gate import check_before_intake
from tests.cli.helpers import assert_user_error, invoke

READERS = (["status"], ["status", "--json"], ["events"], ["show", "1"], ["timers"], ["timers", "list"],
           ["prune", "--days", "1", "--dry-run"], ["check"])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest("chat", "m-1", {"text": "hello"}, now=1_000)
        store.add_timer("tick", 2_000, {}, every=60, now=1_000)
    return path


def fingerprint(path: Path) -> dict[str, str | None]:
    """The bytes of the inbox and its WAL (absent or empty: None)."""
    found: dict[str, str | None] = {}
    for suffix in ("", "-wal"):
        part = Path(f"{path}{suffix}")
        data = part.read_bytes() if part.exists() else b""
        found[suffix or "db"] = hashlib.sha256(data).hexdigest() if data else None
    return found


@pytest.fixture
def write_lock_held(db: Path) -> Iterator[None]:
    """Another connection holds the inbox's write lock (as a long write transaction would)."""
    other = apsw.Connection(str(db))
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_command_needs_no_write_lock(db: Path, write_lock_held: None, args: list[str]) -> None:
    result = invoke(["--db", str(db), *args])
    assert result.exit_code == 0, (result.stdout, result.stderr)


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_command_writes_nothing(db: Path, args: list[str]) -> None:
    reader = apsw.Connection(str(db))  # keeps the WAL from being checkpointed away on close
    try:
        before = fingerprint(db)
        result = invoke(["--db", str(db), *args])
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert fingerprint(db) == before
    finally:
        reader.close()


def old_file(path: Path) -> Path:
    connect(path, schema_version=SCHEMA_VERSION - 1).close()
    return path


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_command_does_not_migrate_an_old_file(tmp_path: Path, args: list[str]) -> None:
    path = old_file(tmp_path / "old.db")
    result = invoke(["--db", str(path), *args])
    assert_user_error(result.exit_code, result.stdout, result.stderr, str(path), f"schema version {SCHEMA_VERSION - 1}",
                      "agent-console run")
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert user_version(conn) == SCHEMA_VERSION - 1
    finally:
        conn.close()
    # A writing command upgrades it, and the readers work from then on.
    assert invoke(["--db", str(path), "ingest", "chat", "m-1"]).exit_code == 0
    assert invoke(["--db", str(path), "status"]).exit_code == 0


def damage_an_old_page(path: Path) -> int:
    """Scribble over a leaf of the inbox table that holds old events: the newest events, the counts, the
    lease, timers and approvals all live elsewhere, so only a scan of the whole file meets it."""
    with Store.open(path) as store:
        store.ingest_many([("bulk", str(n), {"text": "x" * 300}) for n in range(2_000)], now=1_000)
        conn = store.connection
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
        leaves = [int(p) for (p,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'inbox' AND pagetype = 'leaf' ORDER BY pageno")]
    victim = leaves[len(leaves) // 3]
    with path.open("r+b") as handle:
        handle.seek((victim - 1) * page_size + 8)  # past the page header: the cell pointers and cells
        handle.write(b"\xa5" * (page_size - 8))
    return victim


def test_everyday_commands_do_not_scan_the_whole_file_but_check_ingest_and_the_engine_do(db: Path) -> None:
    damage_an_old_page(db)
    for args in (["status"], ["events", "--limit", "5"], ["timers"]):
        result = invoke(["--db", str(db), *args])
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
    # ingest acknowledges outside input: it checks first (bounded in time), and stores nothing here.
    result = invoke(["--db", str(db), "ingest", "chat", "m-2"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, str(db), "is damaged")
    result = invoke(["--db", str(db), "check"])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    assert str(db) in result.stdout and "damaged" in result.stdout
    assert "page" in result.stdout.lower()  # the detail says where
    with pytest.raises(StoreError, match="integrity check"):
        open_as_the_engine_does(db)


def open_as_the_engine_does(db: Path) -> None:
    """The engine's writer connection, the first it opens at start, and the gate it runs on it."""
    with build_engine(Settings(db=db), install_defaults=False)._opener("writer")() as store:
        check_before_intake(store)


def test_check_on_a_sound_file(db: Path) -> None:
    result = invoke(["--db", str(db), "check"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith("ok") and str(db) in result.stdout


def test_a_read_only_open_refuses_to_write(db: Path) -> None:
    with Store.open(db, read_only=True) as store, pytest.raises(StoreError, match="readonly"):
        store.ingest("chat", "m-9", {}, now=1)


def folder_listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_command_refuses_a_missing_file_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    typo = tmp_path / "inbx.db"
    result = invoke(["--db", str(typo), *args])
    assert_user_error(result.exit_code, result.stdout, result.stderr, str(typo), "no inbox")
    assert folder_listing(tmp_path) == []


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_read_only_command_refuses_an_empty_file_and_leaves_it_empty(tmp_path: Path, args: list[str]) -> None:
    empty = tmp_path / "inbox.db"
    empty.touch()
    result = invoke(["--db", str(empty), *args])
    assert_user_error(result.exit_code, result.stdout, result.stderr, str(empty), "empty")
    assert folder_listing(tmp_path) == ["inbox.db"] and empty.stat().st_size == 0


def test_the_default_inbox_is_not_created_by_a_reader(isolated: dict[str, str]) -> None:
    data_home = Path(isolated["XDG_DATA_HOME"])
    result = invoke(["status"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "no inbox", "inbox.db")
    assert not data_home.exists() or not any(data_home.rglob("*.db*"))


def test_writers_create_a_missing_inbox(tmp_path: Path) -> None:
    for name, args in (("a.db", ["ingest", "chat", "m-1"]), ("b.db", ["say", "hi"]),
                       ("c.db", ["timers", "add", "t", "--every", "60"])):
        result = invoke(["--db", str(tmp_path / name), *args])
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert invoke(["--db", str(tmp_path / name), "status"]).exit_code == 0


def test_the_read_only_console_goes_without_a_command_and_without_the_demo(db: Path) -> None:
    """`--read-only` is the console's (issue 21.9): before a command that writes it would promise what it does
    not keep, so it is refused there, as with --demo (whose inbox is a throwaway)."""
    before = fingerprint(db)
    result = invoke(["--db", str(db), "--read-only", "discard", "1"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "--read-only", "console")
    result = invoke(["--read-only", "--demo"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "--read-only", "--demo")
    assert fingerprint(db) == before


def test_the_read_only_console_creates_no_inbox(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = invoke(["--db", str(missing), "--read-only"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, str(missing))
    assert not missing.exists()
