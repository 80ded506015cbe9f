"""Settings: defaults, then the TOML config file, then AGENT_CONSOLE_<SETTING> environment variables.

Paths come from platformdirs: the inbox in the user's data folder, the config in the config folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "agent-console"


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "inbox.db"


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


class ConfigError(Exception):
    """A bad setting: the message names the setting, where it came from and what is wrong."""


@dataclass
class Settings:
    db: Path = field(default_factory=default_db_path)
    lease_ttl: int = 120            # seconds a worker owns the inbox without renewing
    max_attempts: int = 3           # claims before an event is parked as dead
    outbox_gap: int = 3600          # at most one (non-urgent) send per gap, in seconds
    batch_cap: int = 100            # events claimed together at most
    backoff_base: int = 10          # seconds before the first retry; doubles each time
    backoff_max: int = 900
    approval_expiry: int = 4 * 3600  # seconds before an unanswered approval expires
    agent: str = "offline"          # the built-in offline agent
    max_payload_bytes: int = 1024 * 1024
    digest_cron: str = "0 9 * * *"  # the daily digest timer installed on first start
    timezone: str = "UTC"
    theme: str = "agent-dark"
    webhooks: dict[str, Any] = field(default_factory=dict)
    channels: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> key, remaps the console's keys

    def store_options(self) -> dict[str, Any]:
        """The keyword arguments for Store.open."""
        return {
            "lease_ttl": self.lease_ttl,
            "max_attempts": self.max_attempts,
            "outbox_gap": self.outbox_gap,
            "batch_cap": self.batch_cap,
            "backoff_base": self.backoff_base,
            "backoff_max": self.backoff_max,
            "max_payload_bytes": self.max_payload_bytes,
        }
