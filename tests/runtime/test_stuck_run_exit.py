"""A real process: stopping an engine whose run is stuck in the agent ends the process promptly, with the
lease released and the event back to pending (README: SIGTERM ... releases the lease at once and exits)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from console.core import Store

ROOT = Path(__file__).resolve().parents[2]


def test_a_stuck_run_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("stuck_agent_child.py")), str(db)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"the process did not exit after the engine stopped: {out!r} {err[-2000:]!r}") from None
    assert child.returncode == 0 and out.strip() == "stopped", (child.returncode, out, err[-2000:])
    with Store.open(db) as store:
        event = store.find_event("chat", "m1")
        assert event is not None and event.status == "pending" and event.attempts == 1
        lease = store.lease()
        assert lease is not None and lease.holder == "stuck" and not lease.is_live(int(time.time()))  # released
