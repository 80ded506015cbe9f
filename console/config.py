"""Settings: defaults, then the TOML config file, then AGENT_CONSOLE_<SETTING> environment variables,
then command-line options.

Paths come from platformdirs: the inbox in the user's data folder, the config in the config folder.
Every bad value is a ConfigError naming the setting and where the value came from, so the user can
find and fix it without reading a traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import time
import tomllib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import platformdirs
import tzlocal

from console.core import Store
from console.core.errors import StoreError
from console.core.models import BudgetDefaults
from console.core.options import STORE_OPTION_NAMES, StoreOptions
from console.core.pg_target import parse_target
from console.core.spend import check_budget_usd
from console.core.store import inbox_location, settled_location
from console.core.timers import validate_cron
from console.modelspec import ModelSpec, chain_of, parse_models
from console.pricing import parse_prices
from console.redact import redact_url

APP_NAME = "agent-console"
ENV_PREFIX = "AGENT_CONSOLE_"
DEFAULT_WEBHOOK_READ_TIMEOUT = 15
TELEMETRY_SUFFIX = "telemetry.jsonl"  # an inbox's telemetry file is named by the inbox, then this
DEFAULT_WEBHOOK_MAX_CONNECTIONS = 256
# The agents the `agent` setting may name. The registry (console/agents/registry.py) builds them; a test keeps
# the two lists equal, so the settings never import the agents they configure.
AGENT_NAMES = ("offline", "claude")


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "inbox.db"


def local_zone_name() -> str:
    """This machine's IANA time zone (from TZ or the system's setting), or UTC when it cannot tell.

    The default for cron timers and printed times, so that "0 9 * * *" means nine o'clock where the
    user is. A zone that is only an offset or a broken link has no IANA name: UTC then."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tzlocal warns about odd settings; the fallback is the answer
            name = tzlocal.get_localzone_name()
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        return "UTC"
    return name


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


class ConfigError(Exception):
    """A bad setting: the message names the setting, where it came from and what is wrong."""


@dataclass
class Settings:
    db: Path | str = field(default_factory=default_db_path)  # a SQLite file, or a postgresql:// URL
    db_schema: str | None = None    # a PostgreSQL inbox's schema, when the URL names none (default agent_console)
    password_env: str | None = None  # the environment variable holding the PostgreSQL password
    lease_ttl: int = 120            # seconds a worker owns the inbox without renewing
    max_attempts: int = 3           # claims before an event is parked as dead
    outbox_gap: int = 3600          # at most one (non-urgent) send per gap, in seconds
    batch_cap: int = 100            # events claimed together at most
    backoff_base: int = 10          # seconds before the first retry; doubles each time
    backoff_max: int = 900
    backoff_jitter: float = 0.2     # each retry's wait is spread by up to this fraction either way
    send_timeout: int = 60          # seconds one send may take before the batch is tried again
    max_send_attempts: int = 12     # failed sends of one batch to one channel before it is given up
    # Caps (0 turns one off): world-changing tool calls a run makes unasked, and in any hour (past either, a
    # call asks for approval instead); messages to the owner in any hour (past it they are held until
    # released with `agent-console held release`). The owner is told once when a cap is reached.
    max_tool_calls_per_run: int = 20
    max_tool_calls_per_hour: int = 60
    max_messages_per_hour: int = 20
    busy_timeout: float = 5.0       # seconds a write waits for another process's write lock (a SQLite inbox)
    # The agent's own schedules (the `schedule` tool): at most this many at once, none more often than this
    # (seconds); a request past either is refused with the reason, which the model reads.
    max_schedules: int = 20
    min_schedule_interval: int = 15 * 60
    approval_expiry: int = 4 * 3600  # seconds before an unanswered approval expires
    confirm_approvals: bool = False  # y on an approval with more than a minute left asks once more
    agent: str = "offline"          # the built-in offline agent
    claude_model: str = "claude-sonnet-5-5"  # the model the claude agent talks to
    claude_max_tokens: int = 1024   # the longest reply of one claude model turn
    claude_base_url: str | None = None  # a proxy or a test server instead of the Anthropic API
    claude_max_turns: int = 10      # model turns per conversation per run; still calling tools after that fails the run
    claude_timeout: float = 120.0   # seconds one model turn may take (the lease is renewed meanwhile)
    # The estimated tokens of the events handed to one model call: what does not fit waits for the next run,
    # with no attempt spent. Well under any model's context window, leaving room for the turns that follow.
    claude_batch_tokens: int = 40_000
    # The chain of models ([[models]] tables, console/modelspec.py): the first is the primary, the others are
    # asked in order while it cools down. None: the claude_* settings above, as a chain of one.
    models: list[dict[str, Any]] | None = None
    failover_after: int = 30        # seconds one model may keep failing before the next one is asked
    announce_fallback: bool = True  # tell the owner (once an hour at most) when a fallback model answers
    # Tools: MCP servers ([mcp_servers.NAME]), who may run what ([permissions]), the owner's instructions.
    mcp_servers: dict[str, Any] | None = None  # None: the example shop server for the offline agent, none for claude
    permissions: dict[str, Any] | None = None  # None: the defaults (console/agents/policy.py)
    instructions: Path = field(default_factory=lambda: default_config_path().parent / "instructions.md")
    memory_chars: int = 4000        # of the agent's notes shown at the start of each run
    claude_prompt_cache: bool = True  # cache breakpoints on the tools, the system prompt and the conversation
    daily_budget_usd: float = 0.0   # US dollars of model calls per day in `timezone` (0 = no limit)
    monthly_budget_usd: float = 0.0  # per calendar month in `timezone` (0 = no limit)
    prices: dict[str, Any] = field(default_factory=dict)  # [prices."model-id"] over the shipped price table
    max_payload_bytes: int = 1024 * 1024
    retain_days: int = 0            # prune finished work older than this, once a day (0 keeps everything)
    digest_cron: str = "0 9 * * *"  # the daily digest timer installed on first start
    timezone: str = field(default_factory=local_zone_name)  # this machine's zone (UTC if it cannot tell)
    theme: str = "agent-dark"
    approval_bell: bool = False     # ring the terminal's bell when an approval arrives in the console
    # Traces and metrics of every run (OpenTelemetry): to the inbox's own file beside it, and to an OTLP
    # endpoint when OTEL_EXPORTER_OTLP_* names one. false turns them off.
    telemetry: bool = True
    webhooks: dict[str, Any] = field(default_factory=dict)
    # Seconds a webhook sender has to send its request's head, and again its body; then it is cut off.
    webhook_read_timeout: int = DEFAULT_WEBHOOK_READ_TIMEOUT
    webhook_max_connections: int = DEFAULT_WEBHOOK_MAX_CONNECTIONS  # more at once are refused with a 503
    channels: list[dict[str, Any]] = field(default_factory=list)
    email: dict[str, Any] = field(default_factory=dict)  # [email]: a mailbox as a source (console/edges/mail_config.py)
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> key, remaps the console's keys
    # Where each setting given by the user came from ("config file PATH", "environment variable NAME", "the
    # command line"); a setting missing here has its default. Not a setting itself.
    origins: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def store_options(self) -> StoreOptions:
        """What the Store obeys, from these settings: the one place a store setting is handed over."""
        return StoreOptions(**{name: getattr(self, name) for name in sorted(STORE_OPTION_NAMES)})

    @property
    def inbox_folder(self) -> Path:
        """Where files kept beside the inbox live (the example shop's state): the inbox file's folder, or
        for an inbox on PostgreSQL the user's data folder."""
        if isinstance(self.db, Path):
            return self.db.parent
        return Path(platformdirs.user_data_dir(APP_NAME))

    @property
    def inbox_name(self) -> str:
        """The inbox as it names itself on every span it records: its file's path, or for an inbox on PostgreSQL
        its server, database and schema (never a password)."""
        if isinstance(self.db, Path):
            return str(self.db)
        return parse_target(self.db).display

    @property
    def telemetry_file(self) -> Path:
        """This inbox's own telemetry file, named by it in inbox_folder: inbox.db's is inbox.db.telemetry.jsonl, and
        an inbox on PostgreSQL's is postgresql-<user_host_port_database_schema>.telemetry.jsonl. (Before, every
        inbox in a folder, and every PostgreSQL inbox, wrote to one telemetry.jsonl: `trace` reads that file too.)"""
        if isinstance(self.db, Path):
            return self.db.with_name(f"{self.db.name}.{TELEMETRY_SUFFIX}")
        where = re.sub(r"[^A-Za-z0-9.-]+", "_", self.inbox_name.split("://", 1)[-1]).strip("_")[:160]
        return self.inbox_folder / f"postgresql-{where}.{TELEMETRY_SUFFIX}"

    def model_chain(self) -> list[ModelSpec]:
        """The chain of models the claude agent asks ([[models]], or the claude_* settings as a chain of one);
        none for the offline agent."""
        if self.agent != "claude":
            return []
        return chain_of(self.models, claude_model=self.claude_model, claude_base_url=self.claude_base_url)

    def budget_defaults(self) -> BudgetDefaults:
        """The budgets these settings give, where each came from, and the owner's time zone. A budget
        stored in the inbox (`agent-console budget`) wins over these."""
        def origin(name: str, value: float) -> str:
            return self.origins.get(name) or ("default" if value == 0 else "settings")

        return BudgetDefaults(self.daily_budget_usd, self.monthly_budget_usd,
                              origin("daily_budget_usd", self.daily_budget_usd),
                              origin("monthly_budget_usd", self.monthly_budget_usd), self.timezone)


# --- one checker per kind of setting -----------------------------------------------------------
# A checker takes the raw value (from TOML, or the text of an environment variable when from_text is
# true) and returns the typed value, or raises ValueError saying what is wrong (without the source).

Checker = Callable[[Any, bool], Any]


# Far beyond any sensible setting, and far inside SQLite's 64-bit integers: a time plus any of these fits.
MAX_WHOLE_NUMBER = 1_000_000_000


def _seconds_or_count(minimum: int, maximum: int = MAX_WHOLE_NUMBER) -> Checker:
    def check(value: Any, from_text: bool) -> int:
        if from_text:
            try:
                value = int(str(value).strip())
            except ValueError:
                raise ValueError(f"expected a whole number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise ValueError(f"must be at most {maximum}, got {value}")
        return value

    return check


def _finite_number(value: Any, from_text: bool) -> float | None:
    """The number a setting holds (text from the environment is read as one), or None when it is not a
    finite number (a bool from a TOML file is not one either)."""
    if from_text:
        try:
            value = float(str(value).strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _seconds_between(minimum: float, maximum: float) -> Checker:
    """A duration that may have a fraction (a request timeout)."""

    def check(value: Any, from_text: bool) -> float:
        number = _finite_number(value, from_text)
        if number is None:
            raise ValueError(f"expected a number of seconds, got {value!r}")
        if number < minimum:
            raise ValueError(f"must be at least {minimum:g} second{'s' if minimum != 1 else ''}, got {number:g}")
        if number > maximum:
            raise ValueError(f"must be at most {maximum:g} seconds, got {number:g}")
        return number

    return check


def _fraction(value: Any, from_text: bool) -> float:
    """A share of something: 0 or more and less than 1 (0.2 = up to 20 %)."""
    number = _finite_number(value, from_text)
    if number is None:
        raise ValueError(f"expected a fraction such as 0.2, got {value!r}")
    if not 0 <= number < 1:
        raise ValueError(f"must be at least 0 and less than 1, got {number:g}")
    return number


def _usd(value: Any, from_text: bool) -> float:
    """An amount of US dollars, 0 or more (a budget: 0 means no limit)."""
    given = value
    if from_text:
        try:
            value = float(str(value).strip())
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a number of US dollars, got {given!r}")
    return check_budget_usd(float(value), "the budget")


def _flag(value: Any, from_text: bool) -> bool:
    if from_text:
        word = str(value).strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _prices(value: Any, from_text: bool) -> dict[str, Any]:
    found = _structured(dict, 'a table of [prices."model-id"] tables')(value, from_text)
    parse_prices(found)  # refuses a bad entry now, with the model and field named
    return dict(found)


def _models(value: Any, from_text: bool) -> list[dict[str, Any]]:
    found = _structured(list, "a list of [[models]] tables")(value, from_text)
    parse_models(found)  # refuses a bad table now, with the model and field named
    return [dict(table) for table in found]


def _text(value: Any, from_text: bool) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected non-empty text, got {value!r}")
    return value.strip()


def _path(value: Any, from_text: bool) -> Path:
    return Path(_text(value, from_text)).expanduser()


def _inbox(value: Any, from_text: bool) -> Path | str:
    """The path of an inbox file, or a PostgreSQL URL (checked here, so a typo is caught at start)."""
    text = _text(value, from_text)
    try:
        target = inbox_location(text)
    except StoreError as exc:
        raise ValueError(str(exc)) from None
    if isinstance(target, Path):
        return target
    if urlsplit(text).password:
        raise ValueError("a PostgreSQL URL must not carry the password (it would sit in the config file and "
                         "show in process lists): use PGPASSWORD, ~/.pgpass or the password_env setting")
    return text


def _schema_name(value: Any, from_text: bool) -> str:
    name = _text(value, from_text)
    try:
        parse_target("postgresql://localhost/", schema=name)
    except StoreError as exc:
        raise ValueError(str(exc)) from None
    return name


def _env_name(value: Any, from_text: bool) -> str:
    name = _text(value, from_text)
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise ValueError(f"{name!r} is not the name of an environment variable")
    return name


def _agent(value: Any, from_text: bool) -> str:
    name = _text(value, from_text)
    if name not in AGENT_NAMES:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENT_NAMES))}")
    return name


def _url(value: Any, from_text: bool) -> str:
    url = _text(value, from_text)
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// address, got {redact_url(url)!r}")
    return url


def _zone_name(value: Any, from_text: bool) -> str:
    name = _text(value, from_text)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name such as Europe/Berlin)") from None
    return name


def _cron(value: Any, from_text: bool) -> str:
    expression = _text(value, from_text)
    validate_cron(expression, None, now=int(time.time()))  # and it must still fire: `run` installs it
    return expression


def _structured(kind: type, description: str) -> Checker:
    """Tables and lists: TOML gives them directly; an environment variable carries them as JSON."""

    def check(value: Any, from_text: bool) -> Any:
        if from_text:
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(f"expected {description} written as JSON, got {value!r}") from None
            except RecursionError:  # json's decoder recurses
                raise ValueError(f"expected {description} written as JSON, got one nested too deeply") from None
        if not isinstance(value, kind):
            raise ValueError(f"expected {description}, got {value!r}")
        return value

    return check


def _channels(value: Any, from_text: bool) -> list[dict[str, Any]]:
    found = _structured(list, "a list of tables")(value, from_text)
    if not all(isinstance(item, dict) for item in found):
        raise ValueError("expected a list of tables ([[channels]] entries)")
    return list(found)


def _keys(value: Any, from_text: bool) -> dict[str, str]:
    found = _structured(dict, "a table of binding id = key")(value, from_text)
    for binding, key in found.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"the key for binding {binding!r} must be non-empty text, got {key!r}")
    return dict(found)


CHECKS: dict[str, Checker] = {
    "db": _inbox,
    "db_schema": _schema_name,
    "password_env": _env_name,
    "lease_ttl": _seconds_or_count(1),
    "max_attempts": _seconds_or_count(1),
    "outbox_gap": _seconds_or_count(0),
    "batch_cap": _seconds_or_count(1),
    "backoff_base": _seconds_or_count(0),
    "backoff_max": _seconds_or_count(0),
    "backoff_jitter": _fraction,
    "send_timeout": _seconds_or_count(1),
    "max_send_attempts": _seconds_or_count(1),
    "max_tool_calls_per_run": _seconds_or_count(0, 100_000),
    "max_tool_calls_per_hour": _seconds_or_count(0, 1_000_000),
    "max_messages_per_hour": _seconds_or_count(0, 1_000_000),
    "busy_timeout": _seconds_between(0.001, 3600),
    "max_schedules": _seconds_or_count(0, 10_000),
    "min_schedule_interval": _seconds_or_count(60, 366 * 86_400),
    "approval_expiry": _seconds_or_count(1),
    "confirm_approvals": _flag,
    "agent": _agent,
    "claude_model": _text,
    "claude_max_tokens": _seconds_or_count(1),
    "claude_base_url": _url,
    "claude_max_turns": _seconds_or_count(1, 1000),
    "claude_timeout": _seconds_between(1, 3600),
    "claude_batch_tokens": _seconds_or_count(1000, 10_000_000),
    "models": _models,
    "failover_after": _seconds_or_count(0, 86_400),
    "announce_fallback": _flag,
    "mcp_servers": _structured(dict, "a table of [mcp_servers.NAME] tables"),
    "permissions": _structured(dict, "a table with allow / ask / deny lists"),
    "instructions": _path,
    "memory_chars": _seconds_or_count(0, 100_000),
    "claude_prompt_cache": _flag,
    "daily_budget_usd": _usd,
    "monthly_budget_usd": _usd,
    "prices": _prices,
    "max_payload_bytes": _seconds_or_count(1),
    "retain_days": _seconds_or_count(0),
    "digest_cron": _cron,
    "timezone": _zone_name,
    "theme": _text,
    "approval_bell": _flag,
    "telemetry": _flag,
    "webhooks": _structured(dict, "a table"),
    "webhook_read_timeout": _seconds_or_count(1),
    "webhook_max_connections": _seconds_or_count(1),
    "channels": _channels,
    "email": _structured(dict, "a table"),
    "keys": _keys,
}
SETTING_NAMES = tuple(f.name for f in fields(Settings) if f.name != "origins")


def env_var(name: str) -> str:
    """The environment variable that overrides one setting."""
    return ENV_PREFIX + name.upper()


def _check(name: str, value: Any, source: str, *, from_text: bool = False) -> Any:
    try:
        return CHECKS[name](value, from_text)
    except ValueError as exc:
        raise ConfigError(f"bad value for {name} in {source}: {exc}") from None


def _read_file(path: Path, *, explicit: bool) -> dict[str, Any]:
    if not path.exists():
        if explicit:
            raise ConfigError(f"config file {path} does not exist")
        return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib's parser recurses into nested arrays and tables
        raise ConfigError(f"config file {path} is not valid TOML: it is nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


def load_settings(
    config_path: Path | None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Defaults < config file < environment < overrides (the command line's options).

    config_path None means the default config file, which need not exist; an explicitly given file
    must. A relative `db` in the config file is relative to the file's folder.
    """
    environment = os.environ if env is None else env
    explicit = config_path is not None
    path = Path(config_path).expanduser() if config_path is not None else default_config_path()
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}

    for name, value in _read_file(path, explicit=explicit).items():
        if name not in CHECKS:
            raise ConfigError(
                f"unknown setting {name!r} in config file {path} (known settings: {', '.join(SETTING_NAMES)})"
            )
        checked = _check(name, value, f"config file {path}")
        if name in ("db", "instructions") and isinstance(checked, Path):
            checked = (path.parent / checked).absolute()  # relative to the file, not to where it is run
        values[name] = checked
        origins[name] = f"config file {path}"

    for name in SETTING_NAMES:
        variable = env_var(name)
        if variable in environment:
            values[name] = _check(name, environment[variable], f"environment variable {variable}", from_text=True)
            origins[name] = f"environment variable {variable}"

    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in CHECKS:
            raise ConfigError(f"unknown setting {name!r} given on the command line")
        if name == "db" and isinstance(value, Path):
            value = str(value)
        values[name] = _check(name, value, f"the command-line option --{name.replace('_', '-')}")
        origins[name] = f"the command-line option --{name.replace('_', '-')}"

    if "db" in values:
        # A URL's schema and password variable travel in it, so every way an inbox is opened from these settings
        # (the engine's threads, the receiver, each command) finds the same one.
        values["db"] = settled_location(values["db"], schema=values.get("db_schema"),
                                        password_env=values.get("password_env"))
    return Settings(**values, origins=origins)


def open_inbox(settings: Settings, *, read_only: bool = False) -> Store:
    """The inbox the settings name, opened with their store options: how every command, each of the engine's
    connections, the webhook receiver's writer and the console open it. read_only: no write lock, no migration,
    no new file. Nothing is checked as it opens (the gate before intake, core/gate.py, does that once, bounded in
    time)."""
    return Store.open(settings.db, read_only=read_only, options=settings.store_options())


def ensure_default_db_folder(settings: Settings) -> None:
    """Create the user data folder for the default inbox, owner-only (0700, whatever the umask): the
    inbox holds private payloads. One made world-readable by an older version is tightened; it is
    this program's own folder. A folder the user named themselves is never created nor changed: a typo
    there should be an error, not a new empty inbox somewhere unexpected."""
    if settings.db == default_db_path():
        folder = settings.db.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if stat.S_IMODE(folder.stat().st_mode) != 0o700:
            folder.chmod(0o700)
