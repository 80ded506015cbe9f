"""The `[mcp_servers]` config: each `[mcp_servers.NAME]` table checked into an McpServerConfig (every mistake a
ConfigError naming the key), and the `${VAR}` templates of `env` and `headers`, whose values are read from the
environment only when a server is connected (console/agents/mcp.py), never kept in the config."""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from console.config import ConfigError
from console.redact import redact_url

# Server names become part of tool names `mcp__<server>__<tool>`; no "__" inside and none at the end keeps the
# split unambiguous.
_SERVER_NAME = re.compile(r"[a-z0-9-]+(?:_[a-z0-9-]+)*")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME = _VARIABLE
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)
_TIMEOUT_KEYS = ("connect_timeout", "list_timeout", "call_timeout")
_SANDBOX_KEYS = ("sandbox", "data_dir", "read_paths", "allow_hosts")
_SERVER_KEYS = ("command", "args", "env", "url", "headers", "trusted", "private", "own_service", *_TIMEOUT_KEYS,
                "idempotency_key", *_SANDBOX_KEYS)
# allow_hosts: "api.github.com", "*.example.org" (its subdomains), either with ":PORT"; an IPv4 address likewise.
_ALLOW_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?")


@dataclass(frozen=True)
class McpServerConfig:
    """One `[mcp_servers.NAME]` table. env and headers hold the text as written (`${VAR}` unexpanded)."""

    name: str
    command: str | None = None            # stdio
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)      # values may hold ${VAR}
    url: str | None = None                # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # values may hold ${VAR}
    connect_timeout: float = 10.0
    list_timeout: float = 10.0
    call_timeout: float = 60.0
    # The owner vouches for what this server returns: its tools' results do not make a run untrusted unless a
    # tool is annotated openWorldHint: true (docs/security.md). Never set by the server itself.
    trusted: bool = False
    # What this server returns is the owner's private data (their mailbox, their bank, their files): a run that
    # reads it may not send anything to a sink unasked once it has also read untrusted content (docs/security.md,
    # the confidentiality model). Never set by the server itself.
    private: bool = False
    # Its tools' arguments reach only the owner's own service under the owner's account (their bank's API, their
    # own Slack workspace): calling them is no sink, even from a run that read untrusted content and private data.
    # Leave it off for a server that fetches URLs or sends to others. Never set by the server itself.
    own_service: bool = False
    # The server honours the idempotency key sent in each call's _meta (a repeat under a key it has seen changes
    # nothing): a call whose outcome is unknown may then be sent again under the same key without asking.
    idempotency_key: bool = False
    # The sandbox of a stdio server (console/agents/sandbox.py, docs/security.md): on unless sandbox = false;
    # data_dir is its one writable folder (None: a folder named after the server beside the inbox), read_paths
    # the folders of the owner's home it may read, allow_hosts the hosts the egress proxy lets it reach.
    sandbox: bool = True
    data_dir: Path | None = None
    read_paths: tuple[Path, ...] = ()
    allow_hosts: tuple[str, ...] = ()

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


def parse_mcp_servers(raw: Mapping[str, Any]) -> dict[str, McpServerConfig]:
    """The `[mcp_servers]` table of the config, checked. Every mistake is a ConfigError naming the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError("mcp_servers: expected a table of servers, one [mcp_servers.NAME] each")
    servers: dict[str, McpServerConfig] = {}
    for name, table in raw.items():
        servers[name] = _parse_server(name, table)
    return servers


def _parse_server(name: Any, table: Any) -> McpServerConfig:
    where = f"mcp_servers.{name}"
    if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: a server name is lowercase letters, digits and '-', with single '_' between them "
            f"(it becomes part of the tool names mcp__<server>__<tool>)"
        )
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table with command (a stdio server) or url (an HTTP server)")
    for key in table:
        if key not in _SERVER_KEYS:
            raise ConfigError(f"{where}.{key}: unknown setting (expected one of {', '.join(_SERVER_KEYS)})")
    has_command, has_url = "command" in table, "url" in table
    if has_command == has_url:
        raise ConfigError(
            f"{where}: set exactly one of command (a stdio server) or url (a streamable HTTP server)"
            + ("; both are set" if has_command else "")
        )
    stdio_only, http_only = ("args", "env", *_SANDBOX_KEYS), ("headers",)
    for key in http_only if has_command else stdio_only:
        if key in table:
            kind = "an HTTP server (url)" if key in http_only else "a stdio server (command)"
            raise ConfigError(f"{where}.{key}: only for {kind}")

    command = _text(table, "command", where) if has_command else None
    url = _url(table, where) if has_url else None
    args = _text_list(table.get("args", []), f"{where}.args")
    env = _templates(table.get("env", {}), f"{where}.env", _ENV_NAME, "an environment variable name")
    headers = _templates(table.get("headers", {}), f"{where}.headers", _HEADER_NAME, "an HTTP header name")
    timeouts = {key: _seconds(table[key], f"{where}.{key}") for key in _TIMEOUT_KEYS if key in table}
    trusted = table.get("trusted", False)
    if not isinstance(trusted, bool):
        raise ConfigError(f"{where}.trusted: expected true or false, got {trusted!r}")
    private = table.get("private", False)
    if not isinstance(private, bool):
        raise ConfigError(f"{where}.private: expected true or false, got {private!r}")
    own_service = table.get("own_service", False)
    if not isinstance(own_service, bool):
        raise ConfigError(f"{where}.own_service: expected true or false, got {own_service!r}")
    honours_key = table.get("idempotency_key", False)
    if not isinstance(honours_key, bool):
        raise ConfigError(f"{where}.idempotency_key: expected true or false, got {honours_key!r}")
    sandbox = table.get("sandbox", True)
    if not isinstance(sandbox, bool):
        raise ConfigError(f"{where}.sandbox: expected true or false, got {sandbox!r}")
    data_dir = _folder(table["data_dir"], f"{where}.data_dir") if "data_dir" in table else None
    read_paths = tuple(_folder(item, f"{where}.read_paths[{index}]")
                       for index, item in enumerate(_text_list(table.get("read_paths", []), f"{where}.read_paths")))
    allow_hosts = _allow_hosts(table.get("allow_hosts", []), f"{where}.allow_hosts")
    return McpServerConfig(name=name, command=command, args=args, env=env, url=url, headers=headers,
                           trusted=trusted, private=private, own_service=own_service, idempotency_key=honours_key,
                           sandbox=sandbox, data_dir=data_dir,
                           read_paths=read_paths, allow_hosts=allow_hosts, **timeouts)


def _folder(value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"{where}: expected a folder's path")
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ConfigError(f"{where}: expected an absolute path (or one starting with ~), got {value!r}")
    return Path(os.path.normpath(path))


def _allow_hosts(value: Any, where: str) -> tuple[str, ...]:
    hosts = []
    for index, item in enumerate(_text_list(value, where)):
        host = item.strip().lower()
        port = host.rpartition(":")[2] if ":" in host else ""
        if not _ALLOW_HOST.fullmatch(host) or (port and not 0 < int(port) < 65536):
            raise ConfigError(f"{where}[{index}]: expected a host name (\"api.github.com\"), its subdomains "
                              f"(\"*.example.org\") or either with a port (\"host:8443\"), got {item!r}")
        hosts.append(host)
    return tuple(hosts)


def _text(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}.{key}: expected text")
    if "\0" in value:
        raise ConfigError(f"{where}.{key}: must not contain a NUL character")
    return value


def _url(table: Mapping[str, Any], where: str) -> str:
    value = _text(table, "url", where)
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {redact_url(value)!r}")
    return value


def _text_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: expected a list of text")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{where}[{index}]: expected text")
        if "\0" in item:
            raise ConfigError(f"{where}[{index}]: must not contain a NUL character")
    return tuple(value)


def _templates(value: Any, where: str, name_pattern: re.Pattern[str], what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table of name = \"text\"")
    checked: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not name_pattern.fullmatch(name):
            raise ConfigError(f"{where}: {name!r} is not {what}")
        if not isinstance(text, str):
            raise ConfigError(f"{where}.{name}: expected text")
        _template_parts(text, setting=f"{where}.{name}")  # the syntax now; the values at connect time
        checked[name] = text
    return checked


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _template_parts(value: str, *, setting: str) -> list[tuple[bool, str]]:
    """The text split into (is_variable, literal-or-name) parts; a $ that is neither ${NAME} nor $$ is an error,
    so a forgotten brace is not silently sent as the literal text "$TOKEN"."""
    parts: list[tuple[bool, str]] = []
    literal: list[str] = []
    index = 0
    while index < len(value):
        char = value[index]
        if char != "$":
            literal.append(char)
            index += 1
            continue
        following = value[index + 1:index + 2]
        if following == "$":
            literal.append("$")
            index += 2
            continue
        end = value.find("}", index + 2) if following == "{" else -1
        name = value[index + 2:end] if end != -1 else ""
        if not _VARIABLE.fullmatch(name):
            raise ConfigError(f"{setting}: write ${{NAME}} for an environment variable, or $$ for a dollar sign")
        if literal:
            parts.append((False, "".join(literal)))
            literal = []
        parts.append((True, name))
        index = end + 1
    if literal:
        parts.append((False, "".join(literal)))
    return parts


def expand_env(value: str, env: Mapping[str, str], *, setting: str) -> str:
    """`${VAR}` replaced by the variable's value from env, `$$` by a dollar sign. A variable that is not set is a
    ConfigError naming the variable and the setting, never any value."""
    return expanded_with_secrets(value, env, setting=setting)[0]


def expanded_with_secrets(value: str, env: Mapping[str, str], *, setting: str) -> tuple[str, list[str]]:
    """The expanded text, and the values that came from the environment (to scrub from messages)."""
    pieces: list[str] = []
    secrets: list[str] = []
    for is_variable, text in _template_parts(value, setting=setting):
        if not is_variable:
            pieces.append(text)
            continue
        found = env.get(text)
        if found is None:
            raise ConfigError(f"{setting}: the environment variable {text} is not set")
        pieces.append(found)
        secrets.append(found)
    return "".join(pieces), secrets
