"""Webhook secrets: read from environment variables or a KEY=VALUE file that only its owner can read.

A secret is wrapped in Secret so that printing, logging or formatting it into an error shows stars;
only a verifier calls reveal().
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from console.config import ConfigError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Secret:
    """A secret value that never shows itself in a repr, a str or a log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret cannot be pickled")


def check_private(path: Path) -> None:
    """Refuse a secrets file that group or others may read or write."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"webhooks.secrets_file: {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"webhooks.secrets_file: cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"webhooks.secrets_file: {path} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"webhooks.secrets_file: {path} has mode {mode:04o}, so group or others can reach it; "
            f"secrets must be readable by their owner only (run: chmod 600 {path})"
        )


def load_secrets_file(path: str | os.PathLike[str]) -> dict[str, Secret]:
    """Parse a KEY=VALUE secrets file (blank lines and # comments skipped, `export ` and quotes allowed).

    Errors name the file and the line number, never the line's content, which may be a secret.
    """
    target = Path(path).expanduser()
    check_private(target)
    try:
        text = target.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"webhooks.secrets_file: {target} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"webhooks.secrets_file: cannot read {target}: {exc.strerror}") from None
    found: dict[str, Secret] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _KEY.match(key):
            raise ConfigError(f"webhooks.secrets_file: {target} line {number}: expected KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[key] = Secret(value)
    return found


def resolve_secret(
    variable: str, setting: str, *, environ: Mapping[str, str], file_values: Mapping[str, Secret],
    file_path: Path | None,
) -> Secret:
    """The secret named `variable`: the environment first, then the secrets file."""
    value = environ.get(variable)
    if value is not None and value.strip():
        return Secret(value.strip())
    if variable in file_values and file_values[variable].reveal().strip():
        return file_values[variable]
    where = f"the environment or the secrets file {file_path}" if file_path else "the environment"
    raise ConfigError(f"{setting}: the secret {variable} is not set (looked in {where})")
