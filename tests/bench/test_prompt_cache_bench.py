"""The prompt-cache benchmark runs end to end, and what it reports holds: caching changes how a 10-turn run's
prompt tokens are billed, never how many there are, and bills the long event's input for less."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "prompt_cache_bench.py"


def test_caching_bills_the_same_prompt_for_less() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for result in results.values():
        off, on = result["without"], result["with"]
        assert on["prompt_tokens"] == off["prompt_tokens"] and off["cache_read_input_tokens"] == 0
        assert on["input_usd"] < off["input_usd"]
        turns = result["per_turn_with"]
        assert len(turns) == 10
    long_event = results["6 kB webhook"]
    assert long_event["input_usd_ratio"] < 0.3
    # From turn 2 on, each turn reads everything the turn before it read or wrote.
    turns = long_event["per_turn_with"]
    for before, after in itertools.pairwise(turns):
        assert after["cache_read_input_tokens"] == before["cache_read_input_tokens"] + before[
            "cache_creation_input_tokens"]
