"""The soak (bench/soak.py) still runs end to end for a few seconds, so the script cannot rot unnoticed: the real
engine with the Claude stand-in and an MCP server, the real console in a pty, both sampled. Flatness is the
30-minute run's to judge (docs/performance.md), not a few seconds'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "soak.py"


def test_a_short_soak_samples_the_engine_and_the_console_under_load() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "3", "--sample-every", "1", "--tool-every", "5"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ingested"] >= 40 and report["done"] > 0, report  # 20 a second, and the engine ran them
    assert report["model_requests"] > 0 and report["mcp_tool_calls"] > 0, report
    assert len(report["samples"]) >= 3
    for process in ("engine", "console"):
        for sample in report["samples"]:
            assert sample[f"{process}_rss_kb"] > 10_000 and sample[f"{process}_fds"] > 0, sample
        assert set(report[process]) == {"rss_kb", "fds", "flat"}
        assert report[process]["rss_kb"]["growth"] > -1
