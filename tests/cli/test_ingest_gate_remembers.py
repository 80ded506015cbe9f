"""`ingest`'s gate remembers what it verified (issue 38, requirement 3): the file's state after an ingest whose gate
passed is kept beside it (owner-only), and the next ingest that finds the file in that state checks nothing; any
other state is checked again, and a live engine's lease leaves the check to that engine. Real processes on real
files; damage is 32 bytes XORed inside the newest payload (tests/cli/test_payload_damage.py)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from console.core import Store
from console.core.gate import CHECKED_SUFFIX, file_state
from tests.cli.helpers import assert_user_error, run_process
from tests.cli.test_payload_damage import build, flip


def ingest(db: Path, key: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = run_process(["--db", str(db), "ingest", "chat", key, '{"text": "hi"}'], env)
    return done.returncode, done.stdout, done.stderr


def test_a_file_changed_since_it_was_verified_is_checked_again(tmp_path: Path, isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    build(db, newest_damaged=True)
    assert ingest(db, "first", isolated)[:2] == (0, "stored\n")
    kept = Path(f"{db}{CHECKED_SUFFIX}")
    assert kept.read_text() == file_state(db) and stat.S_IMODE(kept.stat().st_mode) == 0o600
    flip(db, mask=0x80, mid_file=False)  # written from outside: the state moved
    code, out, err = ingest(db, "second", isolated)
    assert_user_error(code, out, err, "is damaged", "its payload does not match")


def test_a_file_in_the_state_it_was_verified_in_is_not_read_again(tmp_path: Path, isolated: dict[str, str]) -> None:
    """What makes an ingest cheap: the gate trusts the remembered state. Shown by remembering a damaged file's
    state as verified (what no ingest would do): the next ingest does not look, and stores."""
    db = tmp_path / "inbox.db"
    build(db, newest_damaged=True)
    flip(db, mask=0x80, mid_file=False)
    Path(f"{db}{CHECKED_SUFFIX}").write_text(file_state(db) or "")
    assert ingest(db, "unchecked", isolated)[:2] == (0, "stored\n")


def test_a_live_engines_lease_leaves_the_check_to_the_engine(tmp_path: Path, isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    build(db, newest_damaged=True)
    flip(db, mask=0x80, mid_file=False)
    assert ingest(db, "refused", isolated)[0] == 2  # nobody holds the lease: the gate checks, and refuses
    with Store.open(db, lease_ttl=600) as store:
        assert store.acquire("engine", now=int(time.time())) is not None
    assert ingest(db, "engine-checks", isolated)[:2] == (0, "stored\n")
    assert not Path(f"{db}{CHECKED_SUFFIX}").exists()  # nothing remembered: the engine's commits move the state
