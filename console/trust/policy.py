"""Who may run what: the owner's allow / ask / deny rules for tools, in Claude Code's shape.

    [permissions]                 # checked deny -> ask -> allow; the first match wins; anything unmatched asks
    allow = ["send_message", "recall", "mcp__shop__lookup_*"]
    ask   = ["mcp__shop__*"]
    deny  = ["mcp__shop__delete_*"]
    [permissions.untrusted]       # an untrusted run (it read text from outside): runs unasked only what both
    allow = ["mcp__shop__lookup_*"]             # this list and the allow list above match

Rules are shell-style globs (fnmatch, case-sensitive) over tool names. The policy decides; the core only
stores what was decided (an approval bound to the exact call), and the gateway (agents/gateway.py) enforces it.
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
# the owner. Reading the owner's notes (private data), changing them, setting timers or using any other tool
# asks first (and recall of private notes asks whatever the lists say: console/agents/gateway.py).
DEFAULT_UNTRUSTED_ALLOW = ("send_message", "ask_owner")
_KEYS = {"allow", "ask", "deny", "untrusted"}


def _patterns(value: Any, setting: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise ConfigError(f"{setting}: expected a list of tool names or globs, got {value!r}")
    return tuple(item.strip() for item in value)


# The rule of a call no list matched: it asks.
DEFAULT_RULE = "default"
# An untrusted run's call that the trusted allow list matches but the untrusted one does not: it asks.
UNTRUSTED_RULE = "untrusted: not in untrusted.allow"
UNTRUSTED_REMEMBER_RULE = "untrusted: remember asks"
# A read-only, closed-world tool of a server marked trusted, which no list names.
READ_ONLY_RULE = "read-only tool of a trusted server"


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

    def decide(self, tool: str, *, untrusted: bool, read_only_default: bool = False) -> Decision:
        """deny -> ask -> allow, the first match wins; unmatched asks. An untrusted run runs unasked only
        what both allow lists match (see judge)."""
        return self.judge(tool, untrusted=untrusted, read_only_default=read_only_default).decision

    def judge(self, tool: str, *, untrusted: bool, read_only_default: bool = False) -> Ruling:
        """The decision with the rule that made it (what the audit trail records).

        deny, then ask, then allow. A trusted run runs unasked what `allow` matches; an untrusted one only
        what `allow` AND `untrusted.allow` both match, so an untrusted allow can never open what a trusted
        run must ask about. `remember` in an untrusted run always asks: a note outlives the run. With
        read_only_default (a read-only, closed-world tool of a server the owner marked trusted) a tool no
        list names counts as matched by `allow`."""
        if denied := _match(tool, self.deny):
            return Ruling("deny", f"deny: {denied}")
        if asked := _match(tool, self.ask):
            return Ruling("ask", f"ask: {asked}")
        allowed = _match(tool, self.allow)
        rule = f"allow: {allowed}" if allowed else READ_ONLY_RULE if read_only_default else None
        if rule is None:
            return Ruling("ask", DEFAULT_RULE)
        if not untrusted:
            return Ruling("allow", rule)
        if tool == "remember":
            return Ruling("ask", UNTRUSTED_REMEMBER_RULE)
        if also := _match(tool, self.untrusted_allow):
            return Ruling("allow", f"{rule} + untrusted.allow: {also}")
        return Ruling("ask", UNTRUSTED_RULE)


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
