from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.helpers import isolated_env


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every CLI test runs with its own user folders and without the developer's AGENT_CONSOLE_* settings."""
    env = isolated_env(tmp_path / "home")
    for name in list(os.environ):
        if name.startswith("AGENT_CONSOLE_"):
            monkeypatch.delenv(name)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(name, env[name])
    return env
