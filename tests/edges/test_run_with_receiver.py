"""`agent-console run` with [webhooks] enabled: a signed delivery is acked only when durable, then run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from console.core import Store
from tests.edges.signing import SECRETS, sign

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
[webhooks]
enabled = true
host = "127.0.0.1"
port = 0
[webhooks.sources.github]
verifier = "github"
secret_env = "RUN_TEST_GITHUB_SECRET"
"""


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_run_embeds_the_receiver_and_runs_what_it_stores(tmp_path: Path) -> None:
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RUN_TEST_GITHUB_SECRET=SECRETS["github"])
    proc = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "--config", str(config), "run"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        log: list[str] = []
        reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        address = None
        deadline = time.monotonic() + 30
        while address is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"webhook receiver listening on (http://127\.0\.0\.1:\d+)", "".join(log))
            address = found.group(1) if found else None
            time.sleep(0.02)  # polling interval while waiting for the log line
        assert address is not None
        body = b'{"repository": {"full_name": "me/agent"}, "sender": {"login": "eve"}, "commits": [{}]}'
        headers = sign("github", body, now=int(time.time()), delivery_id="run-d-1")
        assert post(f"{address}/hooks/github", body, headers) == (200, b'{"stored": true}')
        assert post(f"{address}/hooks/github", body, headers) == (200, b'{"stored": false}')
        tampered = sign("github", body + b" ", now=int(time.time()), delivery_id="run-d-2")
        assert post(f"{address}/hooks/github", body, tampered)[0] == 401
        with Store.open(db, check=False) as store:
            while time.monotonic() < deadline:
                event = store.find_event("github", "run-d-1")
                if event is not None and event.status == "done":
                    break
                time.sleep(0.05)  # polling interval while waiting for the condition
            else:
                raise AssertionError("the stored delivery was not run")
            assert event.duplicates == 1 and store.find_event("github", "run-d-2") is None
            bodies = [m.body for m in store.outbox_messages()]
            assert bodies == ["GitHub: 1 commit(s) pushed to me/agent by eve"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        reader.join(timeout=10)
    assert all(SECRETS["github"] not in line for line in log)
