"""The start-up benchmark still runs end to end (a tiny inbox, one run of each line), so it cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "startup_bench.py"


def test_quick_run_measures_every_line(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--json", str(result_file), "--markdown"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(result_file.read_text(encoding="utf-8"))
    rows = {row["line"]: row for row in result["rows"]}
    assert set(rows) == {"gate", "status", "ingest", "run to lease held"}
    for row in rows.values():
        assert row["cache"] == "warm" and row["large_s"] > 0 and row["empty_s"] > 0
    assert result["built"]["ordinary_events"] > 0 and result["built"]["large_events"] > 0
    assert result["bytes"]["large"] > 4 * 1024 * 1024 > result["bytes"]["empty"]
    assert result["gate_finished_on_large"] is True  # a small file is read whole within the bound
    assert "| run to lease held | warm |" in done.stdout
