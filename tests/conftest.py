from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from tests import support
from tests.pg_server import InboxPool, PostgresServer, drop_schema, start_server
from tests.precompile import compile_once

RAM_DISK = Path(support.RAM_DISK)
YOUNG_COLLECTION = 10_000  # allocations between young collections (Python's default: 700)
RAM_DISK_NEEDED = 4 << 30  # the suite with -n 2 keeps up to ~1 GB of files and servers there at once


def pytest_configure(config: pytest.Config) -> None:
    compile_once(config)  # before collection: the suite's bytecode once a run (tests/precompile.py)
    use_the_ram_disk(config)


def use_the_ram_disk(config: pytest.Config) -> None:
    """Test files (tmp_path, tempfile's folders, the subprocesses' own) go on the machine's tmpfs when it has one.

    Every commit of a real SQLite file waits for an fsync; on a disk shared with other work each took 2-4 ms, and
    the suite makes tens of thousands. What the tests prove does not rest on the disk: crash tests kill real
    processes (a killed process loses nothing the kernel holds), and power cuts are simulated below SQLite by a
    VFS that keeps each file as of its last sync (tests/core/powercut.py). A TMPDIR set by whoever runs the suite,
    or --basetemp, is kept."""
    if os.environ.get("TMPDIR") or config.option.basetemp or not (RAM_DISK.is_dir() and os.access(RAM_DISK, os.W_OK)):
        return
    if shutil.disk_usage(RAM_DISK).free < RAM_DISK_NEEDED:  # a container's 64 MB /dev/shm would fill: ENOSPC
        return
    os.environ["TMPDIR"] = str(RAM_DISK)  # subprocesses, and xdist's workers as they start (see tests.support.on_disk)
    tempfile.tempdir = str(RAM_DISK)  # this process: pytest's tmp_path root is read from it on first use


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "inbox.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    s = Store.open(db_path, seed=7)
    try:
        yield s
    finally:
        s.close()


# -- PostgreSQL: one throwaway server per test session, one fresh schema (inbox) per test ---------------

@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty inbox (its own schema) on the session's server; dropped afterwards."""
    url = postgres_server.inbox_url()
    yield url
    drop_schema(postgres_server, url)


BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def postgres_inboxes(postgres_server: PostgresServer) -> Iterator[InboxPool]:
    pool = InboxPool(postgres_server)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def migrated_postgres_url(postgres_inboxes: InboxPool) -> Iterator[str]:
    """The URL of an inbox (its own schema) as a fresh migration leaves it: migrated, no event in it. Recycled
    from an earlier test, emptied back to a pristine migration's rows (tests/pg_server.py InboxPool: a test
    can't see anything an earlier test did there; tests/core/test_recycled_inbox.py proves it)."""
    url = postgres_inboxes.take()
    yield url
    postgres_inboxes.give_back(url)


@pytest.fixture(params=BACKENDS)
def inbox_target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """Where a conformance test's inbox lives: a SQLite file, then a PostgreSQL schema (migrated already: a
    test of what the first open does takes postgres_url, a schema that does not exist yet)."""
    if request.param == "sqlite":
        return str(db_path)
    url: str = request.getfixturevalue("migrated_postgres_url")
    return url


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection loaded (every test module, Textual, hypothesis, the SDKs: ~80,000 objects in a worker)
    lives to the end of the run, yet Python's collector walked all of it at every full collection, and the
    Textual pilot tests start a collection every 700 allocations: 22% of tests/tui/test_console.py's CPU was
    the collector (docs/performance.md). Frozen, those objects are never walked again; young collections run
    every YOUNG_COLLECTION allocations. Garbage the tests make is collected as before, only in bigger rounds."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])
