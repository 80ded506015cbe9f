"""load_settings: defaults < config file < environment < command-line options, and a clear ConfigError
naming the setting and its source for every bad value."""

from __future__ import annotations

import contextlib
from dataclasses import fields
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest
import tzlocal

from console.agents.mcp_config import parse_mcp_servers
from console.config import (
    CHECKS,
    SETTING_NAMES,
    ConfigError,
    Settings,
    default_config_path,
    default_db_path,
    ensure_default_db_folder,
    env_var,
    load_settings,
    local_zone_name,
    open_inbox,
)
from console.core import StoreError, StoreUnavailable


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_every_setting_has_a_checker() -> None:
    # `origins` records where the others came from; it is not a setting itself.
    assert set(CHECKS) == set(SETTING_NAMES) == {f.name for f in fields(Settings)} - {"origins"}


def test_defaults_when_the_default_config_file_is_missing() -> None:
    assert not default_config_path().exists()
    settings = load_settings(None, env={})
    assert settings == Settings()
    assert settings.db == default_db_path()


def test_default_paths_follow_the_user_folders(tmp_path: Path) -> None:
    assert default_db_path().is_relative_to(tmp_path / "home" / "data")
    assert default_config_path().is_relative_to(tmp_path / "home" / "config")


def test_the_default_config_file_is_read_when_present() -> None:
    write(default_config_path(), "lease_ttl = 45\n")
    assert load_settings(None, env={}).lease_ttl == 45


def test_precedence_defaults_file_env_overrides(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", 'lease_ttl = 30\noutbox_gap = 60\nmax_attempts = 5\ndb = "from-file.db"\n')
    env = {"AGENT_CONSOLE_OUTBOX_GAP": "90", "AGENT_CONSOLE_MAX_ATTEMPTS": "7", "AGENT_CONSOLE_DB": "/x/env.db"}
    settings = load_settings(config, env=env, overrides={"db": tmp_path / "cli.db", "max_attempts": None})
    assert settings.lease_ttl == 30               # file over default
    assert settings.outbox_gap == 90              # env over file
    assert settings.max_attempts == 7             # a None override leaves the env value
    assert settings.db == tmp_path / "cli.db"     # command line over env
    assert settings.batch_cap == Settings().batch_cap


def test_every_scalar_setting_reads_from_its_environment_variable() -> None:
    env = {
        "AGENT_CONSOLE_LEASE_TTL": "5", "AGENT_CONSOLE_OUTBOX_GAP": "0", "AGENT_CONSOLE_MAX_ATTEMPTS": "4",
        "AGENT_CONSOLE_BACKOFF_BASE": "2", "AGENT_CONSOLE_BACKOFF_MAX": "20", "AGENT_CONSOLE_BATCH_CAP": "9",
        "AGENT_CONSOLE_APPROVAL_EXPIRY": "600", "AGENT_CONSOLE_AGENT": "offline",
        "AGENT_CONSOLE_MAX_PAYLOAD_BYTES": "2048", "AGENT_CONSOLE_DIGEST_CRON": "30 8 * * 1-5",
        "AGENT_CONSOLE_TIMEZONE": "Europe/Berlin", "AGENT_CONSOLE_THEME": "paper",
        "AGENT_CONSOLE_KEYS": '{"quit": "ctrl+q"}', "AGENT_CONSOLE_WEBHOOKS": '{"enabled": false}',
        "AGENT_CONSOLE_CHANNELS": '[{"kind": "file", "path": "/tmp/out"}]',
        "AGENT_CONSOLE_CLAUDE_MODEL": "claude-opus-5-5", "AGENT_CONSOLE_CLAUDE_MAX_TOKENS": "4096",
        "AGENT_CONSOLE_CLAUDE_BASE_URL": "http://127.0.0.1:8080", "AGENT_CONSOLE_RETAIN_DAYS": "90",
        "AGENT_CONSOLE_CLAUDE_MAX_TURNS": "4", "AGENT_CONSOLE_CLAUDE_TIMEOUT": "7.5",
        "AGENT_CONSOLE_CLAUDE_BATCH_TOKENS": "20000", "AGENT_CONSOLE_CLAUDE_PROMPT_CACHE": "false",
        "AGENT_CONSOLE_DAILY_BUDGET_USD": "2.5", "AGENT_CONSOLE_MONTHLY_BUDGET_USD": "40",
        "AGENT_CONSOLE_PRICES": '{"claude-x": {"input": 1, "output": 5}}',
        "AGENT_CONSOLE_WEBHOOK_READ_TIMEOUT": "30", "AGENT_CONSOLE_WEBHOOK_MAX_CONNECTIONS": "20",
        "AGENT_CONSOLE_MCP_SERVERS": '{"shop": {"command": "shop-server"}}',
        "AGENT_CONSOLE_PERMISSIONS": '{"allow": ["recall"]}', "AGENT_CONSOLE_INSTRUCTIONS": "/tmp/mine.md",
        "AGENT_CONSOLE_MEMORY_CHARS": "100", "AGENT_CONSOLE_CONFIRM_APPROVALS": "yes",
        "AGENT_CONSOLE_BACKOFF_JITTER": "0.1",
        "AGENT_CONSOLE_SEND_TIMEOUT": "30", "AGENT_CONSOLE_MAX_SEND_ATTEMPTS": "5",
        "AGENT_CONSOLE_DB_SCHEMA": "ada", "AGENT_CONSOLE_PASSWORD_ENV": "AGENT_PG_PASSWORD",
        "AGENT_CONSOLE_APPROVAL_BELL": "true", "AGENT_CONSOLE_MAX_TOOL_CALLS_PER_RUN": "5",
        "AGENT_CONSOLE_MAX_TOOL_CALLS_PER_HOUR": "0", "AGENT_CONSOLE_MAX_MESSAGES_PER_HOUR": "12",
        "AGENT_CONSOLE_MAX_SCHEDULES": "3", "AGENT_CONSOLE_MIN_SCHEDULE_INTERVAL": "3600",
        "AGENT_CONSOLE_EMAIL": '{"imap_host": "imap.example.org"}',
        "AGENT_CONSOLE_TELEMETRY": "false",
        "AGENT_CONSOLE_MODELS": '[{"name": "local", "protocol": "openai", "base_url": "http://127.0.0.1:11434/v1", '
                                '"model": "qwen3"}]',
        "AGENT_CONSOLE_FAILOVER_AFTER": "10", "AGENT_CONSOLE_ANNOUNCE_FALLBACK": "off",
        "AGENT_CONSOLE_BUSY_TIMEOUT": "0.5",
    }
    s = load_settings(None, env=env)
    assert (s.lease_ttl, s.outbox_gap, s.max_attempts) == (5, 0, 4)
    assert (s.backoff_base, s.backoff_max, s.batch_cap) == (2, 20, 9)
    assert (s.approval_expiry, s.agent, s.max_payload_bytes, s.retain_days) == (600, "offline", 2048, 90)
    assert (s.digest_cron, s.timezone, s.theme) == ("30 8 * * 1-5", "Europe/Berlin", "paper")
    assert s.keys == {"quit": "ctrl+q"}
    assert s.webhooks == {"enabled": False}
    assert (s.webhook_read_timeout, s.webhook_max_connections) == (30, 20)
    assert s.channels == [{"kind": "file", "path": "/tmp/out"}]
    assert s.email == {"imap_host": "imap.example.org"}
    assert (s.claude_model, s.claude_max_tokens, s.claude_base_url) == (
        "claude-opus-5-5", 4096, "http://127.0.0.1:8080")
    assert (s.claude_max_turns, s.claude_timeout, s.claude_batch_tokens) == (4, 7.5, 20000)
    assert (s.mcp_servers, s.permissions) == ({"shop": {"command": "shop-server"}}, {"allow": ["recall"]})
    assert (s.instructions, s.memory_chars) == (Path("/tmp/mine.md"), 100)
    assert s.approval_bell is True
    assert s.telemetry is False and Settings().telemetry is True
    assert (s.claude_prompt_cache, s.daily_budget_usd, s.monthly_budget_usd) == (False, 2.5, 40.0)
    assert s.prices == {"claude-x": {"input": 1, "output": 5}}
    assert (s.db_schema, s.password_env) == ("ada", "AGENT_PG_PASSWORD")
    assert s.confirm_approvals is True and Settings().confirm_approvals is False
    assert (s.backoff_jitter, s.send_timeout, s.max_send_attempts) == (0.1, 30, 5)
    assert (s.max_tool_calls_per_run, s.max_tool_calls_per_hour, s.max_messages_per_hour) == (5, 0, 12)
    assert (s.max_schedules, s.min_schedule_interval) == (3, 3600)
    assert s.origins["daily_budget_usd"] == "environment variable AGENT_CONSOLE_DAILY_BUDGET_USD"
    assert s.models == [{"name": "local", "protocol": "openai", "base_url": "http://127.0.0.1:11434/v1",
                         "model": "qwen3"}]
    assert (s.failover_after, s.announce_fallback) == (10, False)
    assert s.busy_timeout == 0.5 and s.store_options().busy_timeout == 0.5
    assert set(env) == {env_var(name) for name in SETTING_NAMES} - {"AGENT_CONSOLE_DB"}


def test_unrelated_prefixed_environment_variables_are_ignored() -> None:
    # Webhook secrets may be named AGENT_CONSOLE_GITHUB_SECRET; they are not settings.
    assert load_settings(None, env={"AGENT_CONSOLE_GITHUB_SECRET": "s3cret"}) == Settings()


def test_tables_in_the_config_file(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", """
[webhooks]
enabled = true
port = 8787
[webhooks.sources.github]
verifier = "github"
secret_env = "GITHUB_WEBHOOK_SECRET"

[[channels]]
kind = "file"
path = "/tmp/messages.log"

[keys]
quit = "ctrl+q"
""")
    settings = load_settings(config, env={})
    assert settings.webhooks["sources"]["github"]["secret_env"] == "GITHUB_WEBHOOK_SECRET"
    assert settings.webhooks.get("enabled") is True
    assert settings.channels == [{"kind": "file", "path": "/tmp/messages.log"}]
    assert settings.keys == {"quit": "ctrl+q"}


def test_relative_db_in_a_config_file_is_relative_to_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "conf" / "c.toml", 'db = "inbox/agent.db"\n')
    assert load_settings(config, env={}).db == tmp_path / "conf" / "inbox" / "agent.db"


def test_relative_db_from_the_command_line_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings(None, env={}, overrides={"db": Path("here.db")}).db == tmp_path / "here.db"


def test_a_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.toml does not exist"):
        load_settings(tmp_path / "nope.toml", env={})


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "lease_ttl = = 3\n")
    with pytest.raises(ConfigError, match=r"c\.toml is not valid TOML"):
        load_settings(config, env={})


def test_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "leese_ttl = 5\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert "'leese_ttl'" in str(caught.value) and str(config) in str(caught.value)


@pytest.mark.parametrize(
    ("line", "setting", "problem"),
    [
        ('lease_ttl = "abc"', "lease_ttl", "whole number"),
        ("lease_ttl = 0", "lease_ttl", "at least 1"),
        ("outbox_gap = -1", "outbox_gap", "at least 0"),
        ("max_attempts = 2.5", "max_attempts", "whole number"),
        ("batch_cap = true", "batch_cap", "whole number"),
        ('agent = "gpt-9"', "agent", "unknown agent 'gpt-9'"),
        ('timezone = "Mars/Olympus"', "timezone", "unknown time zone"),
        ('digest_cron = "61 * * * *"', "digest_cron", "invalid cron"),
        ('digest_cron = "0 9 31 2 *"', "digest_cron", "'0 9 31 2 *' never fires"),
        ('digest_cron = "0 0 1 1 * 0 2020"', "digest_cron", "never fires"),  # its last year is past
        ("keys = 3", "keys", "expected a table"),
        ("channels = [1, 2]", "channels", "list of tables"),
        ("claude_max_turns = 0", "claude_max_turns", "must be at least 1, got 0"),
        ("claude_max_turns = 1001", "claude_max_turns", "must be at most 1000, got 1001"),
        ('claude_timeout = "soon"', "claude_timeout", "expected a number of seconds, got 'soon'"),
        ("claude_timeout = 0.5", "claude_timeout", "must be at least 1 second, got 0.5"),
        ("claude_timeout = 7200", "claude_timeout", "must be at most 3600 seconds, got 7200"),
        ("claude_batch_tokens = 10", "claude_batch_tokens", "must be at least 1000, got 10"),
        ("backoff_jitter = 1", "backoff_jitter", "less than 1, got 1"),
        ('backoff_jitter = "lots"', "backoff_jitter", "expected a fraction such as 0.2, got 'lots'"),
        ("send_timeout = 0", "send_timeout", "at least 1"),
        ("max_send_attempts = 0", "max_send_attempts", "at least 1"),
    ],
)
def test_bad_value_in_the_file_names_setting_and_file(tmp_path: Path, line: str, setting: str, problem: str) -> None:
    config = write(tmp_path / "c.toml", line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert f"bad value for {setting} in config file {config}" in message
    assert problem in message


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("AGENT_CONSOLE_LEASE_TTL", "abc", "expected a whole number, got 'abc'"),
        ("AGENT_CONSOLE_OUTBOX_GAP", "-5", "at least 0"),
        ("AGENT_CONSOLE_BATCH_CAP", "1.5", "whole number"),
        ("AGENT_CONSOLE_AGENT", "nobody", "unknown agent"),
        ("AGENT_CONSOLE_TIMEZONE", "Nowhere/City", "unknown time zone"),
        ("AGENT_CONSOLE_DIGEST_CRON", "every day", "invalid cron"),
        ("AGENT_CONSOLE_DIGEST_CRON", "0 9 30 2 *", "never fires"),
        ("AGENT_CONSOLE_WEBHOOKS", "{not json", "written as JSON"),
        ("AGENT_CONSOLE_DB", "  ", "non-empty"),
        # Past SQLite's 64-bit integers the engine would start and fail every step with OverflowError.
        ("AGENT_CONSOLE_LEASE_TTL", "99999999999999999999", "at most 1000000000"),
        ("AGENT_CONSOLE_BATCH_CAP", "10000000000", "at most 1000000000"),
        ("AGENT_CONSOLE_CLAUDE_TIMEOUT", "nan", "expected a number of seconds, got 'nan'"),
        ("AGENT_CONSOLE_CLAUDE_TIMEOUT", "true", "expected a number of seconds, got 'true'"),
        ("AGENT_CONSOLE_CLAUDE_MAX_TURNS", "ten", "expected a whole number, got 'ten'"),
        ("AGENT_CONSOLE_BACKOFF_JITTER", "-0.1", "must be at least 0"),
        ("AGENT_CONSOLE_MAX_SEND_ATTEMPTS", "many", "expected a whole number"),
    ],
)
def test_bad_value_in_the_environment_names_the_variable(variable: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env={variable: value})
    message = str(caught.value)
    assert f"in environment variable {variable}" in message
    assert problem in message


def test_the_default_db_folder_is_created_but_not_a_chosen_one(tmp_path: Path) -> None:
    default = load_settings(None, env={})
    assert not default.db.parent.exists()
    ensure_default_db_folder(default)
    assert default.db.parent.is_dir()

    chosen = load_settings(None, env={}, overrides={"db": tmp_path / "missing" / "inbox.db"})
    ensure_default_db_folder(chosen)
    assert not (tmp_path / "missing").exists()


def test_open_inbox_opens_the_settings_inbox_with_their_store_options(tmp_path: Path) -> None:
    """The one way in from settings (commands, the engine's connections, the console): read-only creates nothing
    and writes nothing; the store obeys the settings' options."""
    settings = load_settings(None, env={"AGENT_CONSOLE_LEASE_TTL": "42"}, overrides={"db": tmp_path / "inbox.db"})
    with pytest.raises(StoreError, match="no inbox at"):
        open_inbox(settings, read_only=True)
    assert not (tmp_path / "inbox.db").exists()
    with open_inbox(settings) as store:
        assert store.options == settings.store_options() and store.options.lease_ttl == 42
        store.ingest("chat", "c1", {}, now=1)
    with open_inbox(settings, read_only=True) as store:
        assert store.options.lease_ttl == 42 and store.find_event("chat", "c1") is not None
        with pytest.raises(StoreUnavailable, match="cannot be written"):
            store.ingest("chat", "c2", {}, now=1)


def test_the_readme_config_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Configuration", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    settings = load_settings(write(tmp_path / "c.toml", example), env={})
    assert settings.db == Path("~/agent/inbox.db").expanduser()
    assert settings.webhooks["sources"]["github"]["secret_env"] == "GITHUB_WEBHOOK_SECRET"
    assert settings.keys == {"console.quit": "ctrl+q"}  # a binding id the console knows (docs/console.md)
    assert settings.approval_bell is False


@pytest.mark.parametrize("tz", ["Asia/Tokyo", "America/Sao_Paulo"])
def test_the_default_time_zone_is_this_machines(monkeypatch: pytest.MonkeyPatch, tz: str) -> None:
    monkeypatch.setenv("TZ", tz)
    _forget_cached_zone()
    try:
        assert local_zone_name() == tz
        assert load_settings(None, env={}).timezone == tz
        assert load_settings(None, env={"AGENT_CONSOLE_TIMEZONE": "Europe/Berlin"}).timezone == "Europe/Berlin"
    finally:
        monkeypatch.undo()
        _forget_cached_zone()


@pytest.mark.parametrize("tz", ["Mars/Olympus", "<+03>-3"])
def test_a_time_zone_setting_without_an_iana_name_still_gives_a_usable_zone(
    monkeypatch: pytest.MonkeyPatch, tz: str
) -> None:
    monkeypatch.setenv("TZ", tz)
    _forget_cached_zone()
    try:
        name = local_zone_name()  # the system's own zone, or UTC: never an error at start-up
        assert name != tz and ZoneInfo(name) is not None
    finally:
        monkeypatch.undo()
        _forget_cached_zone()


def test_a_machine_whose_zone_cannot_be_told_gets_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot_tell() -> str:
        raise ZoneInfoNotFoundError("no /etc/localtime and no TZ")

    monkeypatch.setattr(tzlocal, "get_localzone_name", cannot_tell)
    assert local_zone_name() == "UTC"


def _forget_cached_zone() -> None:
    """tzlocal caches the zone per process: make the next caller read the setting again."""
    with contextlib.suppress(ZoneInfoNotFoundError):  # it has cached the name by then; local_zone_name copes
        tzlocal.reload_localzone()


def test_db_takes_a_postgresql_url_as_it_is_and_refuses_one_carrying_a_password(tmp_path: Path) -> None:
    url = "postgresql://me@db.example:5432/agent?schema=ada"
    assert load_settings(None, env={"AGENT_CONSOLE_DB": url}).db == url
    # The schema and the password's variable, set apart, travel in the URL every opener is given.
    folded = load_settings(None, env={"AGENT_CONSOLE_DB": "postgresql://me@db.example/agent",
                                      "AGENT_CONSOLE_DB_SCHEMA": "bob", "AGENT_CONSOLE_PASSWORD_ENV": "PG_PW"})
    assert folded.db == "postgresql://me@db.example/agent?schema=bob&password_env=PG_PW"
    config = tmp_path / "config.toml"
    config.write_text(f'db = "{url}"\ndb_schema = "bob"\n')
    assert load_settings(config).db == url  # never made relative to the file; the URL's own schema wins
    with pytest.raises(ConfigError, match="must not carry the password"):
        load_settings(None, env={"AGENT_CONSOLE_DB": "postgresql://me:hunter2@db.example/agent"})
    with pytest.raises(ConfigError, match="not a plain name"):
        load_settings(None, env={"AGENT_CONSOLE_DB_SCHEMA": "Robert'); DROP"})


def test_the_readme_mcp_servers_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    example = readme.split("[mcp_servers.shop]", 1)[1].split("```", 1)[0]
    example = "\n".join(line.strip() for line in ("[mcp_servers.shop]" + example).splitlines())
    settings = load_settings(write(tmp_path / "c.toml", example), env={})
    assert settings.mcp_servers is not None
    servers = parse_mcp_servers(settings.mcp_servers)
    assert sorted(servers) == ["shop", "tracker"]
    assert Path(servers["shop"].command or "").is_absolute()


def test_the_readme_lists_every_email_setting_the_code_reads() -> None:
    """Issue 36, item 9: the [email] table in the README names every key build_mail_settings accepts, no other."""
    from console.edges.mail_config import KEYS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("Every `[email]` setting", 1)[1].split("\n\n", 2)[1]
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert listed == KEYS
