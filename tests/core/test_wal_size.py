"""The WAL does not keep the size a long reader made it grow to: a writer's commit after the reader lets
go brings it back under WAL_SIZE_LIMIT (journal_size_limit), and a checkpoint truncates it when nothing
is being written. A real reader process on a real file."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from console.core.db import WAL_SIZE_LIMIT
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
