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
        assert 0 < report[name]["cpu_median_s"] < 60, report
    assert report["console_over_peer"] > 0 and report["console_cpu_over_peer"] > 0
    # The first frame is drawn before the agent's tools are imported: far fewer modules than with them.
    assert report["console"]["modules"] < 900, report


def test_idle_line_measures_the_console_and_both_peers() -> None:
    """A second of each, after a short start: the script runs end to end and reports every system (the figure
    itself is the benchmark's to take, on a quiet machine: docs/performance.md)."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--idle-only", "--idle-seconds", "1", "--idle-warmup", "3",
                           "--idle-settle-limit", "0"],  # the smoke does not wait for the console to settle
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["scenario"] == "quiet"
    for name in ("console", "peer_plain_textual", "peer_textual_countdown"):
        assert report[name]["wall_seconds"] >= 1, report
        assert report[name]["cpu_seconds"] > 0, report  # schedstat counts even an idle program's wake-ups
    assert report["console_over_peer"] > 0
