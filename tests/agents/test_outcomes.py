"""Outcomes of world-changing calls (issue 18 items 5, 6 and 8), against real parts: a recording MCP server over
stdio written with the `mcp` SDK (tests/agents/mcp_servers.py; it records every call before acting and never
de-duplicates), the stand-in Messages API, and a real inbox file. Effects are counted at the server.

- A call that times out, or whose server dies mid-call, is `unknown`: never sent again unasked; the owner is asked
  whether to run it again, and it runs again only on yes (or, for a tool annotated idempotentHint or a server that
  honours the idempotency key, under the same key).
- An allowed call happens once per event across batch retries, keyed on the event and the call, not on the
  tool_use id; a reused tool_use id never makes a different call skipped.
- An error result is scrubbed of the server's secrets; a result is kept in the journal once, capped.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from console.agents.claude import ClaudeAgent, ClaudeError
from console.agents.gateway import ToolGateway
from console.agents.mcp import McpCallUnknown, McpHub
from console.agents.mcp_config import McpServerConfig
from console.agents.tools import MAX_JOURNAL_CHARS, PythonTool, tool_hints
from console.core import OutcomeUnknown, Store
from console.redact import HIDDEN
from console.trust.policy import DEFAULT_ALLOW, Policy
from tests.agents.mcp_servers import THIS_FILE, read_calls, stdio_command
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY, run
from tests.support import wait_until

NOW = 1_790_000_000
REFUND = "mcp__rec__refund"


class Rig:
    """A Claude agent whose tools are one recording MCP server (`rec`), under a policy of the test's."""

    def __init__(self, tmp_path: Path, claude: FakeClaude, **server: Any) -> None:
        self.log = tmp_path / "rec.calls"
        # trusted: its results do not taint the conversation (provenance is not what these tests are about)
        options: dict[str, Any] = {"call_timeout": 1.0, "trusted": True, **server}
        env = {**stdio_command("rec", self.log)["env"], **options.pop("env", {})}
        self.config = McpServerConfig(**{**stdio_command("rec", self.log), "env": env}, **options)
        self.environment: dict[str, str] = {}
        self.claude = claude
        self.agents: list[ClaudeAgent] = []

    def agent(self, *, allow: tuple[str, ...] = (), ask: tuple[str, ...] = ()) -> ClaudeAgent:
        hub = McpHub({"rec": self.config}, env=self.environment or None, backoff_base=0.05, backoff_max=0.2)
        gateway = ToolGateway(Policy(allow=(*DEFAULT_ALLOW, *allow), ask=ask), mcp=hub)
        made = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=self.claude.url,
                           tools=gateway)
        self.agents.append(made)
        return made

    def calls(self, tool_name: str | None = None) -> list[dict[str, Any]]:
        """What reached the server, by the server's own tool name (or mcp__rec__<name>)."""
        wanted = None if tool_name is None else tool_name.rpartition("__")[2]
        return [c for c in read_calls(self.log) if wanted is None or c["tool"] == wanted]


@pytest.fixture
def rig(tmp_path: Path, claude: FakeClaude) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(**server: Any) -> Rig:
        made.append(Rig(tmp_path, claude, **server))
        return made[-1]

    yield make
    for each in made:
        for agent in each.agents:
            agent.close()


def bodies(store: Store) -> list[str]:
    return [m.body for m in store.outbox_messages()]


# --- 5. an outcome that is not known is never redone silently ---------------------------------------------------

def test_an_approved_refund_slower_than_call_timeout_is_unknown_and_runs_again_only_on_the_owners_yes(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(ask=(REFUND,))
    store.ingest("chat", "m1", {"text": "refund order 881"}, now=NOW)
    claude.reply(tool("t1", REFUND, order="881", seconds=3))
    (asked,) = run(agent, store).approvals
    assert store.answer_approval(asked.request_id, "yes", now=NOW + 10) == "yes"

    # The refund gets no answer within call_timeout (1 s); the worker then dies before finishing the run.
    lost = run(agent, store, now=NOW + 10, finish=False)
    assert len(shop.calls(REFUND)) == 1
    step = store.journal_step(f"tool:{asked.request_id}")
    assert step is not None and step.state == "unknown" and "within 1 s" in step.result["outcome_unknown"]

    # A new generation takes the event over: the refund is not sent again; the owner is asked whether to.
    resumed = run(agent, store, "w2", NOW + 10_000)
    assert resumed.gen > lost.gen and [a.request_id for a in resumed.approvals] == [lost.approvals[0].request_id]
    assert len(shop.calls(REFUND)) == 1
    (again,) = store.pending_approvals()  # bound to the same call
    assert (again.tool, again.arguments) == (REFUND, {"order": "881", "seconds": 3})
    assert again.details["outcome_unknown"].startswith(f"{REFUND} may or may not have happened")
    (announcement,) = [body for body in bodies(store) if f"[{again.request_id}]" in body]
    assert "Run it again? It was called before and may or may not have happened" in announcement
    calls = store.tool_calls(resumed.events[0].id)
    assert [(c.decision, c.outcome) for c in calls] == [("approved", "unknown"), ("asked", "deferred")]
    trail = [row.body for row in store.audit_rows() if row.kind == "call" and row.event_id == resumed.events[0].id]
    assert [row["outcome"] for row in trail] == ["unknown", "deferred"]  # the audit trail says unknown, not failed
    assert len(claude.requests) == 1  # the conversation waits on the owner: no model turn was paid for

    # Only the owner's yes runs it again, under a key of its own; its result goes back to the waiting call.
    assert store.answer_approval(again.request_id, "yes", now=NOW + 10_020) == "yes"
    claude.reply(tool("t2", "send_message", text="Refunded 881."))
    claude.reply(text("Done."))
    shop.config = McpServerConfig(**{**shop.config.__dict__, "call_timeout": 10.0})
    agent = shop.agent(ask=(REFUND,))
    run(agent, store, "w2", NOW + 10_020)
    refunds = shop.calls(REFUND)
    assert [c["key"] for c in refunds] == [f"tool:{asked.request_id}", f"tool:{again.request_id}"]
    (answer,) = claude.requests[1]["messages"][-1]["content"]
    assert answer["tool_use_id"] == "t1" and answer["content"] == "refunded order 881"


def test_a_declined_rerun_is_never_sent_and_the_model_hears_the_outcome_stays_unknown(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(allow=(REFUND,))
    store.ingest("chat", "m1", {"text": "refund order 7"}, now=NOW)
    claude.reply(tool("t1", REFUND, order="7", seconds=3))
    (again,) = run(agent, store).approvals  # allowed, it ran unasked; its outcome is unknown, so the owner is asked
    assert again.details["outcome_unknown"] and len(shop.calls(REFUND)) == 1
    assert store.answer_approval(again.request_id, "no", now=NOW + 5) == "no"
    claude.reply(text("Understood."))
    run(agent, store, now=NOW + 5)
    assert len(shop.calls(REFUND)) == 1
    (answer,) = claude.requests[1]["messages"][-1]["content"]
    assert answer["is_error"] and "was not run again" in answer["content"] and "stays unknown" in answer["content"]


def test_a_server_that_dies_mid_call_after_doing_the_work_is_not_called_again_when_it_is_back(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(allow=("mcp__rec__crash",))
    store.ingest("chat", "m1", {"text": "refund order 9"}, now=NOW)
    claude.reply(tool("t1", "mcp__rec__crash", order="9"))
    first = run(agent, store, finish=False)  # and the worker dies before its finish
    (again,) = first.approvals
    assert "closed the connection during the call" in again.details["outcome_unknown"]
    assert len(shop.calls("crash")) == 1

    # The hub reconnects (a new server process); a new generation runs the event again, replaying the committed
    # turn: the same call, the same key, found unknown: the server is not called, the same question is asked.
    hub = agent.tools.mcp
    assert hub is not None
    wait_until(lambda: hub.tools()[0], "the server to be back")
    retried = run(agent, store, "w2", NOW + 10_000)
    assert retried.gen > first.gen and [a.request_id for a in retried.approvals] == [again.request_id]
    assert len(shop.calls("crash")) == 1
    (asked,) = store.pending_approvals()
    assert asked.request_id == again.request_id and "may or may not have happened" in asked.action


def test_an_unknown_outcome_in_a_turn_that_already_asked_is_told_in_an_urgent_message_and_not_run_again(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(allow=(REFUND,), ask=("mcp__rec__whoami",))
    store.ingest("chat", "m1", {"text": "check, then refund order 3"}, now=NOW)
    claude.reply(tool("t1", "mcp__rec__whoami"), tool("t2", REFUND, order="3", seconds=3))
    ctx = run(agent, store)
    (asked,) = ctx.approvals  # the whoami question; the refund could not ask as well
    assert asked.details["tool"] == "mcp__rec__whoami" and len(shop.calls(REFUND)) == 1
    (told,) = [body for body in bodies(store) if "may or may not have happened" in body]
    assert told.startswith(f"{REFUND} may or may not have happened") and "It was not run again" in told
    (pending,) = store.load_session(asked.request_id)["state"]["pending"]["results"]
    assert pending["tool_use_id"] == "t2" and pending["is_error"] and "not run again" in pending["content"]


def test_a_python_tool_that_times_out_is_unknown_and_asks_before_it_runs_again(
    claude: FakeClaude, store: Store
) -> None:
    calls: list[str] = []

    def transfer(account: str) -> str:
        """Transfers money (its bank did not answer in time)."""
        calls.append(account)
        raise TimeoutError("the bank did not answer within 30 s")

    gateway = ToolGateway(Policy(allow=(*DEFAULT_ALLOW, "transfer")), python_tools={
        "transfer": PythonTool("transfer", tool_hints(open_world=False)(transfer))})
    agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url,
                        tools=gateway)
    store.ingest("chat", "m1", {"text": "pay the rent"}, now=NOW)
    claude.reply(tool("t1", "transfer", account="rent"))
    run(agent, store)
    (again,) = store.pending_approvals()
    assert calls == ["rent"] and "the bank did not answer within 30 s" in again.details["outcome_unknown"]
    assert (again.tool, again.arguments) == ("transfer", {"account": "rent"})


def test_an_http_server_killed_mid_call_is_an_unknown_outcome_not_a_failure(tmp_path: Path) -> None:
    """The connection is lost under a call in flight (the server process is SIGKILLed after it recorded the
    call): the hub says the outcome is unknown, never that the call failed."""
    log = tmp_path / "remote.calls"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(THIS_FILE), "remote", "--http", str(port)],
                              env={**os.environ, "CALL_LOG": str(log)}, stderr=subprocess.DEVNULL)
    hub = McpHub({"remote": McpServerConfig("remote", url=f"http://127.0.0.1:{port}/mcp", call_timeout=10.0,
                                            connect_timeout=2.0)}, backoff_base=0.05, backoff_max=0.2)
    outcome: list[BaseException | dict[str, Any]] = []
    try:
        hub.start()
        wait_until(lambda: hub.status()["remote"] == "up", "the server to be up")

        def call() -> None:
            try:
                outcome.append(hub.call("mcp__remote__refund", {"order": "12", "seconds": 30}, idempotency_key="k-12"))
            except BaseException as exc:  # the test reads what the call raised
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        wait_until(lambda: read_calls(log), "the refund to reach the server")
        server.kill()
        caller.join(timeout=30)
        assert not caller.is_alive()
    finally:
        server.kill()
        server.wait(timeout=30)
        hub.close()
    (raised,) = outcome
    assert isinstance(raised, McpCallUnknown) and isinstance(raised, OutcomeUnknown), raised
    assert "closed the connection during the call" in str(raised)
    assert [c["key"] for c in read_calls(log)] == ["k-12"]


@pytest.mark.parametrize(("name", "honours_key"), [("mcp__rec__put", False), (REFUND, True)],
                         ids=["annotated idempotentHint", "server honours the key"])
def test_a_repeatable_call_whose_answer_was_lost_is_sent_again_under_the_same_key_unasked(
    name: str, honours_key: bool, rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig(idempotency_key=honours_key)
    agent = shop.agent(allow=(name,))
    arguments = {"setting": "colour"} if name.endswith("put") else {"order": "5"}
    store.ingest("chat", "m1", {"text": "go"}, now=NOW)
    claude.reply(tool("t1", name, **arguments, first_seconds=3))  # the first answer comes after call_timeout
    claude.reply(text("Done."))
    ctx = run(agent, store)
    first, second = shop.calls(name.rpartition("__")[2])
    assert first["key"] == second["key"] and first["key"].startswith(f"tool:{ctx.events[0].id}:{name}:")
    assert ctx.approvals == [] and store.pending_approvals() == []
    (result,) = claude.requests[1]["messages"][-1]["content"]
    assert "is_error" not in result and result["content"] in ("colour is set", "refunded order 5")
    (step,) = [s for s in store.journal_steps(ctx.events[0].id) if s.idem_key.startswith("tool:")]
    assert step.state == "committed" and step.executions == 2


# --- 6. allowed calls happen once per event across batch retries ----------------------------------------------

def test_an_allowed_call_in_a_failed_batch_happens_once_when_each_event_is_retried_alone(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(allow=(REFUND,))
    store.ingest("chat", "m1", {"text": "refund order 5"}, now=NOW)
    store.ingest("chat", "m2", {"text": "and tell me when it is done"}, now=NOW)
    claude.reply(tool("t1", REFUND, order="5"))
    claude.fail(500, "api_error", "Internal server error")
    with pytest.raises(ClaudeError):
        run(agent, store)
    assert len(shop.calls(REFUND)) == 1

    # Each event is retried alone: a new conversation each, whose model makes the same call under new tool_use ids.
    for use_id in ("t7", "t8"):
        claude.reply(tool(use_id, REFUND, order="5"))
        claude.reply(text("Done."))
        ctx = run(agent, store, now=NOW + 1_000)
        assert len(ctx.events) == 1
        (result,) = claude.requests[-1]["messages"][-1]["content"]
        assert result["tool_use_id"] == use_id and result["content"] == "refunded order 5"
    assert len(shop.calls(REFUND)) == 1  # one real refund, not three
    assert store.counts()["done"] == 2


def test_a_reused_tool_use_id_never_makes_a_different_call_skipped(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    shop = rig()
    agent = shop.agent(allow=(REFUND,))
    store.ingest("chat", "m1", {"text": "refund orders 5 and 6"}, now=NOW)
    claude.reply(tool("toolu_1", REFUND, order="5"))
    claude.reply(tool("toolu_1", REFUND, order="6"))  # a proxy that numbers tool uses per reply
    claude.reply(tool("toolu_1", REFUND, order="6"))  # the same call again: a second refund, as asked
    claude.reply(text("Done."))
    run(agent, store)
    assert [c["order"] for c in shop.calls(REFUND)] == ["5", "6", "6"]
    results = [r["messages"][-1]["content"][0]["content"] for r in claude.requests[1:]]
    assert results == ["refunded order 5", "refunded order 6", "refunded order 6"]
    assert len({c["key"] for c in shop.calls(REFUND)}) == 3


# --- 8. MCP error results are scrubbed; results are kept once, capped ------------------------------------------

def leaky(rig: Callable[..., Rig], **policy: tuple[str, ...]) -> tuple[str, ClaudeAgent]:
    """A secret substituted from ${LEAKY} into the recording server's ECHO_TOKEN, and an agent under `policy`."""
    secret = "sec-" + secrets.token_hex(10)
    shop = rig(env={"ECHO_TOKEN": "${LEAKY}"})
    shop.environment = {"LEAKY": secret}
    return secret, shop.agent(**policy)


def test_an_error_result_quoting_a_configured_secret_reaches_no_model_request_journal_or_message(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store, db_path: Path
) -> None:
    secret, agent = leaky(rig, allow=("mcp__rec__leak",))
    store.ingest("chat", "m1", {"text": "try it"}, now=NOW)
    claude.reply(tool("t1", "mcp__rec__leak"))
    claude.reply(tool("t2", "send_message", text="It failed."))
    claude.reply(text("Done."))
    run(agent, store)
    (result,) = claude.requests[1]["messages"][-1]["content"]
    assert result["is_error"] and f"the token {HIDDEN} was refused" in result["content"]
    assert secret not in json.dumps(claude.requests)
    store.close()
    files = [p for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)]
    assert files and all(secret.encode() not in p.read_bytes() for p in files)


def test_a_configured_secret_in_an_asked_calls_arguments_reaches_no_audit_row_when_answered(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store
) -> None:
    # Issue 31: the call's own row was scrubbed, the answer's row kept the secret.
    secret, agent = leaky(rig, ask=("mcp__rec__echo",))
    store.ingest("chat", "m1", {"text": "echo it"}, now=NOW)
    claude.reply(tool("t1", "mcp__rec__echo", text=f"the token is {secret}"))
    run(agent, store)
    [approval] = store.pending_approvals()
    assert approval.arguments == {"text": f"the token is {secret}"}  # what runs on yes stays exact
    assert store.answer_approval(approval.request_id, "no", now=NOW + 5, via="cli") == "no"
    rows = [row.body for row in store.audit_rows()]
    assert [row["decision"] for row in rows] == ["asked", "declined"]
    assert all(row["arguments"] == {"text": f"the token is {HIDDEN}"} for row in rows)
    assert secret not in json.dumps(rows)


def test_a_ten_megabyte_result_is_kept_once_capped_with_a_note(
    rig: Callable[..., Rig], claude: FakeClaude, store: Store, db_path: Path
) -> None:
    shop = rig(call_timeout=30.0)
    agent = shop.agent(allow=("mcp__rec__big",))
    store.ingest("chat", "m1", {"text": "fetch it"}, now=NOW)
    claude.reply(tool("t1", "mcp__rec__big", size=10_000_000))
    claude.reply(text("Done."))
    ctx = run(agent, store)
    (step,) = [s for s in store.journal_steps(ctx.events[0].id) if s.idem_key.startswith("tool:")]
    kept = step.result
    assert kept["structured"] is None  # it only repeated the text
    assert len(kept["text"]) == MAX_JOURNAL_CHARS and "[cut: the result had 10000000 characters" in kept["text"]
    size = sum(p.stat().st_size for p in db_path.parent.iterdir() if p.name.startswith(db_path.name))
    assert size < 2_000_000, size
