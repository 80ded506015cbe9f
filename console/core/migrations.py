"""Numbered migrations, one folder per backend (core/schema: SQLite; core/pg_schema: PostgreSQL)."""

from __future__ import annotations

import re
from importlib import resources

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def numbered_migrations(folder: str) -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in console/core/<folder>, in order: (number, file name, SQL)."""
    found = []
    for entry in resources.files("console.core").joinpath(folder).iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    numbers = [n for n, _, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise RuntimeError(f"{folder} migrations must be numbered 1..N without gaps, found {numbers}")
    return found
