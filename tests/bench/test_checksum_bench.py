"""The checksum benchmark still runs end to end (tiny sizes), and its "off" rounds really store no checksum."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import checksum_bench  # noqa: E402


def test_quick_run_measures_every_line(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "checksum_bench.py"), "--quick", "--dir", str(tmp_path), "--json",
         str(result_file), "--markdown"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(result_file.read_text(encoding="utf-8"))["rows"]
    assert [row["line"] for row in rows] == list(checksum_bench.LINES)
    assert all(row["on"] > 0 and row["off"] > 0 for row in rows)
    assert "| durable single ingest |" in done.stdout


def test_off_stores_no_checksum_and_on_does(tmp_path: Path) -> None:
    for mode in (False, True):
        db = tmp_path / f"{mode}.db"
        with checksum_bench.checksums(mode):
            checksum_bench.single(db, 3)
            checksum_bench.batched(db.with_suffix(".many.db"), 3)
        for path in (db, db.with_suffix(".many.db")):
            conn = apsw.Connection(str(path))
            assert {row[0] for row in conn.execute("SELECT payload_crc32 IS NULL FROM inbox")} == {int(not mode)}
            conn.close()
