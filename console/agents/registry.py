"""Agents by name, so the config can choose one."""

from __future__ import annotations

from collections.abc import Callable

from console.agents.base import Agent
from console.agents.offline import OfflineAgent

AGENTS: dict[str, Callable[[], Agent]] = {"offline": OfflineAgent}


def build_agent(name: str) -> Agent:
    try:
        factory = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(sorted(AGENTS))}") from None
    return factory()
