"""Read-only calls are journalled per call, like world-changing ones: a read answers what it reads now.

Each read is a journal step keyed on its event, tool, canonical arguments and position (call_keys), so a retried or
resumed run reads back what the first attempt read, and a different read (another event, other arguments, the
same call again later in the run) is never answered from an earlier one's committed result."""

from __future__ import annotations

from typing import Any

from console.agents.claude import ClaudeAgent
from console.agents.gateway import ToolGateway
from console.agents.tools import PythonTool, tool_hints
from console.core import Store
from console.trust.policy import DEFAULT_ALLOW, Policy
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY, NOW, run, tool_results


class Weather:
    """A read-only Python tool whose answer changes with every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def tool(self) -> PythonTool:
        @tool_hints(open_world=False, read_only=True)
        def weather(city: str) -> str:
            """Today's weather in a city."""
            self.calls.append(city)
            return f"{city}: reading {len(self.calls)}"

        return PythonTool("weather", weather)


def agent_with(weather: Weather, claude: FakeClaude) -> ClaudeAgent:
    gateway = ToolGateway(Policy(allow=(*DEFAULT_ALLOW, "weather")), python_tools={"weather": weather.tool()})
    return ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url,
                       tools=gateway)


def answers(request: dict[str, Any]) -> list[str]:
    return [str(block["content"]) for block in tool_results(request) if block.get("type") == "tool_result"]


def test_each_read_only_call_reads_now_not_an_earlier_calls_result(claude: FakeClaude, store: Store) -> None:
    weather = Weather()
    agent = agent_with(weather, claude)
    store.ingest("chat", "m1", {"text": "weather in Paris and Rome, then Paris again"}, now=NOW)
    claude.reply(tool("t1", "weather", city="Paris"))
    claude.reply(tool("t2", "weather", city="Rome"))
    claude.reply(tool("t3", "weather", city="Paris"))
    claude.reply(text("Done."))
    run(agent, store)
    store.ingest("chat", "m2", {"text": "and Paris now?"}, now=NOW + 60)
    claude.reply(tool("t4", "weather", city="Paris"))
    claude.reply(text("Done."))
    run(agent, store, now=NOW + 60)

    assert weather.calls == ["Paris", "Rome", "Paris", "Paris"]
    seen = [answer for request in claude.requests[1:] for answer in answers(request)]
    assert [s for s in seen if "reading" in s] == [
        "Paris: reading 1", "Rome: reading 2", "Paris: reading 3", "Paris: reading 4"]
