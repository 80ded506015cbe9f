"""What the console remembers between runs (the chosen theme), in a small JSON file.

It lives in the user's state folder, never in the inbox: the inbox is shared by every process
that opens it, the theme is one person's taste.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import platformdirs

from console.config import APP_NAME


def default_state_path() -> Path:
    return Path(platformdirs.user_state_dir(APP_NAME)) / "console.json"


class ConsoleState:
    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: remember nothing (tests, snapshots)

    def read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # a missing or damaged state file just means nothing is remembered
        return data if isinstance(data, dict) else {}

    def remember(self, key: str, value: Any) -> str | None:
        """Store one value; returns an error message instead of raising (a full disk is no crash)."""
        if self.path is None:
            return None
        data = self.read()
        data[key] = value
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(data, indent=2), encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError as exc:
            return f"could not remember the {key} in {self.path}: {exc}"
        return None
