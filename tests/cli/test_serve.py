"""`agent-console serve` as a real process: it stores a signed delivery and stops cleanly (exit 0, no traceback,
the port closed) on SIGTERM, SIGINT or SIGHUP, through the one signal handler `run` and the console share."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from console.core import Store
from tests.cli.helpers import ROOT
from tests.edges.signing import SECRETS, sign
from tests.support import wait_until

CONFIG = """
[webhooks]
host = "127.0.0.1"
port = 0
[webhooks.sources.github]
verifier = "github"
secret_env = "SERVE_TEST_GITHUB_SECRET"
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_serve_stores_a_delivery_and_stops_cleanly_on_a_signal(
    tmp_path: Path, isolated: dict[str, str], signum: signal.Signals
) -> None:
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = dict(isolated, SERVE_TEST_GITHUB_SECRET=SECRETS["github"])
    process = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "--config", str(config), "serve"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    assert process.stderr is not None
    stream = process.stderr
    reader = threading.Thread(target=lambda: log.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    try:
        found = wait_until(lambda: re.search(r"listening on http://127\.0\.0\.1:(\d+)", "".join(log))
                           or process.poll() is not None, "serve to listen")
        assert isinstance(found, re.Match), "".join(log)
        port = int(found.group(1))
        body = json.dumps({"repository": {"full_name": "me/agent"}}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/hooks/github", data=body, method="POST",
                                         headers=sign("github", body, now=int(time.time()), delivery_id="d-1"))
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read()) == {"stored": True}
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0, "".join(log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        reader.join(timeout=10)
    assert "Traceback" not in "".join(log)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    with Store.open(db) as store:
        assert store.find_event("github", "d-1") is not None
