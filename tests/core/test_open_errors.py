"""Opening an inbox the user cannot use gives one clear StoreError naming the path, and loses nothing."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from console.core import Store, StoreError
from console.core.db import MIN_SQLITE, check_sqlite_version, sqlite_version


def open_error(path: Path, *, check: bool = False) -> str:
    with pytest.raises(StoreError) as caught:
        Store.open(path, check=check)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    return message


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("shopping list: milk, eggs\n" * 100)
    assert "not a SQLite database" in open_error(path)
    assert path.read_text().startswith("shopping list")  # untouched
    assert not (tmp_path / "notes.txt-wal").exists()


def test_a_database_with_a_damaged_header(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest("github", "d-1", {}, now=1)
    data = bytearray(path.read_bytes())
    data[16:24] = b"\xff" * 8  # page size and format bytes
    path.write_bytes(bytes(data))
    message = open_error(path)
    assert "database" in message


def test_a_read_only_file(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest("github", "d-1", {}, now=1)
    os.chmod(path, 0o444)
    try:
        assert "read-only" in open_error(path)
    finally:
        os.chmod(path, 0o644)
    with Store.open(path) as store:  # nothing was lost
        assert [e.source_id for e in store.events()] == ["d-1"]


def test_a_missing_folder(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "folder" / "inbox.db"
    message = open_error(path)
    assert "does not exist" in message
    assert not (tmp_path / "no").exists()


def test_a_folder_instead_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    path.mkdir()
    assert "folder" in open_error(path)


def test_an_empty_file_becomes_a_new_inbox(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    path.touch()
    with Store.open(path) as store:
        assert store.ingest("chat", "m-1", {}, now=1) is True


def test_sqlite_older_than_3_51_3_is_refused() -> None:
    with pytest.raises(StoreError, match=r"SQLite 3\.51\.2 is too old.*3\.51\.3"):
        check_sqlite_version((3, 51, 2))
    with pytest.raises(StoreError, match="too old"):
        check_sqlite_version((3, 40, 1))  # what Python 3.11's own sqlite3 links here
    check_sqlite_version((3, 51, 3))
    check_sqlite_version((3, 52, 0))
    check_sqlite_version()  # the library apsw bundles
    assert sqlite_version() >= MIN_SQLITE == (3, 51, 3)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("lease_ttl", 0), ("max_attempts", 0), ("batch_cap", 0), ("outbox_gap", -1), ("backoff_base", -5),
     ("backoff_jitter", 1.0)],
)
def test_bad_settings_are_refused_before_the_file_is_touched(tmp_path: Path, setting: str, value: object) -> None:
    path = tmp_path / "inbox.db"
    with pytest.raises(ValueError, match=setting):
        Store.open(path, **{setting: value})  # type: ignore[arg-type]
    assert not path.exists()


def test_a_database_with_damaged_pages_fails_its_check_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path) as store:
        store.ingest_many([("chat", f"m-{n}", {"text": "x" * 100}) for n in range(500)], now=1)
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0  # all in the main file
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")  # the page size, from the file's header
    for offset in range(3 * page, 4 * page, 7):  # scribble over one b-tree page
        data[offset] = 0x5A
    path.write_bytes(bytes(data))
    message = open_error(path, check=True)  # as the engine opens it at start
    assert "integrity check" in message or "corrupt" in message
    assert "page" in message.lower()  # the detail says what is damaged


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    os.mkfifo(path)
    # Opening a FIFO for reading blocks until a writer comes: the refusal must come from its type first.
    # A hang here would hang the test, so the open runs in a thread that the test bounds.
    outcome: list[BaseException] = []
    opener = threading.Thread(target=lambda: outcome.extend(_raised(lambda: Store.open(path))), daemon=True)
    opener.start()
    opener.join(timeout=30)  # a bound for failing, never a wait for the result
    if opener.is_alive():
        with open(path, "wb"):  # let the stuck open go so the thread can end
            pass
        pytest.fail("Store.open waited on a FIFO")
    [error] = outcome
    assert isinstance(error, StoreError)
    assert "not a regular file" in str(error) and str(path) in str(error)


def _raised(fn: Callable[[], object]) -> list[BaseException]:
    try:
        fn()
    except BaseException as exc:
        return [exc]
    return []


@pytest.mark.parametrize("special", ["/dev/null", "/proc/self/mem"])
def test_a_device_or_kernel_file_is_refused_in_one_line(special: str) -> None:
    message = open_error(Path(special))
    assert "not a regular file" in message or "cannot be read" in message
