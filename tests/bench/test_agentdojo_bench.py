"""The AgentDojo utility bench runs end to end on two banking tasks, so it cannot rot unnoticed where AgentDojo is
installed (it is not a test dependency: it brings many SDKs; `pip install agentdojo==0.1.35` in a venv of its own,
docs/security.md). The suite's figures are the bench's to take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "agentdojo_bench.py"


def test_a_payment_and_a_question_complete_with_one_approval_for_the_payment(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo")
    out = tmp_path / "dojo.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--suite", "banking", "--task", "user_task_0", "--task",
                           "user_task_1", "--json", str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    banking = json.loads(out.read_text())["suites"]["banking"]
    pay, total = banking["per_task"]["user_task_0"], banking["per_task"]["user_task_1"]
    # user_task_0 pays a bill read from a file (outside text): the payment asks once, the owner says yes.
    assert (pay["utility"], pay["approved"], pay["world_changing_calls"]) == (True, ["send_money"], 1)
    # user_task_1 only reads: nothing asks, and the answer reaches the owner.
    assert (total["utility"], total["approvals"]) == (True, 0)
