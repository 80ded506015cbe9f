"""The run-cost benchmark runs end to end on small inboxes, so the script cannot rot unnoticed (the figure is
the benchmark's to take: docs/performance.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "run_cost_bench.py"


def test_run_cost_compares_a_full_inbox_with_an_empty_one(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--stored", "500", "--runs", "10", "--rounds", "1",
                           "--dir", str(tmp_path)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["stored"] == 500 and report["runs"] == 10
    for key in ("wall_ms_per_run_full", "wall_ms_per_run_empty", "cpu_ms_per_run_full", "cpu_ms_per_run_empty"):
        assert report[key] > 0, report
    assert report["wall_ratio"] > 0 and report["cpu_ratio"] > 0
