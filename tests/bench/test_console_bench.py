"""The console benchmark's start line still runs end to end (one round), so the script cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "console_bench.py"


def test_start_line_measures_the_console_and_the_four_pane_peer() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--start-only", "--rounds", "1"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for name in ("console", "peer_four_panes"):
        assert 0 < report[name]["median_s"] < 60, report
    assert report["console_over_peer"] > 0
    # The first frame is drawn before the agent's tools are imported: far fewer modules than with them.
    assert report["console"]["modules"] < 900, report
