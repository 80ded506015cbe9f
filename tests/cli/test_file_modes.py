"""Files holding private payloads are owner-only whatever the umask: the data folder 0700; the inbox,
the -wal and -shm SQLite makes beside it, and the file channel's output 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.config import Settings, default_db_path, ensure_default_db_folder
from console.core import Batch, Store
from console.edges.channels import FileChannel
from tests.cli.helpers import ROOT

UMASKS = [0o022, 0o000]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask-{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def test_a_new_inbox_and_its_wal_and_shm_are_owner_only(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest("chat", "m-1", {"text": "private"}, now=1)
        for name in ("inbox.db", "inbox.db-wal", "inbox.db-shm"):
            assert mode(tmp_path / name) == 0o600, name


def test_an_empty_file_made_into_an_inbox_is_owner_only(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "inbox.db"
    path.touch(mode=0o666)
    with Store.open(path) as store:
        store.ingest("chat", "m-1", {}, now=1)
        assert mode(path) == mode(Path(f"{path}-wal")) == 0o600


def test_an_existing_inbox_keeps_the_mode_its_owner_gave_it(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "inbox.db"
    Store.open(path).close()
    path.chmod(0o640)  # shared with a group on purpose
    with Store.open(path) as store:
        store.ingest("chat", "m-1", {}, now=1)
        assert mode(path) == 0o640


def test_the_default_data_folder_is_owner_only(isolated: dict[str, str], umask: int) -> None:
    settings = Settings()
    assert settings.db == default_db_path()
    ensure_default_db_folder(settings)
    assert mode(settings.db.parent) == 0o700
    settings.db.parent.chmod(0o755)  # as versions before this one made it
    ensure_default_db_folder(settings)
    assert mode(settings.db.parent) == 0o700


def test_the_file_channels_output_is_owner_only(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "messages.jsonl"
    FileChannel(out).send(Batch(key="k-1", bodies=["a private reply"]))
    assert mode(out) == 0o600


def test_the_cli_under_a_permissive_umask_in_a_real_process(isolated: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "console", "ingest", "chat", "m-1", '{"text": "private"}'],
                          cwd=ROOT, env=isolated, capture_output=True, text=True, timeout=60,
                          umask=0)
    assert done.returncode == 0, done.stderr
    folder = Path(isolated["XDG_DATA_HOME"]) / "agent-console"
    assert mode(folder) == 0o700 and mode(folder / "inbox.db") == 0o600
