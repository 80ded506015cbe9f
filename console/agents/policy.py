"""Who may run what: the owner's allow / ask / deny rules for tools, in Claude Code's shape.

    [permissions]                 # checked deny -> ask -> allow; the first match wins; anything unmatched asks
    allow = ["send_message", "recall", "mcp__shop__lookup_*"]
    ask   = ["mcp__shop__*"]
    deny  = ["mcp__shop__delete_*"]
    [permissions.untrusted]       # a run that holds any event from outside: only these run without asking
    allow = ["recall", "mcp__shop__lookup_*"]

Rules are shell-style globs (fnmatch, case-sensitive) over tool names. The policy decides; the core only
stores what was decided (an approval bound to the exact call), and the gateway (agents/tools.py) enforces it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from console.config import ConfigError

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "ask", "deny")

# Sources whose events the owner or the engine wrote: a run holding only these is trusted. Anything else came
# from outside (a webhook, a feed) and may carry text written by someone else: such a run is untrusted.
TRUSTED_SOURCES = frozenset({"chat", "timer", "approval"})

# What a trusted run may do without asking when the config names no rules: talk, keep its memory, ask.
DEFAULT_ALLOW = ("send_message", "recall", "remember", "forget", "ask_owner")
# A run that holds text from outside may still talk to the owner and ask: a message or a question reaches only
# the owner. Changing the agent's memory, setting timers or using any other tool asks first.
DEFAULT_UNTRUSTED_ALLOW = ("send_message", "recall", "ask_owner")
_KEYS = {"allow", "ask", "deny", "untrusted"}


def _patterns(value: Any, setting: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise ConfigError(f"{setting}: expected a list of tool names or globs, got {value!r}")
    return tuple(item.strip() for item in value)


# The rule of a call no list matched: it asks.
DEFAULT_RULE = "default"


@dataclass(frozen=True)
class Ruling:
    """What the policy decided for one tool, and which rule decided it: `<list>: <the glob that matched>`
    (`allow: mcp__shop__lookup_*`, `untrusted.allow: recall`, `deny: ...`, `ask: ...`), or `default`."""

    decision: Decision
    rule: str


@dataclass(frozen=True)
class Policy:
    allow: tuple[str, ...] = DEFAULT_ALLOW
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    untrusted_allow: tuple[str, ...] = DEFAULT_UNTRUSTED_ALLOW

    @classmethod
    def from_settings(cls, raw: Mapping[str, Any] | None) -> Policy:
        """The [permissions] table; ConfigError naming the key at fault. Lists not given keep their defaults."""
        raw = dict(raw or {})
        extra = sorted(set(raw) - _KEYS)
        if extra:
            raise ConfigError(f"permissions.{extra[0]}: unknown setting (expected allow, ask, deny or untrusted)")
        untrusted = raw.get("untrusted", {})
        if not isinstance(untrusted, dict) or set(untrusted) - {"allow"}:
            raise ConfigError("permissions.untrusted: expected a table with only `allow`")
        return cls(
            allow=_patterns(raw["allow"], "permissions.allow") if "allow" in raw else DEFAULT_ALLOW,
            ask=_patterns(raw["ask"], "permissions.ask") if "ask" in raw else (),
            deny=_patterns(raw["deny"], "permissions.deny") if "deny" in raw else (),
            untrusted_allow=(_patterns(untrusted["allow"], "permissions.untrusted.allow")
                             if "allow" in untrusted else DEFAULT_UNTRUSTED_ALLOW),
        )

    def decide(self, tool: str, *, untrusted: bool) -> Decision:
        """deny -> ask -> allow, the first match wins; unmatched asks. In an untrusted run only the
        untrusted allow list runs without asking (deny still denies)."""
        return self.judge(tool, untrusted=untrusted).decision

    def judge(self, tool: str, *, untrusted: bool) -> Ruling:
        """The decision with the rule that made it (what the audit trail records)."""
        if denied := _match(tool, self.deny):
            return Ruling("deny", f"deny: {denied}")
        if untrusted:
            if allowed := _match(tool, self.untrusted_allow):
                return Ruling("allow", f"untrusted.allow: {allowed}")
            return Ruling("ask", DEFAULT_RULE)
        if asked := _match(tool, self.ask):
            return Ruling("ask", f"ask: {asked}")
        if allowed := _match(tool, self.allow):
            return Ruling("allow", f"allow: {allowed}")
        return Ruling("ask", DEFAULT_RULE)


def _match(tool: str, patterns: Sequence[str]) -> str | None:
    """The first pattern that matches the tool's name, or None."""
    return next((pattern for pattern in patterns if fnmatch.fnmatchcase(tool, pattern)), None)


def untrusted_sources(sources: Iterable[str]) -> list[str]:
    """The sources in a run that make it untrusted (came from outside), in order, once each."""
    seen: list[str] = []
    for source in sources:
        if source not in TRUSTED_SOURCES and source not in seen:
            seen.append(source)
    return seen
