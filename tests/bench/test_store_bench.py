"""The store benchmark still runs end to end (tiny sizes), so the script cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "store_bench.py"
LINES = ("ingest", "duplicates", "drain", "cycle_empty", "cycle_full", "cycle_flat", "producers", "group",
         "group_ratio")
CORE = "core (console.core.Store)"
SEED = "seeds' reference (inbox.py)"
PEERS = ("persist-queue SQLiteAckQueue", "persist-queue UniqueAckQ", "huey SqliteStorage", SEED)


def run_bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )


def test_quick_run_measures_every_line_for_every_system(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = run_bench(tmp_path, "--quick", "--json", str(result_file), "--markdown")
    assert done.returncode == 0, done.stderr
    result = json.loads(result_file.read_text(encoding="utf-8"))
    lines = {line["key"]: line for line in result["lines"]}
    assert tuple(lines) == LINES
    for key, line in lines.items():
        assert line["figures"][CORE] > 0, key
    for key in ("ingest", "drain", "cycle_empty", "producers"):
        for peer in PEERS:
            assert lines[key]["figures"][peer] > 0, (key, peer)
    # Only UniqueAckQ and the seeds' reference can refuse a duplicate; the others are reported as unable, not as zero.
    assert lines["duplicates"]["figures"]["persist-queue UniqueAckQ"] > 0
    assert lines["duplicates"]["figures"][SEED] > 0
    assert lines["cycle_full"]["figures"][SEED] > 0
    assert lines["duplicates"]["figures"]["persist-queue SQLiteAckQueue"] is None
    assert lines["duplicates"]["figures"]["huey SqliteStorage"] is None
    # Durability is comparable: every system was read back as WAL with synchronous=FULL.
    assert set(result["durability"]) == {CORE, *PEERS}
    for settings in result["durability"].values():
        assert (settings["journal_mode"], settings["synchronous"]) == ("wal", "FULL")
    # Claiming reads only what it claims: no claim statement walks the inbox table.
    assert set(result["claim_plans"]) >= {"lost", "due_retry", "claim_one", "claim_fresh"}
    assert "no claim statement scans the table" in done.stdout
    assert "| durable ingest" in done.stdout  # the Markdown table docs/performance.md records
    assert list(tmp_path.iterdir()) == [result_file]  # the databases were cleaned up


def test_bad_directory_is_one_clear_error(tmp_path: Path) -> None:
    done = run_bench(tmp_path / "missing", "--quick")
    assert done.returncode == 2
    assert "is not a folder" in done.stderr
    assert "Traceback" not in done.stderr
