"""The file channel survives a kill between its write and the Store's commit, without a second copy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from console.core import Store
from console.edges.channels import FileChannel
from tests.support import send_due

ROOT = Path(__file__).resolve().parents[2]
T0 = 50_000


def test_kill_between_write_and_commit_leaves_exactly_one_copy(tmp_path: Path) -> None:
    db, path = tmp_path / "inbox.db", tmp_path / "outbox.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.edges.file_channel_child", str(db), str(path), str(T0)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        announced = child.stdout.readline() if child.stdout else ""
        assert announced.startswith("written "), child.stderr.read() if child.stderr else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    key = announced.split()[1]

    with Store.open(db) as store:
        [message] = store.outbox_messages()
        assert message.status == "sending" and message.batch_key == key  # the send was never recorded
        channel = FileChannel(path)
        assert send_due(store, [channel], now=T0 + store.options.send_timeout) == 0  # the claim still stands
        assert send_due(store, [channel], now=T0 + store.options.send_timeout + 1) == 1
        [message] = store.outbox_messages()
        assert message.status == "sent" and message.batch_key == key
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"key": key, "bodies": ["the only copy"], "urgent": False, "sent_at": lines[0]["sent_at"]}]
