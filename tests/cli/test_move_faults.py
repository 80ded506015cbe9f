"""A move that meets trouble on either side: a full disk (a small tmpfs for a SQLite file; a PostgreSQL tablespace on
one), a lost connection, a killed server. `migrate` says so in one line and exits 2; the source keeps every row
and takes work again (or, when its own server is the one that died, the line says how to give it its work back)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from console.core import Store
from tests.cli.helpers import ROOT, assert_user_error, isolated_env
from tests.pg_server import SERVER_USER, PostgresServer, start_server
from tests.support import wait_until

T = 1_700_000_000
TEXT = "x" * 200


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A folder on a tmpfs of `size` (mounting one needs root: the test is skipped without it)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(where: str | Path, events: int) -> dict[str, int]:
    with Store.open(where) as store:
        for start in range(0, events, 5_000):
            store.ingest_many([("backlog", f"b-{n}", {"n": n, "text": TEXT})
                               for n in range(start, min(events, start + 5_000))], now=T)
        return store.counts()


def _migrate(source: str | Path, target: str | Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "console", "migrate", "--from", str(source), "--to", str(target)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _refused(proc: subprocess.Popen[str], *fragments: str) -> str:
    out, err = proc.communicate(timeout=120)
    return assert_user_error(proc.returncode, out, err, *fragments)


def _source_is_whole_and_takes_work(source: str | Path, counts: dict[str, int], events: int) -> None:
    with Store.open(source) as store:
        assert store.move_mark() is None
        assert store.counts() == counts and store.find_event("backlog", f"b-{events - 1}") is not None
        assert store.ingest("chat", "after-the-failed-move", {}, now=T + 1)


def test_a_sqlite_target_whose_disk_fills_up(tmp_path: Path) -> None:
    source = tmp_path / "inbox.db"
    counts = _fill(source, 10_000)
    with small_disk(tmp_path / "small", "1m") as disk:
        line = _refused(_migrate(source, disk / "copy.db", isolated_env(tmp_path / "home")),
                        f"writing the target {disk / 'copy.db'} failed", "full")
        assert "still marked" not in line
        with Store.open(disk / "copy.db", read_only=True) as copy:  # it says what it is: unfinished, and empty
            assert copy.move_mark() is not None and copy.counts()["pending"] == 0
    _source_is_whole_and_takes_work(source, counts, 10_000)


def test_a_sqlite_source_on_a_full_disk(tmp_path: Path, postgres_url: str) -> None:
    with small_disk(tmp_path / "small", "4m") as disk:
        source = disk / "inbox.db"
        counts = _fill(source, 2_000)
        # The rest of the disk, to the last byte. Unbuffered: a short last write leaves nothing behind for close() to
        # flush into the full disk (it raised ENOSPC there whenever the inbox's size left a partial block).
        with open(disk / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 65_536)
            except OSError:
                pass
        _refused(_migrate(source, postgres_url, isolated_env(tmp_path / "home")), str(source))
        os.unlink(disk / "filler")
        _source_is_whole_and_takes_work(source, counts, 2_000)


@contextmanager
def _small_tablespace(server: PostgresServer, folder: Path) -> Iterator[str]:
    """A URL of a new inbox whose tables can only grow as far as a small tmpfs lets them: its user's default
    tablespace lives on one."""
    name = f"small_{uuid.uuid4().hex[:8]}"
    account = pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None
    with small_disk(folder, "3m"):  # outside pytest's folders: the server's user must reach it
        if account is not None:
            os.chown(folder, account.pw_uid, account.pw_gid)
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE {name} LOCATION '{folder}'")
            admin.execute(f"CREATE ROLE {name} LOGIN SUPERUSER")
            admin.execute(f"ALTER ROLE {name} SET default_tablespace = {name}")
        try:
            yield f"postgresql://{name}@127.0.0.1:{server.port}/postgres?schema={name}"
        finally:
            with psycopg.connect(server.url, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
                admin.execute(f"DROP ROLE {name}")
                admin.execute(f"DROP TABLESPACE {name}")


def test_a_postgresql_target_whose_disk_fills_up(tmp_path: Path, postgres_server: PostgresServer) -> None:
    source = tmp_path / "inbox.db"
    counts = _fill(source, 20_000)
    outside = Path(tempfile.mkdtemp(prefix="agent-console-small-"))
    outside.chmod(0o755)
    try:
        with _small_tablespace(postgres_server, outside / "disk") as url:
            _refused(_migrate(source, url, isolated_env(tmp_path / "home")),
                     "writing the target postgresql://", "failed", "No space left on device")
            with Store.open(url, read_only=True) as copy:
                assert copy.move_mark() is not None and copy.counts()["pending"] == 0
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    _source_is_whole_and_takes_work(source, counts, 20_000)


def _copying(server: PostgresServer) -> list[int]:
    """The migrate's connection while it copies rows into the target."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'agent-console' "
                             "AND query LIKE 'COPY %%'").fetchall()
    return [int(pid) for (pid,) in rows]


def test_a_lost_connection_to_the_target(tmp_path: Path, postgres_server: PostgresServer, postgres_url: str) -> None:
    source = tmp_path / "inbox.db"
    counts = _fill(source, 50_000)
    proc = _migrate(source, postgres_url, isolated_env(tmp_path / "home"))
    pids = wait_until(lambda: _copying(postgres_server), "the migrate's write transaction", limit=60, interval=0.005)
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
    _refused(proc, f"the target {postgres_url}", "failed", "connection")
    _source_is_whole_and_takes_work(source, counts, 50_000)


def test_a_killed_target_server(tmp_path: Path) -> None:
    source = tmp_path / "inbox.db"
    counts = _fill(source, 50_000)
    server = start_server()
    try:
        url = server.inbox_url()
        proc = _migrate(source, url, isolated_env(tmp_path / "home"))
        wait_until(lambda: _copying(server), "the migrate's write transaction", limit=60, interval=0.005)
    finally:
        server.stop()  # pg_ctl stop -m immediate: the server dies mid-copy
    _refused(proc, f"the target {url}", "failed")
    _source_is_whole_and_takes_work(source, counts, 50_000)


def test_a_killed_source_server(tmp_path: Path) -> None:
    """The source's own server dies mid-copy: its mark cannot be cleared, and the line says what to do."""
    target = tmp_path / "copy.db"
    server = start_server()
    try:
        url = server.inbox_url()
        _fill(url, 50_000)
        proc = _migrate(url, target, isolated_env(tmp_path / "home"))
        # A new inbox's schema alone leaves ~100 kB in the WAL; 2 MB is well into the ~12 MB copy of the events.
        wait_until(lambda: Path(f"{target}-wal").exists() and Path(f"{target}-wal").stat().st_size > 2_000_000,
                   "the copy to be under way", limit=60, interval=0.005)
    finally:
        server.stop()
    _refused(proc, f"the source {url}", "failed", "the source is still marked as being moved",
             f"agent-console migrate --abandon --from {url}")
    with Store.open(target, read_only=True) as copy:
        assert copy.move_mark() is not None and copy.counts()["pending"] == 0
