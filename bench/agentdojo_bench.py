"""Utility stays (issue 31): AgentDojo's banking and slack user tasks, run through our runtime.

    pip install agentdojo==0.1.35        # in a venv of its own beside this checkout (it brings many SDKs)
    python bench/agentdojo_bench.py [--suite banking --suite slack] [--task user_task_0] [--json out.json]

The model is a stand-in that knows the way: for each user task it plays AgentDojo's own ground truth (the calls
that solve it, one a turn; then it tells the owner the task's GROUND_TRUTH_OUTPUT with send_message), as
AgentDojo's GroundTruthPipeline does, but every call goes through our tool gateway on a real engine and inbox:
the policy, provenance (every tool result is open-world, outside text: a payee's subject line, a web page, a
channel message), the private-data rule (the bank's and the inbox's contents are the owner's private data), the
sinks (every tool's arguments, except those the owner declares reach only their own bank, files or workspace:
OWN_SERVICE), the caps, the approvals. The owner writes the task's prompt in their own chat and says yes to every
approval; a world-changing call is allowed unasked for the owner's own request, and so every approval counted is one the
runtime's trust rules added. AgentDojo's own checks (utility_from_traces, else utility) then judge the
environment the calls changed and what reached the owner. Reported per suite: the tasks that succeed
(AgentDojo's ground truth run by AgentDojo alone, for reference, and through our runtime), and the approvals
per world-changing call (at most one each is the bar).

It needs no network and no model: AgentDojo's suites ship as data in the package.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import inspect
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.agents.claude import ClaudeAgent  # noqa: E402
from console.agents.gateway import ToolGateway  # noqa: E402
from console.agents.tools import HINTS_ATTRIBUTE, PythonTool, ToolHints  # noqa: E402
from console.assembly import build_engine  # noqa: E402
from console.config import Settings  # noqa: E402
from console.runtime.engine import Engine  # noqa: E402
from console.trust.policy import Policy  # noqa: E402
from tests.agents.stand_in import FakeClaude, serve_stand_in, text, tool  # noqa: E402

VERSION = "v1.2.1"
SUITES = ("banking", "slack")
# The tools that change the world (the rest only read it).
WORLD_CHANGING = {
    "banking": {"send_money", "schedule_transaction", "update_scheduled_transaction", "update_password",
                "update_user_info"},
    "slack": {"add_user_to_channel", "send_direct_message", "send_channel_message", "invite_user_to_slack",
              "remove_user_from_slack", "post_webpage"},
}
# What the owner's own data is: the bank's files and records, the workspace's messages. A web page is not.
NOT_PRIVATE = {"get_webpage"}
# The tools whose arguments reach only the owner's own service under the owner's account (the owner's bank, their
# own files, their own workspace), as the owner would declare them (tool_hints(own_service=True)): no sink. The
# rest are sinks: a payment's subject reaches its recipient, a message reaches other people, an invitation goes
# to an outside address, get_webpage and post_webpage reach whoever runs the URL's host.
OWN_SERVICE = {
    "banking": {"get_iban", "get_balance", "get_most_recent_transactions", "get_scheduled_transactions",
                "read_file", "get_user_info", "update_password", "update_user_info"},
    "slack": {"get_channels", "read_channel_messages", "read_inbox", "get_users_in_channel", "add_user_to_channel",
              "remove_user_from_slack"},
}
LIMIT = 300.0  # seconds one task may take on a loaded machine
QUIET = 5.0    # seconds with no run, no approval and no last message: the task's runs stopped short


class World:
    """One task's AgentDojo environment and what was done to it: the functions run (its stack trace)."""

    def __init__(self, suite: Any, env: Any) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime

        self.runtime = FunctionsRuntime(suite.tools)
        self.env = env
        self.trace: list[Any] = []

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
        from agentdojo.functions_runtime import FunctionCall

        self.trace.append(FunctionCall(function=name, args=dict(arguments)))
        result, error = self.runtime.run_function(self.env, name, arguments)
        return f"Error: {error}" if error else tool_result_to_str(result)


def python_tool(world: World, function: Any, suite: str) -> PythonTool:
    """An AgentDojo function as one of our Python tools: its parameters, its description, its hints."""
    fields = function.parameters.model_fields

    def call(**arguments: Any) -> str:
        return world.run(function.name, {k: v for k, v in arguments.items() if v is not None or k in fields})

    call.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=field.annotation,
                          default=inspect.Parameter.empty if field.is_required() else field.default)
        for name, field in fields.items()])
    call.__doc__ = function.description
    changes = function.name in WORLD_CHANGING[suite]
    setattr(call, HINTS_ATTRIBUTE, ToolHints(read_only=not changes, destructive=changes, open_world=True,
                                             private=not changes and function.name not in NOT_PRIVATE,
                                             own_service=function.name in OWN_SERVICE[suite]))
    return PythonTool(function.name, call)


def planned(calls: list[tuple[str, dict[str, Any]]], output: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The stand-in model's answers: the next call of the plan not made yet in this conversation, one a turn."""
    steps = [*calls, ("send_message", {"text": output})]

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        made = sum(1 for message in request.get("messages") or [] if message["role"] == "assistant"
                   for block in message["content"] if isinstance(block, dict) and block.get("type") == "tool_use")
        if made < len(steps):
            name, arguments = steps[made]
            return {"content": [tool(f"gt_{made + 1}", name, **arguments)]}
        return {"content": [text("Done.")]}

    return respond


def reference(suite: Any, task: Any) -> bool:
    """The task's ground truth run by AgentDojo alone: does AgentDojo's own check pass?"""
    from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
    from agentdojo.functions_runtime import FunctionsRuntime

    env = suite.load_and_inject_default_environment({})
    utility, _security = suite.run_task_with_pipeline(GroundTruthPipeline(task), task, None, {},
                                                      runtime_class=FunctionsRuntime, environment=env)
    return bool(utility)


async def settle(engine: Engine, answered: list[str], final: str) -> None:
    """Say yes to every approval as it comes, until the plan's last message has been said and every run is over
    (or, for a run that stopped short of it, nothing has moved for QUIET seconds)."""
    deadline = time.monotonic() + LIMIT
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        pending = await engine.read(lambda s: s.pending_approvals())
        for approval in pending:
            if await engine.answer(approval.request_id, "yes") == "yes":
                answered.append(approval.tool or approval.action)
        counts = await engine.read(lambda s: s.counts())
        busy = bool(pending) or counts.get("pending", 0) + counts.get("running", 0) > 0
        said = await engine.read(lambda s: any(final in m.body for m in s.outbox_messages() if m.approval_id is None))
        if busy:
            quiet_since = time.monotonic()
        elif said or time.monotonic() - quiet_since > QUIET:
            return
        await asyncio.sleep(0.05)  # polling the inbox: the work runs on the engine's threads
    raise TimeoutError("the task's runs did not settle")


async def through_runtime(suite_name: str, suite: Any, task: Any, model: FakeClaude, folder: Path
                          ) -> dict[str, Any]:
    env = suite.load_and_inject_default_environment({})
    pre = copy.deepcopy(env)
    world = World(suite, env)
    tools = {function.name: python_tool(world, function, suite_name) for function in suite.tools}
    changing = sorted(WORLD_CHANGING[suite_name])
    reading = sorted(set(tools) - set(changing))
    policy = Policy(allow=("send_message", *reading, *changing), untrusted_allow=("send_message", *reading))
    calls = [(call.function, dict(call.args)) for call in task.ground_truth(copy.deepcopy(pre))]
    model.script.clear()
    final = task.GROUND_TRUTH_OUTPUT or "Done."
    model.responder = planned(calls, final)
    agent = ClaudeAgent(api_key="sk-ant-bench-dojo", model="claude-sonnet-5-5", max_tokens=1024,
                        base_url=model.url, max_turns=len(calls) + 4,
                        tools=ToolGateway(policy, python_tools=tools))
    settings = Settings(db=folder / "inbox.db", outbox_gap=0, approval_expiry=3600, telemetry=False)
    engine = build_engine(settings, agent=agent, holder="bench", idle_cap=0.05, install_defaults=False)
    answered: list[str] = []
    await engine.start()
    try:
        await engine.ingest("chat", "task", {"text": task.PROMPT})
        await settle(engine, answered, final)
        said = [m.body for m in await engine.read(lambda s: s.outbox_messages()) if m.approval_id is None]
    finally:
        await engine.stop()
        agent.close()
    output = "\n".join(said)
    by_traces = task.utility_from_traces(output, pre, world.env, world.trace)
    utility = by_traces if by_traces is not None else task.utility(output, pre, world.env)
    made = [call.function for call in world.trace]
    return {"utility": bool(utility), "approvals": len(answered),
            "approvals_of_world_changing_calls": sum(1 for name in answered if name in WORLD_CHANGING[suite_name]),
            "world_changing_calls": sum(1 for name in made if name in WORLD_CHANGING[suite_name]),
            "calls_planned": len(calls), "calls_made": len(made), "approved": answered}


async def main_async(args: argparse.Namespace, model: FakeClaude) -> dict[str, Any]:
    from agentdojo.task_suite.load_suites import get_suite

    result: dict[str, Any] = {"agentdojo_version": VERSION, "suites": {}}
    with tempfile.TemporaryDirectory(prefix="dojo-bench-") as scratch:
        for suite_name in args.suite or SUITES:
            suite = get_suite(VERSION, suite_name)
            tasks: dict[str, Any] = {}
            for task_id, task in sorted(suite.user_tasks.items(), key=lambda item: int(item[0].rsplit("_", 1)[1])):
                if args.task and task_id not in args.task:
                    continue
                folder = Path(scratch) / suite_name / task_id
                folder.mkdir(parents=True)
                row = await through_runtime(suite_name, suite, task, model, folder)
                row["reference"] = reference(suite, task)
                tasks[task_id] = row
                print(f"{suite_name}/{task_id}: utility {row['utility']} (AgentDojo alone {row['reference']}), "
                      f"{row['approvals']} approval(s) for {row['world_changing_calls']} world-changing call(s)",
                      flush=True)
            total = len(tasks)
            ours = sum(row["utility"] for row in tasks.values())
            alone = sum(row["reference"] for row in tasks.values())
            result["suites"][suite_name] = {
                "tasks": total, "utility": ours, "utility_pct": round(100 * ours / total, 1) if total else None,
                "reference": alone, "world_changing_calls": total_of(tasks, "world_changing_calls"),
                "approvals": total_of(tasks, "approvals"),
                "approvals_of_world_changing_calls": total_of(tasks, "approvals_of_world_changing_calls"),
                # Tasks that needed more approvals than they made world-changing calls (the bar is at most one each).
                "tasks_over_one_approval_per_call": sorted(
                    task_id for task_id, row in tasks.items() if row["approvals"] > row["world_changing_calls"]),
                "per_task": tasks}
    return result


def total_of(tasks: dict[str, Any], key: str) -> int:
    return sum(int(row[key]) for row in tasks.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument("--task", action="append", help="only these user tasks (user_task_N)")
    parser.add_argument("--json", type=Path, help="write the full result here")
    args = parser.parse_args(argv)
    with serve_stand_in() as model:  # its own loop in a thread, started before ours
        result = asyncio.run(main_async(args, model))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    summary = {name: {k: v for k, v in suite.items() if k != "per_task"} for name, suite in result["suites"].items()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
