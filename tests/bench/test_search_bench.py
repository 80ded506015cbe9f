"""The search benchmark still runs end to end (tiny sizes), so the script cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "search_bench.py"


def test_quick_run_measures_every_line(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--json", str(result_file), "--markdown"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result["events"] == 2_000
    assert len(result["rows"]) == 5
    for row in result["rows"]:
        assert row["seconds"] > 0 and row["queries"] >= 1
    assert result["migration_0014_s"] > 0
    assert "| page read (events pane, 50 rows) | 1 |" in done.stdout
