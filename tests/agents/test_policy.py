"""The owner's policy: deny -> ask -> allow, the first match wins, unmatched asks; untrusted runs allow only
their own list; bad [permissions] tables are one line naming the key. And the owner's instructions file."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.agents.gateway import changes_world
from console.agents.registry import read_instructions
from console.agents.tools import BUILTINS, ToolHints, ToolSpec
from console.config import ConfigError, Settings
from console.trust.policy import DEFAULT_ALLOW, DEFAULT_UNTRUSTED_ALLOW, Policy, Ruling, untrusted_sources

POLICY = Policy.from_settings({
    "allow": ["send_message", "recall", "mcp__shop__lookup_*"],
    "ask": ["mcp__shop__refund"],
    "deny": ["mcp__shop__delete_*"],
    "untrusted": {"allow": ["recall", "mcp__shop__lookup_*"]},
})


@pytest.mark.parametrize(("tool", "trusted", "untrusted"), [
    ("send_message", "allow", "ask"),
    ("recall", "allow", "allow"),
    ("mcp__shop__lookup_order", "allow", "allow"),
    ("mcp__shop__refund", "ask", "ask"),
    ("mcp__shop__delete_order", "deny", "deny"),
    ("mcp__shop__list_orders", "ask", "ask"),      # unmatched asks
    ("remember", "ask", "ask"),
    ("mcp__tracker__open_issue", "ask", "ask"),
])
def test_the_policy_matrix(tool: str, trusted: str, untrusted: str) -> None:
    assert POLICY.decide(tool, untrusted=False) == trusted
    assert POLICY.decide(tool, untrusted=True) == untrusted


@pytest.mark.parametrize(("tool", "untrusted", "decision", "rule"), [
    ("mcp__shop__lookup_order", False, "allow", "allow: mcp__shop__lookup_*"),
    ("mcp__shop__lookup_order", True, "allow", "allow: mcp__shop__lookup_* + untrusted.allow: mcp__shop__lookup_*"),
    ("mcp__shop__refund", False, "ask", "ask: mcp__shop__refund"),
    ("mcp__shop__delete_order", True, "deny", "deny: mcp__shop__delete_*"),
    ("mcp__shop__list_orders", False, "ask", "default"),   # no list names it
    ("send_message", True, "ask", "untrusted: not in untrusted.allow"),
    ("mcp__shop__list_orders", True, "ask", "default"),
])
def test_the_policy_says_which_rule_decided(tool: str, untrusted: bool, decision: str, rule: str) -> None:
    ruling = POLICY.judge(tool, untrusted=untrusted)
    assert (ruling.decision, ruling.rule) == (decision, rule)
    assert POLICY.decide(tool, untrusted=untrusted) == decision


def test_an_untrusted_run_runs_unasked_only_what_both_allow_lists_match_and_never_what_ask_names() -> None:
    policy = Policy.from_settings({
        "allow": ["mcp__shop__lookup_*", "recall"],
        "ask": ["mcp__shop__refund"],
        "untrusted": {"allow": ["mcp__shop__*", "recall", "remember", "send_message"]},
    })
    # The untrusted list names refund, but ask does: it asks (it used to run unasked in untrusted runs).
    assert policy.decide("mcp__shop__refund", untrusted=True) == "ask"
    assert policy.decide("mcp__shop__refund", untrusted=False) == "ask"
    # In the untrusted list only, not the trusted one: asks. In both: runs.
    assert policy.decide("mcp__shop__cancel", untrusted=True) == "ask"
    assert policy.decide("send_message", untrusted=True) == "ask"
    assert policy.decide("mcp__shop__lookup_order", untrusted=True) == "allow"
    assert policy.decide("recall", untrusted=True) == "allow"


def test_remember_in_an_untrusted_run_asks_whatever_the_lists_say() -> None:
    policy = Policy.from_settings({"allow": ["remember"], "untrusted": {"allow": ["remember"]}})
    assert policy.decide("remember", untrusted=False) == "allow"
    assert policy.judge("remember", untrusted=True) == Ruling("ask", "untrusted: remember asks")


def test_a_read_only_tool_of_a_trusted_server_counts_as_allowed_unless_a_rule_names_it() -> None:
    policy = Policy.from_settings({"ask": ["mcp__shop__audit"], "deny": ["mcp__shop__secret"]})
    assert policy.judge("mcp__shop__lookup", untrusted=False, read_only_default=True) == Ruling(
        "allow", "read-only tool of a trusted server")
    assert policy.decide("mcp__shop__lookup", untrusted=False) == "ask"  # without the hint: unmatched asks
    assert policy.decide("mcp__shop__audit", untrusted=False, read_only_default=True) == "ask"
    assert policy.decide("mcp__shop__secret", untrusted=False, read_only_default=True) == "deny"
    # An untrusted run still needs the untrusted list.
    assert policy.decide("mcp__shop__lookup", untrusted=True, read_only_default=True) == "ask"


def test_ask_is_checked_before_allow_and_deny_before_both() -> None:
    policy = Policy.from_settings({"allow": ["mcp__shop__*"], "ask": ["mcp__shop__*"], "deny": ["mcp__shop__x"]})
    assert policy.decide("mcp__shop__lookup", untrusted=False) == "ask"
    assert policy.decide("mcp__shop__x", untrusted=False) == "deny"


def test_the_defaults_let_a_run_talk_and_keep_notes_and_an_untrusted_one_only_talk_and_ask() -> None:
    policy = Policy.from_settings(None)
    assert (policy.allow, policy.untrusted_allow) == (DEFAULT_ALLOW, DEFAULT_UNTRUSTED_ALLOW)
    assert [policy.decide(t, untrusted=False) for t in ("send_message", "remember", "set_timer")] == [
        "allow", "allow", "ask"]
    assert [policy.decide(t, untrusted=True) for t in ("send_message", "remember", "ask_owner")] == [
        "allow", "ask", "allow"]
    assert untrusted_sources(["chat", "github", "timer", "github", "stripe"]) == ["github", "stripe"]


@pytest.mark.parametrize(("table", "message"), [
    ({"allows": ["x"]}, "permissions.allows: unknown setting"),
    ({"allow": "send_message"}, "permissions.allow: expected a list of tool names or globs"),
    ({"deny": ["", "x"]}, "permissions.deny: expected a list"),
    ({"untrusted": {"ask": ["x"]}}, "permissions.untrusted: expected a table with only `allow`"),
])
def test_a_bad_permissions_table_is_one_line_naming_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Policy.from_settings(table)


def test_the_owners_instructions_come_from_their_file(tmp_path: Path) -> None:
    path = tmp_path / "instructions.md"
    assert read_instructions(Settings(instructions=path)) is None  # no file: no instructions
    path.write_text("Answer in Spanish. Never refund more than 50 EUR without asking.\n", encoding="utf-8")
    assert read_instructions(Settings(instructions=path)) == path.read_text(encoding="utf-8")


def test_what_counts_against_the_caps() -> None:
    def spec(kind: str, **hints: bool) -> ToolSpec:
        return ToolSpec("t", "", {}, kind, ToolHints(**hints))

    assert not changes_world(BUILTINS["send_message"])
    assert changes_world(spec("mcp")) and changes_world(spec("python"))
    assert changes_world(spec("mcp", read_only=True))  # an untrusted server's word is not taken
    assert not changes_world(spec("mcp", read_only=True, trusted_server=True))
    assert not changes_world(spec("python", read_only=True))
