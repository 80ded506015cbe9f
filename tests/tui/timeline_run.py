"""A real run for the timeline's tests: the Claude agent against the stand-in Messages API (tests/agents/stand_in.py),
with a Python shop behind the gateway (lookup allowed, refund asked, delete refused), on a real inbox file and a
clock that moves as the calls take time: a model call takes 3 s, a lookup 2 s, a refund 4 s."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.agents.base import RunContext
from console.agents.claude import ClaudeAgent
from console.agents.gateway import ToolGateway
from console.agents.tools import PythonTool
from console.core import Store
from console.trust.policy import DEFAULT_ALLOW, Policy
from tests.agents.stand_in import FakeClaude, text, tool

FAKE_KEY = "sk-ant-test-timeline"
HOLDER = "worker-a:77"
MODEL_SECONDS, LOOKUP_SECONDS, REFUND_SECONDS = 3, 2, 4


@dataclass
class Shop:
    """The run's clock and the shop it calls: each call moves the clock by what it takes."""

    now: int
    calls: list[tuple[str, str]] = field(default_factory=list)

    def clock(self) -> int:
        return self.now

    def lookup_order(self, order: str) -> dict[str, Any]:
        """Look up an order."""
        self.now += LOOKUP_SECONDS
        self.calls.append(("lookup_order", order))
        return {"order": order, "status": "paid", "amount": 12.5}

    def refund(self, order: str) -> dict[str, Any]:
        """Refund an order."""
        self.now += REFUND_SECONDS
        self.calls.append(("refund", order))
        return {"order": order, "refunded": True}

    def delete_order(self, order: str) -> str:
        """Delete an order."""
        self.calls.append(("delete_order", order))
        return "deleted"

    def agent(self, claude: FakeClaude) -> ClaudeAgent:
        def model_takes_time(request: dict[str, Any]) -> None:
            self.now += MODEL_SECONDS

        claude.on_request = model_takes_time
        policy = Policy(allow=(*DEFAULT_ALLOW, "lookup_order"), ask=("refund",), deny=("delete_order",))
        tools = {name: PythonTool(name, getattr(self, name)) for name in ("lookup_order", "refund", "delete_order")}
        return ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url,
                           tools=ToolGateway(policy, python_tools=tools))

    def run(self, store: Store, agent: ClaudeAgent) -> None:
        """One run of what is due, as the worker makes it: lease, claim, the agent, the fenced finish."""
        gen = store.acquire(HOLDER, now=self.now)
        assert gen is not None
        events = store.claim_batch(HOLDER, gen, now=self.now)
        assert events, "nothing was due"
        ctx = RunContext(store, events, self.now, HOLDER, gen, approval_expiry=600, clock=self.clock)
        agent.run(ctx)
        assert ctx.finish(now=self.now)


def refund_asked(db: Path, claude: FakeClaude, shop: Shop) -> tuple[int, str]:
    """The first run: the model looks order 881 up (allowed) and tries to delete it (refused) in one turn, then
    asks to refund it (an approval). Returns the chat event's id and the approval's request id."""
    claude.reply(text("Let me check the order first."), tool("t1", "lookup_order", order="881"),
                 tool("t2", "delete_order", order="881"))
    claude.reply(tool("t3", "refund", order="881"))
    with Store.open(db) as store:
        assert store.ingest("chat", "c-1", {"text": "refund order 881 please"}, now=shop.now)
        shop.run(store, shop.agent(claude))
        shop.now += 1
        assert store.dispatch(lambda batch: None, now=shop.now) == 1  # the urgent "approval needed" message
        [approval] = store.pending_approvals()
        return store.events(source="chat")[0].id, approval.request_id


def refund_done(db: Path, claude: FakeClaude, shop: Shop, request_id: str, *, answered_after: int) -> None:
    """The owner says yes from Telegram; the resumed run makes the refund and answers."""
    claude.reply(text("Refunded order 881."))
    with Store.open(db) as store:
        shop.now += answered_after
        assert store.answer_approval(request_id, "yes", now=shop.now, via="telegram") == "yes"
        shop.run(store, shop.agent(claude))
