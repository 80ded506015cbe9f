"""The WAL does not keep the size a long reader made it grow to: a writer's commit after the reader lets
go brings it back under WAL_SIZE_LIMIT (journal_size_limit), and a checkpoint truncates it when nothing
is being written. A real reader process on a real file."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from console.core import Store
from console.core.backend import WAL_SIZE_LIMIT
from console.core.db import WAL_CHECKPOINT_BYTES
from tests.core.workers import spawn

PAYLOAD = {"text": "x" * 2_000}


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


@pytest.fixture
def grown(tmp_path: Path) -> Iterator[tuple[Store, Path]]:
    """A writer whose WAL grew past the limit behind a long reader that has since let go."""
    path = tmp_path / "inbox.db"
    store = Store.open(path)
    reader = spawn("long-reader", path, stdin=subprocess.PIPE)
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert reader.stdout.readline().strip() == "reading", reader.stderr.read() if reader.stderr else ""
        batch = 0
        while wal_bytes(path) <= 2 * WAL_SIZE_LIMIT:  # the reader's snapshot keeps every frame in the WAL
            store.ingest_many([("bulk", f"{batch}-{n}", PAYLOAD) for n in range(200)], now=1)
            batch += 1
            assert batch < 200, "the WAL did not grow behind the reader"
        reader.stdin.write("let go\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "let go"
        assert reader.wait(timeout=30) == 0
        yield store, path
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(timeout=30)
        store.close()


def test_the_next_commits_after_a_long_reader_bring_the_wal_under_the_limit(grown: tuple[Store, Path]) -> None:
    store, path = grown
    assert wal_bytes(path) > 2 * WAL_SIZE_LIMIT
    for n in range(2):  # the first commit's checkpoint completes, the second restarts the WAL from its start
        store.ingest("chat", f"after-{n}", {}, now=2)
    assert wal_bytes(path) <= WAL_SIZE_LIMIT


def test_an_idle_writer_truncates_the_wal_once_the_reader_let_go(grown: tuple[Store, Path]) -> None:
    store, path = grown
    assert wal_bytes(path) > 2 * WAL_SIZE_LIMIT
    assert store.wal_bytes() == wal_bytes(path)
    assert store.shrink_wal() is True
    assert wal_bytes(path) == 0
    assert [e.source_id for e in store.events(limit=1)] != []  # nothing was lost on the way
    assert store.integrity_check() == "ok"


def test_a_checkpoint_never_waits_for_a_reader_that_holds_on(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest_many([("bulk", str(n), PAYLOAD) for n in range(200)], now=1)
        reader = spawn("long-reader", path, stdin=subprocess.PIPE)
        try:
            assert reader.stdout is not None and reader.stdin is not None
            assert reader.stdout.readline().strip() == "reading"
            store.ingest_many([("more", str(n), PAYLOAD) for n in range(200)], now=1)
            before = wal_bytes(path)
            assert store.shrink_wal() is False  # the reader still needs the frames: try again later
            assert wal_bytes(path) == before
            assert store.ingest("chat", "still-writable", {}, now=2) is True  # no lock was left behind
            reader.stdin.write("let go\n")
            reader.stdin.flush()
            assert reader.wait(timeout=30) == 0
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait(timeout=30)
        assert store.shrink_wal() is True and wal_bytes(path) == 0
    assert not os.path.exists(f"{path}-wal") or wal_bytes(path) == 0


@pytest.mark.parametrize("page_size", [1024, 4096])
def test_single_ingests_checkpoint_by_bytes_and_the_wal_starts_over_without_being_cut(
    tmp_path: Path, page_size: int
) -> None:
    """SQLite's default checkpoints every 1000 pages whatever their size: every ~125 single ingests with 1 KiB pages
    (an older file keeps 4 KiB ones). The WAL takes WAL_CHECKPOINT_BYTES either way, then starts over from its
    beginning at the same size, under WAL_SIZE_LIMIT: never cut and grown again (a size change costs an fsync
    more than an overwrite)."""
    path = tmp_path / "inbox.db"
    made = apsw.Connection(str(path))
    made.execute(f"PRAGMA page_size={page_size}; PRAGMA journal_mode=WAL; CREATE TABLE made_by_hand (x)")
    made.close()
    with Store.open(path) as store:
        assert store.durability_settings()["page_size"] == str(page_size)
        pages = store.connection.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0]
        assert pages * page_size == WAL_CHECKPOINT_BYTES
        frame = page_size + 24
        sizes = []
        n = 0
        while len(sizes) < 3 or sizes[-1] > sizes[-3]:  # until the WAL has started over at least once
            n += 1
            assert store.ingest("chat", f"c-{n}", {"text": "hello"}, now=1), n
            sizes.append(wal_bytes(path))
            assert n < 3 * WAL_CHECKPOINT_BYTES // frame, "the WAL never started over"
        grown_to = max(sizes)
        assert WAL_CHECKPOINT_BYTES <= grown_to < WAL_SIZE_LIMIT  # SQLite's default: 1000 pages, 1 MB here
        for _ in range(50):
            n += 1
            store.ingest("chat", f"c-{n}", {"text": "hello"}, now=1)
            assert wal_bytes(path) == grown_to  # overwritten from the start, the file's size unchanged
