"""The webhook benchmark still runs end to end (a few deliveries), and reports what issue 22 asks of group commit:
the disk's own fsyncs per second beside the receiver's, and acks per fsync."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import on_disk

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "webhook_bench.py"


def test_quick_run_acks_every_delivery_and_reports_acks_per_fsync() -> None:
    env = on_disk({**os.environ, "PYTHONPATH": str(ROOT)})  # it measures the disk's fsyncs: not on a tmpfs
    done = subprocess.run([sys.executable, str(SCRIPT), "--senders", "8", "--requests", "80", "--no-strace", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    group, single = json.loads(done.stdout)
    assert (group["mode"], single["mode"]) == ("group", "per-request")
    for result in (group, single):
        assert result["statuses"] == {"200": 80} and result["stored"] == 80  # every ack durable, every one stored
        assert result["disk_fsyncs_per_s"] > 0 and result["commits_per_s"] > 0
        assert result["acks_per_fsync"] == 80 / result["commits"]
        assert result["disk_use"] == result["commits_per_s"] / result["disk_fsyncs_per_s"]
        # What each process spent a delivery: the receiver's front and writer, and the senders beside it.
        assert result["receiver_cpu_us"] > 0 and result["sender_cpu_us"] > 0
        assert 0 < result["writer_busy"] <= 1  # the writer's own count of the time it waited for work
    assert single["acks_per_fsync"] == 1.0  # one transaction per request: one commit per ack
    assert group["acks_per_fsync"] >= 1.0
