"""The CLI benchmark still runs end to end (tiny sizes), so the script cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "cli_bench.py"


def test_quick_run_measures_every_line(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--json", str(result_file), "--markdown"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result["cold_method"] == "fadvise"  # a quick run never drops the machine's caches
    rows = {(row["command"], row["cache"]): row for row in result["cli"]["rows"]}
    assert set(rows) == {(c, t) for c in ("ingest", "ingest, changed since", "status") for t in ("cold", "warm")} | {
        ("ingest, in-process", "warm"), ("ingest, changed since, in-process", "warm")}
    for row in rows.values():
        assert row["large_s"] > 0 and row["fresh_s"] > 0 and row["ratio"] > 0
    limited, unlimited = result["wal"]
    assert limited["sizes"]["peak"] > limited["journal_size_limit"]  # the reader did hold the WAL back
    assert limited["sizes"]["after 2nd commit"] <= limited["journal_size_limit"]
    assert unlimited["sizes"]["after 2nd commit"] >= unlimited["sizes"]["peak"]  # without a limit it stays
    assert limited["sizes"]["after maintenance checkpoint"] == 0 and limited["truncated"] is True
    assert "| `status` | cold |" in done.stdout
