"""Agents by name, so the config can choose one.

A factory takes the settings. An agent that needs an optional package imports it inside its factory, so
the default agent works without any extra installed and naming the agent in the config never fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import console
from console.agents.base import Agent, AgentSetupError
from console.agents.gateway import ToolGateway
from console.agents.mcp import McpHub
from console.agents.mcp_config import McpServerConfig, parse_mcp_servers
from console.agents.offline import OfflineAgent
from console.agents.sandbox import places_for
from console.agents.tools import load_python_tools
from console.config import Settings
from console.trust.policy import DEFAULT_ALLOW, Policy

CLAUDE_EXTRA_MISSING = "the claude agent needs the 'claude' extra: pip install 'agent-console[claude]'"


# With no [mcp_servers], the built-in agent uses the example shop server that ships with agent-console, its
# orders kept beside the inbox; with no [permissions] too, lookups run, deletions are denied and the rest
# (refunds) asks, as anything unmatched does. (No broad "mcp__shop__*" ask rule: ask is checked before allow.)
# The shop honours the idempotency key, so a call whose answer was lost is sent again under the same key.
DEMO_SERVER = "shop"
DEMO_PERMISSIONS = {
    "allow": [*DEFAULT_ALLOW, "mcp__shop__lookup_*", "mcp__shop__list_*"],
    "deny": ["mcp__shop__delete_*"],
}


def demo_servers(settings: Settings) -> dict[str, McpServerConfig]:
    """The example shop, sandboxed like any server: its orders in its data_dir (mcp-data/shop beside the inbox),
    agent-console's own package shown to it read-only (the engine's Python is shown to every sandbox)."""
    state = places_for(settings).default_data_dir(DEMO_SERVER) / "shop.json"
    package_root = Path(console.__file__).resolve().parent.parent
    return {DEMO_SERVER: McpServerConfig(DEMO_SERVER, command=sys.executable,
                                         args=("-m", "console.examples.shop_server"),
                                         env={"SHOP_STATE": str(state)}, idempotency_key=True,
                                         read_paths=(package_root,))}


def build_tools(settings: Settings, *, demo: bool = False) -> ToolGateway:
    """The policy-checked gateway the agent's tools come through: the owner's [permissions], the Python tools
    installed under the `agent_console.tools` entry points, and the [mcp_servers] (started when the engine takes
    the lease; the example shop on first use).
    demo: with no [mcp_servers] configured, use the example shop server (the built-in agent's default)."""
    if settings.mcp_servers is not None:
        servers = parse_mcp_servers(settings.mcp_servers)
    else:
        servers = demo_servers(settings) if demo else {}
    permissions = settings.permissions
    if permissions is None and settings.mcp_servers is None and demo:
        permissions = DEMO_PERMISSIONS
    policy = Policy.from_settings(permissions)
    hub = McpHub(servers, places=places_for(settings)) if servers else None
    return ToolGateway(policy, mcp=hub, python_tools=load_python_tools(), timezone=settings.timezone,
                       start_early=settings.mcp_servers is not None, max_schedules=settings.max_schedules,
                       min_schedule_interval=settings.min_schedule_interval)


def read_instructions(settings: Settings) -> str | None:
    """The owner's own instructions to the agent (setting `instructions`, a Markdown file); None if absent."""
    try:
        return settings.instructions.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentSetupError(f"cannot read the instructions file {settings.instructions}: {exc}") from None


def _offline(settings: Settings) -> Agent:
    return OfflineAgent(build_tools(settings, demo=True))


def _claude(settings: Settings) -> Agent:
    try:
        # Checked here rather than by importing console.agents.claude alone: that module may already be
        # loaded while the package itself is gone or broken.
        import anthropic  # noqa: F401
    except ImportError:
        raise AgentSetupError(CLAUDE_EXTRA_MISSING) from None
    from console.agents.claude import ClaudeAgent

    return ClaudeAgent.from_settings(settings, tools=build_tools(settings), instructions=read_instructions(settings))


AGENTS: dict[str, Callable[[Settings], Agent]] = {"offline": _offline, "claude": _claude}


def build_agent(name: str, settings: Settings | None = None) -> Agent:
    try:
        factory = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(sorted(AGENTS))}") from None
    return factory(settings if settings is not None else Settings())
