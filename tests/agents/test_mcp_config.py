"""The [mcp_servers] table and ${VAR} expansion: what is accepted, and the one-line error for each mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.agents.mcp import split_mcp_tool_name
from console.agents.mcp_config import McpServerConfig, expand_env, parse_mcp_servers
from console.config import ConfigError

SECRET = "s3cr3t-value-never-shown"


def test_a_stdio_and_an_http_server_are_read_as_written() -> None:
    servers = parse_mcp_servers({
        "shop": {"command": "python", "args": ["-m", "shop_server"], "env": {"SHOP_TOKEN": "${SHOP_TOKEN}"},
                 "call_timeout": 5, "idempotency_key": True},
        "tracker": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"},
                    "connect_timeout": 2.5, "list_timeout": 3},
    })

    assert servers == {
        "shop": McpServerConfig("shop", command="python", args=("-m", "shop_server"),
                                env={"SHOP_TOKEN": "${SHOP_TOKEN}"}, call_timeout=5.0, idempotency_key=True),
        "tracker": McpServerConfig("tracker", url="http://127.0.0.1:9000/mcp",
                                   headers={"Authorization": "Bearer ${TRACKER_TOKEN}"},
                                   connect_timeout=2.5, list_timeout=3.0),
    }
    assert (servers["shop"].transport, servers["tracker"].transport) == ("stdio", "http")
    assert (servers["tracker"].call_timeout, servers["shop"].connect_timeout) == (60.0, 10.0)
    assert servers["tracker"].idempotency_key is False  # a server is not trusted to de-duplicate unless said


def test_the_sandbox_settings_are_read_with_folders_made_absolute() -> None:
    servers = parse_mcp_servers({"gh": {
        "command": "gh-mcp", "data_dir": "~/gh-data/", "read_paths": ["/opt/gh", "~/tools/gh"],
        "allow_hosts": ["api.github.com", "*.GitHub.com", "127.0.0.1:8443"]},
        "bare": {"command": "x", "sandbox": False}})

    home = Path.home()
    assert servers["gh"] == McpServerConfig(
        "gh", command="gh-mcp", data_dir=home / "gh-data", read_paths=(Path("/opt/gh"), home / "tools" / "gh"),
        allow_hosts=("api.github.com", "*.github.com", "127.0.0.1:8443"))
    assert servers["gh"].sandbox is True  # on unless said
    assert servers["bare"].sandbox is False and servers["bare"].allow_hosts == ()


@pytest.mark.parametrize(("raw", "message"), [
    ({"shop": {"command": 3}}, "mcp_servers.shop.command: expected text"),
    ({"shop": {"command": ""}}, "mcp_servers.shop.command: expected text"),
    ({"shop": {}}, "mcp_servers.shop: set exactly one of command (a stdio server) or url (a streamable HTTP server)"),
    ({"shop": {"command": "x", "url": "http://127.0.0.1/mcp"}},
     "mcp_servers.shop: set exactly one of command (a stdio server) or url (a streamable HTTP server); both are set"),
    ({"Shop": {"command": "x"}}, "mcp_servers.Shop: a server name is lowercase letters, digits and '-', with single "
                                 "'_' between them (it becomes part of the tool names mcp__<server>__<tool>)"),
    ({"my__shop": {"command": "x"}}, "mcp_servers.my__shop: a server name is lowercase"),
    ({"shop_": {"command": "x"}}, "mcp_servers.shop_: a server name is lowercase"),
    ({"shop.eu": {"command": "x"}}, "mcp_servers.shop.eu: a server name is lowercase"),
    ({"shop": "python"}, "mcp_servers.shop: expected a table with command (a stdio server) or url (an HTTP server)"),
    ({"shop": {"command": "x", "cmd": "y"}},
     "mcp_servers.shop.cmd: unknown setting (expected one of command, args, "
     "env, url, headers, trusted, private, own_service, connect_timeout, list_timeout, call_timeout, "
     "idempotency_key, sandbox, data_dir, read_paths, allow_hosts)"),
    ({"shop": {"command": "x", "args": "-m shop"}}, "mcp_servers.shop.args: expected a list of text"),
    ({"shop": {"command": "x", "args": ["-m", 3]}}, "mcp_servers.shop.args[1]: expected text"),
    ({"shop": {"command": "x", "env": ["A=1"]}}, "mcp_servers.shop.env: expected a table of name = \"text\""),
    ({"shop": {"command": "x", "env": {"A": 1}}}, "mcp_servers.shop.env.A: expected text"),
    ({"shop": {"command": "x", "env": {"A=B": "1"}}}, "mcp_servers.shop.env: 'A=B' is not an environment variable"),
    ({"shop": {"command": "x", "headers": {"A": "1"}}}, "mcp_servers.shop.headers: only for an HTTP server (url)"),
    ({"t": {"url": "http://127.0.0.1/mcp", "args": []}}, "mcp_servers.t.args: only for a stdio server (command)"),
    ({"t": {"url": "http://127.0.0.1/mcp", "env": {}}}, "mcp_servers.t.env: only for a stdio server (command)"),
    ({"t": {"url": "ftp://127.0.0.1/mcp"}}, "mcp_servers.t.url: expected an http:// or https:// URL, got "
                                            "'ftp://127.0.0.1/mcp'"),
    ({"t": {"url": "https://user:pw@/mcp"}}, "mcp_servers.t.url: expected an http:// or https:// URL, got "
                                             "'https://***@/mcp'"),
    ({"t": {"url": "http://h/mcp", "headers": {"Bad Name": "x"}}},
     "mcp_servers.t.headers: 'Bad Name' is not an HTTP header name"),
    ({"t": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer $TOKEN"}}},
     "mcp_servers.t.headers.Authorization: write ${NAME} for an environment variable, or $$ for a dollar sign"),
    ({"shop": {"command": "x", "env": {"A": "${A"}}}, "mcp_servers.shop.env.A: write ${NAME}"),
    ({"shop": {"command": "x", "env": {"A": "${1A}"}}}, "mcp_servers.shop.env.A: write ${NAME}"),
    ({"shop": {"command": "x", "call_timeout": 0}},
     "mcp_servers.shop.call_timeout: expected a positive number of seconds, got 0"),
    ({"shop": {"command": "x", "list_timeout": -1.5}},
     "mcp_servers.shop.list_timeout: expected a positive number of seconds, got -1.5"),
    ({"shop": {"command": "x", "connect_timeout": "10"}},
     "mcp_servers.shop.connect_timeout: expected a positive number of seconds, got '10'"),
    ({"shop": {"command": "x", "connect_timeout": True}},
     "mcp_servers.shop.connect_timeout: expected a positive number of seconds, got True"),
    ({"shop": {"command": "x", "call_timeout": float("inf")}},
     "mcp_servers.shop.call_timeout: expected a positive number of seconds, got inf"),
    ({"shop": {"command": "x", "trusted": "yes"}}, "mcp_servers.shop.trusted: expected true or false, got 'yes'"),
    ({"shop": {"command": "x", "sandbox": "no"}}, "mcp_servers.shop.sandbox: expected true or false, got 'no'"),
    ({"shop": {"command": "x", "data_dir": "shop-data"}},
     "mcp_servers.shop.data_dir: expected an absolute path (or one starting with ~), got 'shop-data'"),
    ({"shop": {"command": "x", "read_paths": "/opt"}}, "mcp_servers.shop.read_paths: expected a list of text"),
    ({"shop": {"command": "x", "read_paths": ["/opt", ""]}},
     "mcp_servers.shop.read_paths[1]: expected a folder's path"),
    ({"shop": {"command": "x", "allow_hosts": ["https://api.github.com"]}},
     "mcp_servers.shop.allow_hosts[0]: expected a host name (\"api.github.com\"), its subdomains (\"*.example.org\") "
     "or either with a port (\"host:8443\"), got 'https://api.github.com'"),
    ({"shop": {"command": "x", "allow_hosts": ["*"]}}, "mcp_servers.shop.allow_hosts[0]: expected a host name"),
    ({"shop": {"command": "x", "allow_hosts": ["h:70000"]}}, "mcp_servers.shop.allow_hosts[0]: expected a host name"),
    ({"t": {"url": "http://h/mcp", "allow_hosts": []}}, "mcp_servers.t.allow_hosts: only for a stdio server (command)"),
    ({"t": {"url": "http://h/mcp", "sandbox": False}}, "mcp_servers.t.sandbox: only for a stdio server (command)"),
])
def test_each_mistake_is_one_error_naming_its_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_mcp_servers(raw)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_the_table_itself_must_be_a_table() -> None:
    with pytest.raises(ConfigError, match=r"^mcp_servers: expected a table of servers"):
        parse_mcp_servers(["shop"])  # type: ignore[arg-type]


def test_variables_are_expanded_and_a_double_dollar_is_a_dollar() -> None:
    env = {"TOKEN": SECRET, "USER_1": "ada"}
    assert expand_env("Bearer ${TOKEN}", env, setting="s") == f"Bearer {SECRET}"
    assert expand_env("${USER_1}:${TOKEN}", env, setting="s") == f"ada:{SECRET}"
    assert expand_env("costs $$5 or $${TOKEN}", env, setting="s") == "costs $5 or ${TOKEN}"
    assert expand_env("plain", {}, setting="s") == "plain"


def test_a_missing_variable_names_itself_and_the_setting_and_no_value() -> None:
    env = {"OTHER": SECRET}

    with pytest.raises(ConfigError) as error:
        expand_env(f"Bearer ${{TRACKER_TOKEN}} and ${{OTHER}} {'x' * 3}", env,
                   setting="mcp_servers.tracker.headers.Authorization")

    assert str(error.value) == (
        "mcp_servers.tracker.headers.Authorization: the environment variable TRACKER_TOKEN is not set")
    assert SECRET not in str(error.value)


def test_a_bad_template_is_an_error_at_expansion_too() -> None:
    with pytest.raises(ConfigError, match=r"^h.Authorization: write \$\{NAME\}"):
        expand_env("Bearer $TOKEN", {"TOKEN": SECRET}, setting="h.Authorization")


def test_the_config_repr_shows_no_env_or_header_values() -> None:
    config = McpServerConfig("t", url="http://h/mcp", headers={"Authorization": f"Bearer {SECRET}"})
    assert SECRET not in repr(config)


@pytest.mark.parametrize(("name", "parts"), [
    ("mcp__shop__refund", ("shop", "refund")),
    ("mcp__my-shop__lookup__order", ("my-shop", "lookup__order")),
    ("mcp__a_b__c", ("a_b", "c")),
    ("mcp__shop__", None),
    ("mcp__shop", None),
    ("send_message", None),
])
def test_tool_names_split_into_server_and_tool(name: str, parts: tuple[str, str] | None) -> None:
    assert split_mcp_tool_name(name) == parts
