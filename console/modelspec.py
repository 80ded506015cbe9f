"""The chain of models the agent may ask, in order: the `[[models]]` tables of the config.

    [[models]]
    name = "claude"                       # how the console, `status` and the owner's notices name it
    protocol = "anthropic"                # or "openai": Chat Completions with tools
    base_url = "https://api.anthropic.com"
    model = "claude-sonnet-5-5"
    api_key_env = "ANTHROPIC_API_KEY"     # left out: no key (a local server)
    prices = { input = 2.0, output = 10.0 }  # USD per million tokens; left out: the shipped table's
    ask_all = false                       # true: while this model drives a run, every world-changing call asks

The first is the primary; the others are fallbacks, asked in order while the ones before them cool down. With
no `[[models]]` the `claude_*` settings mean a chain of one (name "claude"). A leaf: the settings check the
tables with it, and the agents, the console and the commands read the chain from it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from console.pricing import PRICE_FIELDS, Price, parse_prices

PROTOCOLS = ("anthropic", "openai")
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
FIELDS = ("name", "protocol", "base_url", "model", "api_key_env", "prices", "ask_all")
LEGACY_NAME = "claude"
LEGACY_KEY_ENV = "ANTHROPIC_API_KEY"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    protocol: str
    model: str
    base_url: str | None = None        # None: the protocol's own service
    api_key_env: str | None = None     # None: no key is sent (a local server)
    price: Price | None = None         # its own price, over the shipped table
    ask_all: bool = False

    @property
    def address(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.protocol]

    def credential(self, api_key: str | None) -> str:
        """Names this model with its address and key without holding the key: a cooldown or a pause is kept
        per model and credential, so a changed key, model or address starts afresh."""
        text = f"{self.name}\0{self.protocol}\0{self.model}\0{self.address}\0{api_key or ''}"
        return f"{self.name}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def parse_models(tables: Any) -> list[ModelSpec]:
    """The `[[models]]` list, checked: raises ValueError naming the table and field at fault."""
    if not isinstance(tables, Sequence) or isinstance(tables, str | bytes):
        raise ValueError("expected a list of [[models]] tables")
    if not tables:
        raise ValueError("[[models]] needs at least one table (the primary)")
    specs: list[ModelSpec] = []
    for index, table in enumerate(tables, 1):
        where = f"[[models]] table {index}"
        if not isinstance(table, Mapping):
            raise ValueError(f"{where} must be a table")
        unknown = sorted(set(table) - set(FIELDS))
        if unknown:
            raise ValueError(f"{where} has unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
        name = _required_text(table, "name", where)
        if not _NAME.match(name):
            raise ValueError(f"{where}: name must be letters, digits, '.', '_' or '-' (at most 64), got {name!r}")
        where = f"[[models]] {name!r}"
        if any(spec.name == name for spec in specs):
            raise ValueError(f"{where} is named twice: each model's name must be its own")
        protocol = _required_text(table, "protocol", where)
        if protocol not in PROTOCOLS:
            raise ValueError(f"{where}: protocol must be \"anthropic\" or \"openai\", got {protocol!r}")
        model = _required_text(table, "model", where)
        base_url = _optional_text(table, "base_url", where)
        if base_url is not None and not re.match(r"^https?://[^/\s]+", base_url):
            raise ValueError(f"{where}: base_url must be an http:// or https:// URL, got {base_url!r}")
        key_env = _optional_text(table, "api_key_env", where)
        if key_env is not None and not _ENV.match(key_env):
            raise ValueError(f"{where}: api_key_env must name an environment variable, got {key_env!r}")
        price = _price(table.get("prices"), model, where)
        ask_all = table.get("ask_all", False)
        if not isinstance(ask_all, bool):
            raise ValueError(f"{where}: ask_all must be true or false, got {ask_all!r}")
        specs.append(ModelSpec(name, protocol, model, base_url, key_env, price, ask_all))
    return specs


def chain_of(models: Any, *, claude_model: str, claude_base_url: str | None) -> list[ModelSpec]:
    """The chain the settings give: the `[[models]]` tables, or the `claude_*` settings as a chain of one."""
    if models:
        return parse_models(models)
    return [ModelSpec(LEGACY_NAME, "anthropic", claude_model, claude_base_url, LEGACY_KEY_ENV)]


def _required_text(table: Mapping[str, Any], field: str, where: str) -> str:
    value = table.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} needs {field} (non-empty text)")
    return value.strip()


def _optional_text(table: Mapping[str, Any], field: str, where: str) -> str | None:
    if field not in table:
        return None
    value = table[field]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {field} must be non-empty text, got {value!r}")
    return value.strip().rstrip("/") if field == "base_url" else value.strip()


def _price(value: Any, model: str, where: str) -> Price | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: prices must be a table of {', '.join(PRICE_FIELDS)} (USD per million tokens)")
    try:
        return parse_prices({model: value})[model]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def model_rows(chain: Sequence[ModelSpec], stored: Sequence[Mapping[str, Any]], *, now: int) -> list[dict[str, Any]]:
    """status --json's "models" (contract: name, state, until, reason), in chain order: each model's stored
    state as it stands at `now` (a cooldown that has ended reads ready), plus `in_use` on the one the next
    turn asks (the first that is ready) and whether it is the primary."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for kept in stored:  # the newest row per name (an older credential's row may linger)
        name = str(kept.get("name"))
        if name not in by_name or int(kept.get("updated_at") or 0) > int(by_name[name].get("updated_at") or 0):
            by_name[name] = kept
    rows: list[dict[str, Any]] = []
    for spec in chain:
        row = by_name.get(spec.name)
        state, until, reason = "ready", None, None
        if row is not None and row.get("state") in ("cooling", "paused"):
            until = row.get("until")
            if row["state"] == "paused" or (until is not None and int(until) > now):
                state, reason = str(row["state"]), row.get("reason")
            else:
                until = None
        rows.append({"name": spec.name, "state": state, "until": until, "reason": reason,
                     "model": spec.model, "protocol": spec.protocol})
    in_use = next((row for row in rows if row["state"] == "ready"), None)
    for row in rows:
        row["in_use"] = row is in_use
    return rows

