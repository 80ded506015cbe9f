"""Where a PostgreSQL inbox lives, read from its URL (no database driver needed: the settings check it)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from console.core.errors import StoreError

DEFAULT_SCHEMA = "agent_console"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class PgTarget:
    """Where a PostgreSQL inbox lives: how to connect (never printed), its schema, and a printable name."""

    conninfo: str
    schema: str
    display: str
    password_env: str | None = None

    @property
    def lock_key(self) -> int:
        """The advisory lock every write transaction of this inbox takes first (a signed 64-bit key)."""
        digest = hashlib.sha256(f"agent-console:{self.schema}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    @property
    def channel(self) -> str:
        """The NOTIFY channel a commit to this inbox announces itself on (an identifier, < 64 bytes)."""
        return "agent_console_" + hashlib.sha256(self.schema.encode()).hexdigest()[:16]


def parse_target(url: str, *, schema: str | None = None, password_env: str | None = None) -> PgTarget:
    """Split a URL into the connection string and the inbox schema (`?schema=NAME`, or the setting).

    A password in the URL itself is used but never shown; the usual places (PGPASSWORD, ~/.pgpass) work as
    libpq reads them, and password_env names another variable to take it from."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    from_url_env = [value for key, value in query if key == "password_env"]
    rest = [(key, value) for key, value in query if key not in ("schema", "password_env")]
    chosen = (named[-1] if named else None) or schema or DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(chosen):
        raise StoreError(f"inbox schema {chosen!r} is not a plain name: use lower-case letters, digits and _ "
                         "(at most 63), starting with a letter or _")
    env_name = (from_url_env[-1] if from_url_env else None) or password_env
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), ""))
    host = parts.hostname or "localhost"
    where = f"{host}:{parts.port}" if parts.port else host
    user = f"{parts.username}@" if parts.username else ""
    display = f"{parts.scheme}://{user}{where}{parts.path or '/'}?schema={chosen}"
    return PgTarget(conninfo, chosen, display, env_name)


def with_inbox_params(url: str, *, schema: str | None = None, password_env: str | None = None) -> str:
    """The URL with the inbox's schema and the password's variable added where it names none."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = {key for key, _ in query}
    for key, value in (("schema", schema), ("password_env", password_env)):
        if value and key not in named:
            query.append((key, value))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
