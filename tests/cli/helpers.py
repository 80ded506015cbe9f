"""Shared by the CLI tests: an isolated environment (no real user folders, no stray settings), the CLI
in-process through click's CliRunner, and the CLI as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner, Result

from console.cli import main

ROOT = Path(__file__).resolve().parents[2]


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """The process environment minus any AGENT_CONSOLE_* setting, with the user folders under home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(
        PYTHONPATH=str(ROOT),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def invoke(args: Sequence[str], *, input: str | None = None, env: Mapping[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, env=dict(env or {}))


def run_process(
    args: Sequence[str], env: Mapping[str, str], *, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=ROOT, env=dict(env), input=input, capture_output=True, text=True, timeout=timeout,
    )


def assert_user_error(exit_code: int, stdout: str, stderr: str, *fragments: str) -> str:
    """Exit code 2, exactly one line on stderr in the agent-console format, no traceback anywhere."""
    assert exit_code == 2, (exit_code, stdout, stderr)
    assert "Traceback" not in stdout + stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("agent-console: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line
